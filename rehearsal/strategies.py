"""The recipes compared: what the kubelet runs as the container's preStop, the engine's
flags, and G.

Each hook is nothing, the kubelet's own sleep action (no process), or an exec
hook: a real command the kubelet emulator starts in its own process group.
A recipe may set vLLM's `--shutdown-timeout` (on vLLM scenarios only) and its
own G. `drainhook+plan` takes its values from `drainhook plan --grace 60
--engine vllm`, asked once per run (`ask_plan`), the recipe drainhook's docs
recommend. `drainhook-st` is drainhook's defaults with `--shutdown-timeout
R - 1`, run only where it measures what that flag costs and buys.

`oracle` is no recipe but the physical floor: the kubelet emulator sends
SIGTERM the moment the replica's last request ended (it knows, from the load
generator's records), so its hold is the work plus the engine's own exit.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rehearsal.timeline import (
    EXIT_RESERVE,
    GRACE,
    INTERVAL,
    KSERVE_GRACE,
    LLMD_GRACE,
    MEASURED_SHUTDOWN_TIMEOUT,
    ORACLE_GRACE,
    PLAN_GRACE,
    READ_TIMEOUT,
    RECIPE_SHUTDOWN_TIMEOUT,
    RECIPE_SLEEP,
    SETTLE,
    Scale,
)

HOOKS = Path(__file__).resolve().parent / "hooks"
LOOP_PERIOD = 5.0  # the shell loop's sleep
CURL = shutil.which("curl")
TIMING_FLAGS = ("--grace", "--settle", "--exit-reserve", "--interval", "--read-timeout")


@dataclass(frozen=True)
class HookTarget:
    """What a hook is pointed at, for one cell."""

    url: str
    scale: Scale
    stall_after: float | None = None  # real seconds: drainhook's --stall-after W (the scenario's)


@dataclass(frozen=True)
class Plan:
    """What `drainhook plan --grace G --engine vllm --output json` recommends (real seconds)."""

    grace: float
    settle: float
    exit_reserve: float
    interval: float
    read_timeout: float
    arguments: tuple[str, ...]  # the preStop command's arguments after `wait`
    shutdown_timeout: float  # its `--shutdown-timeout` advice for vLLM (0: none)

    @property
    def deadline(self) -> float:
        return self.grace - self.exit_reserve


def parse_plan(document: Mapping[str, Any]) -> Plan:
    """The values of a `drainhook plan --output json` document."""
    command = [str(a) for a in document["command"]]
    # The engine's own flags the plan advises, as the plan states them.
    engine_args = [str(a) for a in document["applied"]["engine_args"]]
    advice = 0.0
    if "--shutdown-timeout" in engine_args:
        advice = float(engine_args[engine_args.index("--shutdown-timeout") + 1])
    return Plan(
        grace=float(document["grace"]),
        settle=float(document["settle"]),
        exit_reserve=float(document["exit_reserve"]),
        interval=float(document["interval"]),
        read_timeout=float(document["read_timeout"]),
        arguments=tuple(command[command.index("wait") + 1 :]),
        shutdown_timeout=advice,
    )


def ask_plan(grace: float = PLAN_GRACE) -> Plan:
    """Ask the CLI, as a real process, what it recommends for vLLM at this G."""
    argv = [sys.executable, "-m", "drainhook", "plan", "--grace", f"{grace:g}", "--engine", "vllm"]
    done = subprocess.run(
        [*argv, "--output", "json"], capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"drainhook plan failed ({done.returncode}): {done.stderr.strip()}")
    return parse_plan(json.loads(done.stdout))


@dataclass(frozen=True)
class Strategy:
    key: str
    label: str
    what: str
    kind: str  # none | sleep | exec | oracle
    sleep: float = 0.0  # real seconds, for the kubelet's sleep action
    grace: float = GRACE  # G: terminationGracePeriodSeconds
    shutdown_timeout: float = 0.0  # vLLM --shutdown-timeout this recipe sets (0: vLLM's default)
    from_plan: bool = False  # drainhook with `drainhook plan`'s values
    vllm_only: bool = False  # a vLLM recipe: not run on SGLang scenarios
    only: tuple[str, ...] = ()  # run in these scenarios only (empty: every one)

    def resolved(self, plan: Plan | None) -> Strategy:
        """The recipe with `drainhook plan`'s G and --shutdown-timeout filled in."""
        if not self.from_plan:
            return self
        if plan is None:
            raise ValueError(f"{self.key} needs `drainhook plan`'s values")
        return dataclasses.replace(self, grace=plan.grace, shutdown_timeout=plan.shutdown_timeout)

    def deadline(self, plan: Plan | None) -> float | None:
        """D for drainhook's recipes, None for the others."""
        if self.from_plan and plan is not None:
            return plan.deadline
        return GRACE - EXIT_RESERVE if self.key in ("drainhook", "drainhook-st") else None

    def command(self, target: HookTarget, plan: Plan | None = None) -> list[str]:
        """The exec hook's argv (empty for none and sleep)."""
        f = target.scale
        if self.key in ("sleep-15", "kserve", "llm-d"):
            return ["sleep", f.flag(self.sleep)]
        if self.key == "curl-loop":
            if CURL:
                return ["bash", str(HOOKS / "curl_loop.sh"), target.url, f.flag(LOOP_PERIOD)]
            return [sys.executable, str(HOOKS / "curl_loop.py"), target.url, f.flag(LOOP_PERIOD)]
        if self.key == "poll-script":
            timing = [GRACE, EXIT_RESERVE, INTERVAL, READ_TIMEOUT]
            return [sys.executable, str(HOOKS / "poll.py"), target.url, *map(f.flag, timing)]
        hook = [sys.executable, "-m", "drainhook", "wait", "--url", target.url]
        if target.stall_after is not None:
            hook += ["--stall-after", f.flag(target.stall_after)]
        if self.key in ("drainhook", "drainhook-st"):
            return [*hook, *_timing(f)]
        if self.from_plan and plan is not None:
            return [*hook, *_plan_arguments(plan, f)]
        return []


def _timing(f: Scale) -> list[str]:
    """drainhook's timeline flags, scaled; none at all at --scale 1 (its real defaults)."""
    if f.factor == 1.0:
        return []
    values = (GRACE, SETTLE, EXIT_RESERVE, INTERVAL, READ_TIMEOUT)
    pairs = zip(TIMING_FLAGS, values, strict=True)
    return [arg for name, value in pairs for arg in (name, f.flag(value))]


def _plan_arguments(plan: Plan, f: Scale) -> list[str]:
    """The plan's preStop arguments, its timeline given explicitly and scaled."""
    rest, skip = [], False
    for arg in plan.arguments:
        if skip:
            skip = False
        elif arg in TIMING_FLAGS:
            skip = True
        else:
            rest.append(arg)
    values = (plan.grace, plan.settle, plan.exit_reserve, plan.interval, plan.read_timeout)
    pairs = zip(TIMING_FLAGS, values, strict=True)
    return [*rest, *(arg for name, value in pairs for arg in (name, f.flag(value)))]


STRATEGIES: tuple[Strategy, ...] = (
    Strategy("none", "no hook", "SIGTERM at the delete.", "none"),
    Strategy(
        "sleep-5",
        "sleep 5",
        "The kubelet's sleep action, 5 s (no process in the container).",
        "sleep",
        sleep=5.0,
    ),
    Strategy("sleep-15", "sleep 15", "exec `sleep 15`.", "exec", sleep=15.0),
    Strategy(
        "curl-loop",
        "curl loop",
        "bash: curl /metrics, grep -m1 each vLLM gauge, compare to 0.0, sleep 5; "
        "no deadline, no curl timeout.",
        "exec",
    ),
    Strategy(
        "poll-script",
        "poll script",
        "Reads every 1 s, returns on the 2nd idle read, stops reading at G - 5 with 1 s "
        "read timeouts; a body without the gauges is idle; sums negative values; no settle.",
        "exec",
    ),
    Strategy(
        "kserve",
        "kserve",
        "KServe 0.19's vLLM presets: exec `sleep 15`, vLLM `--shutdown-timeout 45` (G - 15), "
        "G = 60.",
        "exec",
        sleep=RECIPE_SLEEP,
        grace=KSERVE_GRACE,
        shutdown_timeout=RECIPE_SHUTDOWN_TIMEOUT,
        vllm_only=True,
    ),
    Strategy(
        "llm-d",
        "llm-d",
        "The llm-d guides: exec `sleep 15`, vLLM `--shutdown-timeout 45`, G = 75.",
        "exec",
        sleep=RECIPE_SLEEP,
        grace=LLMD_GRACE,
        shutdown_timeout=RECIPE_SHUTDOWN_TIMEOUT,
        vllm_only=True,
    ),
    Strategy(
        "drainhook", "drainhook", "`drainhook wait` with its defaults (S 5, I 1, R 5).", "exec"
    ),
    Strategy(
        "drainhook-st",
        "drainhook st4",
        f"`drainhook wait` with its defaults and vLLM `--shutdown-timeout "
        f"{MEASURED_SHUTDOWN_TIMEOUT:g}` (R - 1), G 30: what that flag costs and buys, against "
        "drainhook alone.",
        "exec",
        shutdown_timeout=MEASURED_SHUTDOWN_TIMEOUT,
        vllm_only=True,
        only=("idle", "short", "outlive", "router-lag-20", "rollout"),
    ),
    Strategy(
        "drainhook+plan",
        "drainhook+plan",
        f"`drainhook wait` with what `drainhook plan --grace {PLAN_GRACE:g} --engine vllm` "
        "gives (the recipe `plan` and `inject` write), with its vLLM `--shutdown-timeout` "
        "advice, if any; G as planned.",
        "exec",
        grace=PLAN_GRACE,
        from_plan=True,
        vllm_only=True,
    ),
    Strategy(
        "oracle",
        "oracle",
        "No recipe: SIGTERM the moment the replica's last request ended, then the engine's "
        "own exit. The physical floor of a hold.",
        "oracle",
        grace=ORACLE_GRACE,
    ),
)
ORACLE = "oracle"

BY_KEY = {s.key: s for s in STRATEGIES}
