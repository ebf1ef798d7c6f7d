"""The matrix: every recipe in every scenario, each cell in a network namespace of its own.

A cell is a child process, `unshare -rn python -m rehearsal.cell SPEC`
(cell.py), that plays one deletion and prints what it measured; the runner
starts `parallel` of them at a time. A rollout scenario becomes one cell per
replica, run `rollout_parallel` at a time in a phase of their own (their holds
are real; the replacements' start time is accounted, rollout.py), then one
`Rollout` per recipe. A vLLM recipe (one that sets vLLM's flags) is not run on
SGLang scenarios; a recipe with `only` runs in those scenarios alone.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache

from rehearsal.cell import ROOT, child_env
from rehearsal.record import Cell
from rehearsal.rollout import Rollout
from rehearsal.scenarios import Scenario
from rehearsal.strategies import Plan, Strategy
from rehearsal.timeline import REPLICA_START, ROUTER_LAG, VLLM_TEARDOWN, WARMUP, Scale

__all__ = ["ROOT", "Cell", "Job", "jobs", "namespace_prefix", "run_matrix"]


@cache
def namespace_prefix() -> tuple[str, ...]:
    """The command prefix that runs a process in a new network namespace, loopback only."""
    errors = []
    for prefix in (("unshare", "-rn"), ("unshare", "-n")):
        try:
            done = subprocess.run([*prefix, "true"], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired) as exc:
            errors.append(f"{' '.join(prefix)}: {exc}")
            continue
        if done.returncode == 0:
            return prefix
        errors.append(f"{' '.join(prefix)}: {done.stderr.strip() or done.returncode}")
    raise RuntimeError(
        "the rehearsal runs each cell in a network namespace of its own and cannot make one "
        f"here ({'; '.join(errors)})"
    )


@dataclass(frozen=True)
class Job:
    strategy: Strategy  # resolved: its G and --shutdown-timeout filled in
    scenario: Scenario
    replica: int | None = None


def applies(strategy: Strategy, scenario: Scenario) -> bool:
    """A vLLM recipe is not run on an SGLang scenario (its flags are vLLM's); a recipe
    run only where it measures something, only there."""
    if strategy.only and scenario.key not in strategy.only:
        return False
    return not (strategy.vllm_only and scenario.engine.kind != "vllm")


def jobs(strategies: Iterable[Strategy], scenarios: Iterable[Scenario]) -> list[Job]:
    """Every cell to run, scenario by scenario; a rollout's replicas each a cell."""
    out = []
    chosen = list(strategies)
    for sc in scenarios:
        for st in chosen:
            if not applies(st, sc):
                continue
            if sc.replicas > 1:
                out += [Job(st, sc, i) for i in range(sc.replicas)]
            else:
                out.append(Job(st, sc))
    return out


def expected(job: Job, router_lag: float) -> float:
    """About how long a cell lasts, in real seconds: to start the longest ones first."""
    sc, st = job.scenario, job.strategy
    load = sc.load
    work = sc.lag(router_lag) + load.high if load else 0.0
    hold = st.grace if sc.engine.metrics_hang or st.key == "curl-loop" else max(st.sleep, work)
    if st.shutdown_timeout and sc.engine.kind == "vllm":
        hold = max(hold, st.sleep + min(st.shutdown_timeout, VLLM_TEARDOWN[1]))  # its drain
    return (WARMUP if load else 0.0) + min(st.grace, hold) + 1.0


def run_job(job: Job, scale: Scale, router_lag: float, plan: Plan | None) -> Cell:
    """One cell, in a new network namespace; what it measured."""
    spec = {
        "strategy": dataclasses.asdict(job.strategy),
        "plan": None if plan is None else dataclasses.asdict(plan),
        "scenario": job.scenario.key,
        "scale": scale.factor,
        "router_lag": router_lag,
        "replica": job.replica,
    }
    limit = scale(job.strategy.grace + WARMUP + job.scenario.lag(router_lag) + 20) + 60
    done = subprocess.run(
        [*namespace_prefix(), sys.executable, "-m", "rehearsal.cell", json.dumps(spec)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=limit,
        cwd=ROOT,
        env=child_env(),
        check=False,
    )
    lines = done.stdout.splitlines()
    if done.returncode != 0 or not lines:
        tail = "\n".join(done.stderr.strip().splitlines()[-8:])
        raise RuntimeError(f"{job.strategy.key}/{job.scenario.key}: cell failed:\n{tail}")
    return Cell.from_json(json.loads(lines[-1]))


def run_matrix(
    strategies: Sequence[Strategy],
    scenarios: Sequence[Scenario],
    scale: Scale,
    parallel: int,
    on_cell: Callable[[Cell], None],
    router_lag: float = ROUTER_LAG,
    plan: Plan | None = None,
    rollout_parallel: int = 8,
    on_rollout: Callable[[Rollout], None] | None = None,
) -> tuple[list[Cell], list[Rollout]]:
    """Every recipe in every scenario; the rollouts last. on_cell / on_rollout as each ends."""
    resolved = [st.resolved(plan) for st in strategies]
    todo = jobs(resolved, scenarios)
    single = [j for j in todo if j.replica is None]
    replicas = [j for j in todo if j.replica is not None]

    def one(job: Job) -> Cell:
        cell = run_job(job, scale, router_lag, plan)
        if job.replica is None:
            on_cell(cell)
        return cell

    # Longest first, so that no long cell starts last; reported in the matrix's order.
    order = sorted(range(len(single)), key=lambda i: -expected(single[i], router_lag))
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        ran = dict(zip(order, pool.map(one, [single[i] for i in order]), strict=True))
    cells = [ran[i] for i in range(len(single))]
    rollouts: list[Rollout] = []
    if replicas:
        with ThreadPoolExecutor(max_workers=max(1, rollout_parallel)) as pool:
            done = list(pool.map(one, replicas))
        for st in resolved:
            mine = sorted((c for c in done if c.strategy == st.key), key=lambda c: c.replica or 0)
            if mine:
                rollout = Rollout(st.key, mine, REPLICA_START)
                rollouts.append(rollout)
                if on_rollout is not None:
                    on_rollout(rollout)
    return cells, rollouts
