"""What the tests share: helpers, never tests.

No test module imports another; what two of them need lives here, and
tests/conftest.py keeps only the fixtures, the suite's hooks and the one
timing tolerance (`late()`).

    process     the hook as a subprocess, measured: Run, measure, base_env
    logs        reading a run's log lines: fields, hook_lines, connections_fit
    loopback    real HTTP servers on 127.0.0.1, in this process
    podns       a new, empty network namespace with scripted listeners
    measured    a hostile case's process: wall time, starvation and peak RSS
    manifests   Kubernetes manifests checked against the client's models
    rehearsal   the rehearsal (python -m rehearsal) run for its JSON rows
    conformance the shutdown episodes, simulated and live
    fuzzing     the scanners' corruptions and their invariants
    docparts    the marked parts of the docs
    waits       waiting on a condition, not a clock: until
"""
