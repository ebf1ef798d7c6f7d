"""drainhook: a Kubernetes preStop hook that lets an LLM engine finish its requests.

The package's rooms, and the rule between them: docs/development.md, "Layout".
"""

__version__ = "0.1.0"
