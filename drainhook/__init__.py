"""drainhook: a Kubernetes preStop hook that lets an LLM engine finish its requests.

The package's rooms (docs/development.md, "Layout"; tests/test_layout.py holds
the rule that each imports only the ones above it):

- the top level: errors, exits, numfmt, build_info, failsafe (the shared
  vocabulary, and wait's hold when it cannot run)
- engines/: what a body means (the gauge table, the scanners, verdicts)
- reading/: where and how to read (targets, HTTP, the side signals, rounds,
  the connections, listener discovery)
- hook/: the run (the loop, stall watch, signals, log, termination message)
- planning/: advice (plan, plan --observe, inject); sim/: the simulated engine
- cli/: the command line, which wires them all; __main__: the entry point
"""

__version__ = "0.1.0"
