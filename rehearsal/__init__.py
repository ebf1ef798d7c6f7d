"""The rehearsal: kubelet-emulated Pod deletions under live traffic, drain recipes side by side.

Every part is a real process on loopback: the simulated engine (drainhook's
own model, sim/, run by `python -m rehearsal.engine`, vLLM- or
SGLang-shaped), a client load generator (`python -m rehearsal.load`) that
records every request, and the preStop hook of each recipe, run by a kubelet
emulator (`kubelet.py`). Each cell (a recipe in a scenario) is a child process
in a network namespace of its own (`cell.py`, under `unshare -rn`).
`python -m rehearsal` (or `scripts/rehearse`) runs the matrix of recipes x
scenarios, an 8-replica rollout, and writes benchmarks/rehearsal.md.

Layout: `timeline.py` (the timing constants and `--scale`), `scenarios.py`,
`strategies.py` (the recipes, `drainhook plan`'s values), `engine.py`,
`load.py`, `kubelet.py`, `cell.py` (one cell, in its namespace), `record.py`
(what a cell measured), `matrix.py` (the cells to run, run in parallel),
`rollout.py` (the rollout's accounting and the fleet projection, pure),
`run.py` (one run, its data kept), `claims.py` (drainhook's claims as rules,
and why others do better), `report.py` (the tables, the report), `svg.py`
(the pictures),
`hooks/` (the shell loop and the poll script as an operator would write them).

Not part of the shipped package: drainhook never imports it.
"""
