"""drainhook: a Kubernetes preStop hook that lets an LLM engine finish its requests.

See CONTRACT-derived docs in the README; the modules, in reading order:
gauges (the engine table), exposition (body -> verdict), target, read (one
HTTP read), drain (the loop), config, report, cli.
"""

__version__ = "0.1.0"
