"""`drainhook plan`: the timeline of CONTRACT §1 for given values, with warnings,
as text, JSON or the Pod-spec fragment that runs it (CONTRACT §4).

Pure: a `WaitConfig` (the same value `wait` runs on, so the deadline is the
hook's own) plus a role and a binary path in, a `Plan` and its renderings out.
YAML is written by hand so that the hook never needs a YAML library.
"""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

from drainhook.config import (
    DEFAULT_CONFIRM,
    DEFAULT_EXIT_RESERVE,
    DEFAULT_GRACE,
    DEFAULT_INTERVAL,
    DEFAULT_LINGER,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_SETTLE,
    Reach,
    WaitConfig,
)
from drainhook.errors import UsageError
from drainhook.gauges import BY_NAME
from drainhook.target import build_url, parse_url

SCHEMA = 1
ROLES = ("unified", "prefill", "decode")
OUTPUTS = ("text", "json", "yaml")
DEFAULT_BINARY = "/usr/local/bin/drainhook"

# A grace below 15 s leaves no room to settle, read and exit; above an hour, a
# drain outlasts what node drains allow (the cluster autoscaler's default
# --max-graceful-termination-sec is 600 s) and holds a rollout that long.
GRACE_MIN = 15.0
GRACE_MAX = 3600.0
# Endpoint controllers, kube-proxy and ingress controllers usually drop a
# deleted Pod within a few seconds; 5 s is the common allowance.
ROUTER_DEREGISTRATION = 5.0
# An SGLang prefill or decode server (disaggregation, 0.5.x) needs about 20 s
# after SIGTERM to exit; G = 45 then leaves 20 s to drain after a 5 s settle.
SGLANG_PD_EXIT = 20.0
SGLANG_PD_GRACE = 45.0
# The kubelet gives a container at least 2 s between SIGTERM and SIGKILL
# (minimumGracePeriodInSeconds in kuberuntime), even when the hook used all of G.
KUBELET_MIN_STOP = 2.0
# `vllm serve --shutdown-timeout N` (vLLM >= 0.18.0, vllm-project/vllm#34730)
# lets running requests go on for N s after SIGTERM before it aborts them.
VLLM_SHUTDOWN_TIMEOUT_SINCE = "0.18"


@dataclass(frozen=True)
class PlanWarning:
    """One thing the plan's numbers get wrong, and why it matters."""

    code: str
    message: str
    reason: str


@dataclass(frozen=True)
class Plan:
    """The instants of one timeline, in seconds from the hook's start (t=0)."""

    config: WaitConfig
    role: str
    binary: str
    first_read: float | None  # None: the deadline comes before the settle ends
    idle_return: float  # when an idle engine's hook returns (reads take no time)
    idle_drains: bool  # whether that return is `drained` (else the deadline comes first)
    reads_max: int  # reads that fit before D when each takes no time

    @property
    def warnings(self) -> tuple[PlanWarning, ...]:
        """What RULES find wrong with this plan, in their order."""
        return tuple(w for rule in RULES if (w := rule(self)) is not None)

    @property
    def engine(self) -> str:
        return self.config.reach.engine

    @property
    def grace(self) -> float:
        return self.config.grace

    @property
    def settle_end(self) -> float:
        return min(self.config.settle, self.deadline)

    @property
    def deadline(self) -> float:
        return self.config.deadline

    @property
    def sigterm_latest(self) -> float:
        """The kubelet sends SIGTERM as soon as the hook returns: at D at the latest."""
        return self.deadline

    @property
    def kill(self) -> float:
        """SIGKILL: at G, or 2 s after the hook when it returned later than G - 2."""
        return max(self.grace, self.deadline + KUBELET_MIN_STOP)

    @property
    def command(self) -> tuple[str, ...]:
        return prestop_command(self.config, self.binary)


def wait_config(
    *,
    grace: float = DEFAULT_GRACE,
    settle: float = DEFAULT_SETTLE,
    exit_reserve: float = DEFAULT_EXIT_RESERVE,
    interval: float = DEFAULT_INTERVAL,
    read_timeout: float = DEFAULT_READ_TIMEOUT,
    confirm: int = DEFAULT_CONFIRM,
    linger: float = DEFAULT_LINGER,
    max_wait: float | None = None,
    engine: str = "auto",
) -> WaitConfig:
    """The `WaitConfig` that `wait` would build from these flags (default target)."""
    port = BY_NAME[engine].default_port if engine in BY_NAME else BY_NAME["vllm"].default_port
    target = parse_url(build_url("http", "127.0.0.1", port, "/metrics"))
    return WaitConfig(
        reach=Reach(target=target, engine=engine, read_timeout=read_timeout),
        grace=grace,
        settle=settle,
        exit_reserve=exit_reserve,
        interval=interval,
        confirm=confirm,
        linger=linger,
        max_wait=max_wait,
    )


def make_plan(config: WaitConfig, role: str = "unified", binary: str = DEFAULT_BINARY) -> Plan:
    """The timeline `wait` runs for config, and what is wrong with it."""
    if role not in ROLES:
        raise UsageError(f"--role must be one of {', '.join(ROLES)}, not {role!r}")
    config.check()
    s, d, i = config.settle, config.deadline, config.interval
    first_read = s if s < d else None
    confirmed = s + (config.confirm - 1) * i
    drains = confirmed < d
    idle_return = min(confirmed + config.linger, d) if drains else d
    reads_max = math.ceil((d - s) / i - 1e-9) if d > s else 0
    return Plan(config, role, binary, first_read, idle_return, drains, reads_max)


# The warnings: one rule each, `(plan) -> PlanWarning | None`, checked in the
# order of RULES (the order `plan` prints them). A new warning is one function
# and one entry there. They read only the plan, so any WaitConfig's plan has
# them: `make_plan(config).warnings`.
Rule = Callable[[Plan], PlanWarning | None]


def _grace_range(plan: Plan) -> PlanWarning | None:
    g = plan.grace
    if g < GRACE_MIN:
        return PlanWarning(
            "grace-range",
            f"G = {_s(g)} is under {_s(GRACE_MIN)}",
            "there is no room to settle, read and still leave the engine time to exit",
        )
    if g > GRACE_MAX:
        return PlanWarning(
            "grace-range",
            f"G = {_s(g)} is over {_s(GRACE_MAX)}",
            "a drain that long outlasts node drains (the cluster autoscaler waits "
            "600 s by default) and holds every rollout as long",
        )
    return None


def _grace_fraction(plan: Plan) -> PlanWarning | None:
    if plan.grace == int(plan.grace):
        return None
    return PlanWarning(
        "grace-fraction",
        f"G = {_s(plan.grace)} is not whole seconds",
        "terminationGracePeriodSeconds is an integer and --grace must equal it",
    )


def _no_room(plan: Plan) -> PlanWarning | None:
    c = plan.config
    need = (c.confirm - 1) * c.interval + c.reach.read_timeout
    if c.settle + need <= plan.deadline:
        return None
    return PlanWarning(
        "no-room",
        f"D - S = {_s(plan.deadline - c.settle)} leaves no room for the {c.confirm} confirming "
        f"reads (they need {_s(need)}: {c.confirm - 1} x interval + read timeout)",
        "even an idle engine's hook then runs to the deadline; raise G, or lower "
        "--settle, --exit-reserve or --interval",
    )


def _settle_short(plan: Plan) -> PlanWarning | None:
    s = plan.config.settle
    if s >= ROUTER_DEREGISTRATION:
        return None
    return PlanWarning(
        "settle-short",
        f"settle S = {_s(s)} is shorter than the usual router deregistration "
        f"({_s(ROUTER_DEREGISTRATION)})",
        "a router that has not yet dropped the Pod may still send it a request "
        "after the hook has read it idle; that request dies at SIGTERM",
    )


def _exit_reserve_short(plan: Plan) -> PlanWarning | None:
    r = plan.config.exit_reserve
    if r >= KUBELET_MIN_STOP:
        return None
    return PlanWarning(
        "exit-reserve-short",
        f"exit reserve R = {_s(r)} is under {_s(KUBELET_MIN_STOP)}: the kill lands "
        f"at D + {_s(KUBELET_MIN_STOP)} = {_s(plan.kill)}, after G",
        "the kubelet always leaves a container 2 s between SIGTERM and SIGKILL, "
        "and an engine needs seconds to exit cleanly",
    )


def _sglang_pd_exit(plan: Plan) -> PlanWarning | None:
    g, r, role = plan.grace, plan.config.exit_reserve, plan.role
    if plan.engine not in ("sglang", "auto") or role not in ("prefill", "decode"):
        return None
    if r >= SGLANG_PD_EXIT and g >= SGLANG_PD_GRACE:
        return None
    return PlanWarning(
        "sglang-pd-exit",
        f"an SGLang {role} server needs about {_s(SGLANG_PD_EXIT)} after SIGTERM: "
        f"use --exit-reserve {_n(SGLANG_PD_EXIT)} (now {_s(r)}) and G about "
        f"{_s(SGLANG_PD_GRACE)} (now {_s(g)})",
        "with less, the kubelet kills it before it has exited; "
        "G = 45 leaves 20 s to drain after a 5 s settle",
    )


def _vllm_prefill_linger(plan: Plan) -> PlanWarning | None:
    if plan.engine not in ("vllm", "auto") or plan.role != "prefill" or plan.config.linger:
        return None
    return PlanWarning(
        "vllm-prefill-linger",
        "a vLLM prefill (KV producer) reads idle while decode instances still pull "
        "its KV: add --linger SECONDS, the longest pull you expect",
        "its running/waiting gauges drop to 0 when the prefill ends, before the KV "
        "is read; SIGTERM then frees the KV under the decode",
    )


def _vllm_shutdown_timeout(plan: Plan) -> PlanWarning | None:
    if plan.engine != "vllm":
        return None
    n = math.floor(plan.config.exit_reserve - 1)
    advice = (
        f"suggest --shutdown-timeout {n} (R - 1)"
        if n >= 1
        else "raise --exit-reserve to use it (N = R - 1)"
    )
    return PlanWarning(
        "vllm-shutdown-timeout",
        f"vLLM >= {VLLM_SHUTDOWN_TIMEOUT_SINCE}: `vllm serve --shutdown-timeout N` lets "
        f"requests still running at D go on for N more seconds; {advice}",
        "without it vLLM aborts every running request on SIGTERM; N = R - 1 "
        "ends them before the kill at G with a second to exit",
    )


RULES: tuple[Rule, ...] = (
    _grace_range,
    _grace_fraction,
    _no_room,
    _settle_short,
    _exit_reserve_short,
    _sglang_pd_exit,
    _vllm_prefill_linger,
    _vllm_shutdown_timeout,
)


def prestop_command(config: WaitConfig, binary: str = DEFAULT_BINARY) -> tuple[str, ...]:
    """The preStop exec command that runs config: `--grace` always, other flags when
    they differ from the defaults."""
    args = [binary, "wait", "--grace", _n(config.grace)]
    for flag, value, default in (
        ("--settle", config.settle, DEFAULT_SETTLE),
        ("--exit-reserve", config.exit_reserve, DEFAULT_EXIT_RESERVE),
        ("--interval", config.interval, DEFAULT_INTERVAL),
        ("--read-timeout", config.reach.read_timeout, DEFAULT_READ_TIMEOUT),
        ("--linger", config.linger, DEFAULT_LINGER),
    ):
        if value != default:
            args += [flag, _n(value)]
    if config.confirm != DEFAULT_CONFIRM:
        args += ["--confirm", str(config.confirm)]
    if config.max_wait is not None:
        args += ["--max-wait", _n(config.max_wait)]
    if config.reach.engine != "auto":
        args += ["--engine", config.reach.engine]
    return tuple(args)


def render(plan: Plan, output: str) -> str:
    """The plan as `text`, `json` or `yaml`, ending with a newline."""
    if output == "json":
        return json.dumps(to_json(plan), indent=2) + "\n"
    if output == "yaml":
        return to_yaml(plan)
    if output == "text":
        return to_text(plan)
    raise UsageError(f"--output must be one of {', '.join(OUTPUTS)}, not {output!r}")


def to_json(plan: Plan) -> dict[str, object]:
    """The stable JSON form (schema 1): inputs, every instant, the command, warnings."""
    c = plan.config
    return {
        "schema": SCHEMA,
        "engine": plan.engine,
        "role": plan.role,
        "grace": _j(c.grace),
        "settle": _j(c.settle),
        "exit_reserve": _j(c.exit_reserve),
        "interval": _j(c.interval),
        "read_timeout": _j(c.reach.read_timeout),
        "confirm": c.confirm,
        "linger": _j(c.linger),
        "max_wait": None if c.max_wait is None else _j(c.max_wait),
        "instants": {
            "hook_start": 0,
            "settle_end": _j(plan.settle_end),
            "first_read": None if plan.first_read is None else _j(plan.first_read),
            "idle_return": _j(plan.idle_return),
            "deadline": _j(plan.deadline),
            "sigterm_latest": _j(plan.sigterm_latest),
            "kill": _j(plan.kill),
        },
        "idle_outcome": "drained" if plan.idle_drains else "deadline",
        "reads_max": plan.reads_max,
        "exit_window": _j(plan.kill - plan.sigterm_latest),
        "termination_grace_period_seconds": int(c.grace) if c.grace == int(c.grace) else None,
        "command": list(plan.command),
        "warnings": [
            {"code": w.code, "message": w.message, "reason": w.reason} for w in plan.warnings
        ],
    }


def to_text(plan: Plan) -> str:
    """The timeline as a person reads it, then the preStop command and the warnings."""
    c = plan.config
    d = plan.deadline
    rows: list[tuple[str, str]] = [
        ("t=0", "hook starts; the kubelet's grace countdown starts too"),
        (f"0..{_s(plan.settle_end)}", "settle: the engine keeps serving untouched"),
    ]
    if plan.first_read is not None:
        rows.append(
            (
                f"t={_s(plan.first_read)}",
                f"first read of /metrics, then one every {_s(c.interval)} "
                f"(at most {plan.reads_max} before D)",
            )
        )
        word = "read" if c.confirm == 1 else f"{c.confirm} idle reads in a row"
        linger = f", then --linger {_s(c.linger)}" if c.linger else ""
        if plan.idle_drains:
            what = f"an idle engine's hook returns ({word}{linger})"
            rows.append((f"t={_s(plan.idle_return)}", what))
    rule = "min(G - R, max-wait)" if c.max_wait is not None else "G - R"
    kill_rule = "G" if plan.kill == c.grace else f"D + {_s(KUBELET_MIN_STOP)}, the kubelet's least"
    rows += [
        (f"t={_s(d)}", f"deadline D = {rule}: the hook returns by now, busy or not"),
        (f"t={_s(plan.sigterm_latest)}", "SIGTERM at the latest (sent when the hook returns)"),
        (
            f"{_s(plan.sigterm_latest)}..{_s(plan.kill)}",
            f"the engine exits ({_s(plan.kill - plan.sigterm_latest)})",
        ),
        (f"t={_s(plan.kill)}", f"the kubelet kills the container ({kill_rule})"),
    ]
    width = max(len(when) for when, _ in rows)
    head = (
        f"drainhook plan: G={_s(c.grace)} S={_s(c.settle)} R={_s(c.exit_reserve)} "
        f"I={_s(c.interval)} confirm={c.confirm}, engine {plan.engine}, role {plan.role}"
    )
    lines = [head, ""]
    lines += [f"  {when.ljust(width)}  {what}" for when, what in rows]
    lines += ["", "preStop: " + " ".join(plan.command)]
    if plan.warnings:
        lines += ["", f"warnings ({len(plan.warnings)}):"]
        for w in plan.warnings:
            lines += textwrap.wrap(
                f"{w.code}: {w.message}", 100, initial_indent="  ", subsequent_indent="    "
            )
            lines += textwrap.wrap(
                f"why: {w.reason}", 100, initial_indent="    ", subsequent_indent="      "
            )
    else:
        lines += ["", "warnings: none"]
    return "\n".join(lines) + "\n"


def to_yaml(plan: Plan) -> str:
    """A Pod-spec fragment: terminationGracePeriodSeconds and the container's preStop.

    Every string is written as a JSON string, which YAML reads as a double-quoted
    scalar, so no value can change meaning (`"30"` stays a string)."""
    c = plan.config
    if c.grace != int(c.grace):
        raise UsageError(
            f"--output yaml needs whole seconds for --grace (not {_n(c.grace)}): "
            "terminationGracePeriodSeconds is an integer"
        )
    name = plan.engine if plan.engine != "auto" else "engine"
    lines = [
        "# Pod-spec fragment from `drainhook plan`: merge into the Pod template's spec.",
        f"# --grace must equal terminationGracePeriodSeconds. Container name: yours ({name}).",
    ]
    for w in plan.warnings:
        lines.append(f"# warning: {w.code}: {w.message}")
    lines += [
        f"terminationGracePeriodSeconds: {int(c.grace)}",
        "containers:",
        f"  - name: {json.dumps(name)}",
        "    lifecycle:",
        "      preStop:",
        "        exec:",
        "          command:",
    ]
    lines += [f"            - {json.dumps(arg)}" for arg in plan.command]
    return "\n".join(lines) + "\n"


def _n(value: float) -> str:
    """A number as a flag value: `30`, `0.5`."""
    return str(int(value)) if value == int(value) else repr(value)


def _s(value: float) -> str:
    """Seconds for a person: `30s`, `0.5s`."""
    return _n(value) + "s"


def _j(value: float) -> int | float:
    """A number for JSON: an int when whole."""
    return int(value) if value == int(value) else value
