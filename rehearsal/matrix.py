"""One cell (a strategy in a scenario) and the matrix of cells.

A cell starts the engine process, the load generator (traffic from WARMUP s
before the delete to the router lag after it), deletes the Pod through the
kubelet emulator at t=0, waits for every request to end, and reads the three
records back: the load's outcomes, the engine's event log, the kubelet's
signals. All times in a `Cell` are seconds from the delete, as measured.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rehearsal.kubelet import delete_pod
from rehearsal.scenarios import Scenario
from rehearsal.strategies import HookTarget, Strategy
from rehearsal.timeline import (
    GRACE,
    KILL_AFTER_TERM,
    ROUTER_LAG,
    SGLANG_NOTICE,
    WARMUP,
    Scale,
)

ROOT = Path(__file__).resolve().parents[1]
START_MARGIN = 1.0  # s before the first arrival, for the engine and the load to start


@dataclass(frozen=True)
class Request:
    id: str
    sent: float
    first: float | None
    end: float
    outcome: str


@dataclass(frozen=True)
class Read:
    start: float
    end: float | None  # None: never answered
    total: int | None


@dataclass
class Cell:
    """The outcome of one strategy in one scenario."""

    strategy: str
    scenario: str
    scale: float
    completed: int
    cut: int
    refused: int
    router_lag: float
    sigterm_at_s: float
    held_s: float
    hook_returned_s: float | None
    hook_exit: int | None
    sigkill: bool
    reads: int
    hook_log: str = ""
    requests: list[Request] = field(default_factory=list)
    read_log: list[Read] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        """The cell as one JSON object (`--json`)."""
        return {
            "strategy": self.strategy,
            "scenario": self.scenario,
            "completed": self.completed,
            "cut": self.cut,
            "refused": self.refused,
            "sigterm_at_s": round(self.sigterm_at_s, 4),
            "held_s": round(self.held_s, 4),
            "scale": self.scale,
            "router_lag_s": self.router_lag,
            "hook_returned_s": None
            if self.hook_returned_s is None
            else round(self.hook_returned_s, 4),
            "hook_exit": self.hook_exit,
            "engine_exit": "sigkill" if self.sigkill else "clean",
            "reads": self.reads,
            "hook_elapsed_s": self.hook_elapsed(),
        }

    def hook_elapsed(self) -> float | None:
        """drainhook's own `elapsed` (its summary line: from its process start to its return)."""
        for line in reversed(self.hook_log.splitlines()):
            if line.startswith("drainhook outcome="):
                for part in line.split():
                    if part.startswith("elapsed="):
                        return float(part.split("=", 1)[1])
        return None


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRAINHOOK_")}
    env.pop("PYTHONWARNINGS", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _start_engine(
    scenario: Scenario, scale: Scale, log: Path, delete_at: float
) -> tuple[subprocess.Popen[bytes], int]:
    load = scenario.load
    argv = [
        sys.executable,
        "-m",
        "rehearsal.engine",
        *scenario.engine.args(),
        "--durations",
        load.spec if load else "uniform:1:1",
        "--scale",
        f"{scale.factor:g}",
        "--log",
        str(log),
        # SGLang looks at its SIGTERM flag every 5 s from its own start: pin those looks
        # to 2.5 s after the delete + k * 5 s (the mean phase) for every strategy alike.
        "--watchdog-origin",
        repr(delete_at + scale(SGLANG_NOTICE / 2)),
    ]
    engine = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, cwd=ROOT, env=_env()
    )
    assert engine.stdout is not None
    line = engine.stdout.readline().decode()
    if not line.startswith("READY "):
        engine.kill()
        raise RuntimeError(f"engine did not start: {line!r}")
    return engine, int(line.split()[1])


def run_cell(
    strategy: Strategy, scenario: Scenario, scale: Scale, router_lag: float = ROUTER_LAG
) -> Cell:
    """Play one rollout and return what it cut and how long it held the engine."""
    with tempfile.TemporaryDirectory(prefix="rehearsal-") as tmp:
        work = Path(tmp)
        delete_at = time.monotonic() + START_MARGIN + scale(WARMUP if scenario.load else 0)
        engine, port = _start_engine(scenario, scale, work / "engine.jsonl", delete_at)
        load_proc: subprocess.Popen[bytes] | None = None
        try:
            if scenario.load:
                plan = [
                    {"id": f"r{i:03d}", "at": delete_at + scale(at)}
                    for i, at in enumerate(scenario.load.arrivals(router_lag))
                ]
                (work / "plan.json").write_text(json.dumps(plan))
                load_proc = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "rehearsal.load",
                        "--port",
                        str(port),
                        "--plan",
                        str(work / "plan.json"),
                        "--out",
                        str(work / "load.jsonl"),
                        "--timeout",
                        f"{scale(GRACE + 10):g}",
                    ],
                    stdin=subprocess.DEVNULL,
                    cwd=ROOT,
                    env=_env(),
                )
            hook_port = free_port() if scenario.hook_port_moved else port
            target = HookTarget(f"http://127.0.0.1:{hook_port}/metrics", scale)
            signals = delete_pod(engine, strategy, target, delete_at, work / "hook.log")
            if load_proc is not None:
                try:
                    load_proc.wait(timeout=scale(GRACE + KILL_AFTER_TERM) + 15)
                except subprocess.TimeoutExpired:
                    load_proc.kill()
                    load_proc.wait()
        finally:
            for proc in (engine, load_proc):
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait()
            if engine.stdout:
                engine.stdout.close()
        requests = _requests(work / "load.jsonl", signals.delete)
        reads = _reads(work / "engine.jsonl", signals.delete)
        hook_file = work / "hook.log"
        hook_log = hook_file.read_text(errors="replace") if hook_file.exists() else ""
    expected = len(scenario.load.arrivals(router_lag)) if scenario.load else 0
    if len(requests) != expected:
        raise RuntimeError(
            f"{strategy.key}/{scenario.key}: {len(requests)} of {expected} requests recorded"
        )
    if strategy.key == "drainhook" and "outcome=" not in hook_log and signals.hook_returned:
        raise RuntimeError(f"drainhook left no summary line:\n{hook_log}")

    def since(t: float | None) -> float | None:
        return None if t is None else t - signals.delete

    outcomes = [r.outcome for r in requests]
    return Cell(
        strategy=strategy.key,
        scenario=scenario.key,
        scale=scale.factor,
        router_lag=router_lag,
        completed=outcomes.count("completed"),
        cut=outcomes.count("cut"),
        refused=outcomes.count("refused"),
        sigterm_at_s=signals.sigterm - signals.delete,
        held_s=signals.exit - signals.delete,
        hook_returned_s=since(signals.hook_returned),
        hook_exit=signals.hook_exit,
        sigkill=signals.sigkill,
        reads=len(reads),
        hook_log=hook_log,
        requests=requests,
        read_log=reads,
    )


def _requests(path: Path, zero: float) -> list[Request]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        first = None if r["first"] is None else r["first"] - zero
        out.append(Request(r["id"], r["sent"] - zero, first, r["end"] - zero, r["outcome"]))
    return sorted(out, key=lambda r: r.id)


def _reads(path: Path, zero: float) -> list[Read]:
    """The /metrics reads the engine logged (whoever made them: only the hook reads)."""
    reads = []
    for line in path.read_text().splitlines():
        e = json.loads(line)
        if e["ev"] == "read":
            end = None if e["t1"] is None else e["t1"] - zero
            reads.append(Read(e["t0"] - zero, end, e["total"]))
    return reads


def run_matrix(
    strategies: Iterable[Strategy],
    scenarios: Iterable[Scenario],
    scale: Scale,
    parallel: int,
    on_cell: Callable[[Cell], None],
    router_lag: float = ROUTER_LAG,
) -> list[Cell]:
    """Every strategy in every scenario, `parallel` cells at a time; on_cell as each ends."""
    pairs = [(st, sc) for sc in scenarios for st in strategies]

    def one(pair: tuple[Strategy, Scenario]) -> Cell:
        cell = run_cell(pair[0], pair[1], scale, router_lag)
        on_cell(cell)
        return cell

    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        return list(pool.map(one, pairs))
