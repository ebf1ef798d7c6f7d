"""drainhook: a Kubernetes preStop hook that lets an LLM engine finish its requests.

The modules, in reading order:

- gauges: the engine table (which gauges count)
- verdict: a read's verdict, and counted values -> verdict
- exposition, loads: the /metrics and /v1/loads scanners (body -> verdict)
- errors: the error family, each kind with its exit code
- target, auth: where to read (URL, annotations, loopback rule, TLS, API key)
- read: one HTTP read -> one verdict; rounds: several targets as one read,
  merge: identical series on several targets counted once
- sources: SGLang's live count (/metrics with /v1/loads beside it, --source auto)
- listeners, discover: listener discovery (/proc/net -> reads; the search, and
  the reader that searches when every target refused)
- drain: the loop (reads -> outcome), under an injected clock
- config: the frozen config; report: log lines and probe output
- termination: the outcome's one line for the Pod's status
- hook: the hook's run (config in, outcome and exit code out)
- flags, cli: the command line (flags and environment -> config); __main__
- plan, install: the other commands; histogram, observe: `plan --observe`
  (body -> latency histogram -> G); signals, clock, build_info: the process
- sim: the simulated engine of `demo` and the rehearsal, off the hook's import path
"""

__version__ = "0.1.0"
