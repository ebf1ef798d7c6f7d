"""The rehearsal: kubelet-emulated rollouts under live traffic, drain strategies side by side.

Every part is a real process on loopback: a simulated engine
(`python -m rehearsal.engine`, vLLM- or SGLang-shaped), a client load generator
(`python -m rehearsal.load`) that records every request, and the preStop hook
of each strategy, run by a kubelet emulator (`kubelet.py`) in the runner's
process. `python -m rehearsal` (or `scripts/rehearse`) runs the matrix of
strategies x scenarios and writes benchmarks/rehearsal.md.

Layout: `timeline.py` (the timing constants and `--scale`), `scenarios.py`,
`strategies.py`, `engine.py`, `load.py`, `kubelet.py`, `matrix.py` (one cell,
the matrix), `report.py` (table, checks, analysis), `svg.py` (the picture),
`hooks/` (the shell loop and the poll script as an operator would write them).

Not part of the shipped package: drainhook never imports it.
"""
