"""One `scripts/rehearse` run: what it measured, how and where it ran, and its data kept
(`--data`) to write the report again (`--from-data`) without running anything.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rehearsal import scenarios as scenario_table
from rehearsal.record import Cell
from rehearsal.rollout import Rollout
from rehearsal.strategies import Plan
from rehearsal.timeline import (
    DEADLINE,
    INTERVAL,
    REPLICA_START,
    ROUTER_LAG,
    SETTLE,
    Scale,
)

DRAINHOOKS = ("drainhook", "drainhook+plan")  # the recipes whose claims the report checks
ORACLE = "oracle"  # the physical floor, not a recipe: never a competitor
# Not competitors of drainhook's recipes: those, the oracle, and drainhook-st (drainhook
# with vLLM's --shutdown-timeout, run to measure that flag).
NOT_RIVALS = (*DRAINHOOKS, ORACLE, "drainhook-st")


@dataclass
class Run:
    """What one `scripts/rehearse` run measured, and how and where it ran."""

    cells: Sequence[Cell]
    rollouts: Sequence[Rollout]
    scale: Scale
    wall: float
    plan: Plan | None
    parallel: int = 3
    rollout_parallel: int = 8
    argv: str = field(default_factory=lambda: shown_argv(sys.argv[1:]))
    date: str = field(default_factory=lambda: datetime.date.today().isoformat())
    python: str = field(default_factory=platform.python_version)
    cpus: int = field(default_factory=lambda: os.cpu_count() or 0)
    load: float = field(default_factory=lambda: os.getloadavg()[1])
    load_start: float | None = None  # the 5-minute load average when the run began

    def cell(self, strategy: str, scenario: str) -> Cell | None:
        for c in self.cells:
            if c.strategy == strategy and c.scenario == scenario:
                return c
        return None

    def rollout(self, strategy: str) -> Rollout | None:
        return next((r for r in self.rollouts if r.strategy == strategy), None)

    def real(self, measured: float) -> float:
        return self.scale.real(measured)

    def timeline(self, key: str) -> tuple[float, float, float] | None:
        """A drainhook recipe's S, I and D (real seconds); None if it did not run."""
        if key in ("drainhook", "drainhook-st"):
            return SETTLE, INTERVAL, DEADLINE
        if key == "drainhook+plan" and self.plan is not None:
            return self.plan.settle, self.plan.interval, self.plan.deadline
        return None

    def ran(self, key: str) -> bool:
        return any(c.strategy == key for c in self.cells) or self.rollout(key) is not None

    def lag(self) -> float:
        plain = [c for c in self.cells if scenario_table.BY_KEY[c.scenario].router_lag is None]
        return plain[0].router_lag if plain else ROUTER_LAG


PATH_OPTIONS = ("--data", "--report", "--from-data")


def shown_argv(argv: Sequence[str]) -> str:
    """The command line as the report shows it: without the options that name files."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in PATH_OPTIONS:
            skip = True
        elif not arg.startswith(tuple(f"{o}=" for o in PATH_OPTIONS)):
            out.append(arg)
    return " ".join(out)


# --- a run's data, kept to write the report again -------------------------------------------


def save(path: Path, run: Run) -> None:
    """Every cell of the run, as JSON lines, after one line on the run itself."""
    head = {
        "run": {
            "scale": run.scale.factor,
            "wall": run.wall,
            "plan": None if run.plan is None else dataclasses.asdict(run.plan),
            "parallel": run.parallel,
            "rollout_parallel": run.rollout_parallel,
            "argv": run.argv,
            "date": run.date,
            "python": run.python,
            "cpus": run.cpus,
            "load": run.load,
            "load_start": run.load_start,
        }
    }
    lines = [json.dumps(head)]
    lines += [json.dumps({"cell": c.to_json()}) for c in run.cells]
    for r in run.rollouts:
        lines += [json.dumps({"cell": c.to_json(), "rollout": r.strategy}) for c in r.cells]
    path.write_text("\n".join(lines) + "\n")


def load(path: Path) -> Run:
    """The run `save` wrote."""
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    head = lines[0]["run"]
    cells = [Cell.from_json(e["cell"]) for e in lines[1:] if "rollout" not in e]
    by_recipe: dict[str, list[Cell]] = {}
    for e in lines[1:]:
        if "rollout" in e:
            by_recipe.setdefault(e["rollout"], []).append(Cell.from_json(e["cell"]))
    rollouts = [
        Rollout(key, sorted(cs, key=lambda c: c.replica or 0), REPLICA_START)
        for key, cs in by_recipe.items()
    ]
    plan = head["plan"]
    return Run(
        cells,
        rollouts,
        Scale(head["scale"]),
        head["wall"],
        None if plan is None else Plan(**{**plan, "arguments": tuple(plan["arguments"])}),
        head["parallel"],
        head["rollout_parallel"],
        head["argv"],
        head["date"],
        head["python"],
        head["cpus"],
        head["load"],
        head.get("load_start"),
    )
