"""`drainhook plan`: the timeline of CONTRACT §1 for given values, with warnings,
as text, JSON or the Pod-spec fragment that runs it (CONTRACT §4).

Pure: a `WaitConfig` (the same value `wait` runs on, so the deadline is the
hook's own) plus a role and a binary path in, a `Plan` and its renderings out.
YAML is written by hand so that the hook never needs a YAML library.

Layout: `Plan` and `make_plan`; the warnings as a table of rules (`RULES`:
`TIMELINE_RULES`, about the run's own instants, which `wait` logs at its
start, then `ADVICE_RULES`, advice for the Pod spec and the engine's flags);
`apply_advice`, the one place that decides the values `--output yaml`
carries; the three renderings.
"""

from __future__ import annotations

import dataclasses
import json
import math
import textwrap
from collections.abc import Callable, Sequence
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
# lets running requests go on for N s after SIGTERM; what still runs at N stalls
# until the kubelet's SIGKILL, as every running request does without the flag.
# Measured on vLLM 0.32: the engine core is killed only at N, idle or not, so
# the exit takes about N + 0.5 s on every SIGTERM (0.4 s without the flag).
VLLM_SHUTDOWN_TIMEOUT_SINCE = "0.18"


@dataclass(frozen=True)
class Fix:
    """A value a warning's advice names, which `--output yaml` applies."""

    field: str  # a WaitConfig field: "grace" or "exit_reserve"
    value: float
    because: str


@dataclass(frozen=True)
class PlanWarning:
    """One thing the plan's numbers get wrong, and why it matters."""

    code: str
    message: str
    reason: str
    fixes: tuple[Fix, ...] = ()  # the values its advice names, if it names any


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
    known_engine: str | None = None  # the engine when known otherwise (plan --observe)
    grace_observed: bool = False  # G came from observed request times (plan --observe)

    @property
    def warnings(self) -> tuple[PlanWarning, ...]:
        """What RULES find wrong with this plan, in their order."""
        return tuple(w for rule in RULES if (w := rule(self)) is not None)

    @property
    def engine(self) -> str:
        """The engine the rules advise for: --engine, or the one the evidence showed.
        The preStop command keeps --engine as given."""
        return self.known_engine or self.config.reach.engine

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


def make_plan(
    config: WaitConfig,
    role: str = "unified",
    binary: str = DEFAULT_BINARY,
    known_engine: str | None = None,
) -> Plan:
    """The timeline `wait` runs for config, and what is wrong with it. known_engine:
    the engine when something other than --engine showed it (a latency histogram)."""
    if role not in ROLES:
        raise UsageError(f"--role must be one of {', '.join(ROLES)}, not {role!r}")
    config.check()
    s, d, i = config.settle, config.deadline, config.interval
    first_read = s if s < d else None
    confirmed = s + (config.confirm - 1) * i
    drains = confirmed < d
    idle_return = min(confirmed + config.linger, d) if drains else d
    reads_max = math.ceil((d - s) / i - 1e-9) if d > s else 0
    return Plan(config, role, binary, first_read, idle_return, drains, reads_max, known_engine)


# The warnings: one rule each, `(plan) -> PlanWarning | None`, checked in the
# order of RULES (the order `plan` prints them). A new warning is one function
# and one entry in TIMELINE_RULES or ADVICE_RULES. They read only the plan, so
# any WaitConfig's plan has them: `make_plan(config).warnings`. A rule whose
# advice names values (`fixes`) has them applied by `apply_advice`.
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


def _settle_past_deadline(plan: Plan) -> PlanWarning | None:
    if plan.first_read is not None:
        return None
    s, d = plan.config.settle, plan.deadline
    return PlanWarning(
        "settle-past-deadline",
        f"the settle S = {_s(s)} lasts to the deadline D = {_s(d)} or past it: not a single read",
        "the hook returns at D with `deadline` without knowing whether the engine "
        "is idle; raise G, or lower --settle or --exit-reserve",
    )


def _no_room(plan: Plan) -> PlanWarning | None:
    c = plan.config
    need = (c.confirm - 1) * c.interval + c.reach.read_timeout
    if c.settle + need <= plan.deadline or plan.first_read is None:
        return None  # (no read at all is settle-past-deadline's)
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
    # R rises to 20 s; G rises by as much, so that the time left to drain (D)
    # stays what it was, and to 45 s at least.
    new_r = max(r, SGLANG_PD_EXIT)
    kept = g + (new_r - r)
    new_g = max(kept, SGLANG_PD_GRACE)
    needs = f"an SGLang {role} server needs about {_s(SGLANG_PD_EXIT)} after SIGTERM"
    fixes = []
    if new_r != r:
        fixes.append(Fix("exit_reserve", new_r, needs))
    if new_g != g:
        why = (
            f"G rises with R, so that D stays {_s(plan.deadline)}"
            if kept >= SGLANG_PD_GRACE and new_r != r
            else f"an SGLang {role} server needs G >= {_s(SGLANG_PD_GRACE)}"
        )
        fixes.append(Fix("grace", new_g, why))
    return PlanWarning(
        "sglang-pd-exit",
        f"{needs}: use --exit-reserve {_n(new_r)} (now {_s(r)}) and G = {_s(new_g)} (now {_s(g)})",
        "with less, the kubelet kills it before it has exited; G rises with R so "
        "that the deadline stays, and is at least 45 s: 20 s to drain after a 5 s settle",
        tuple(fixes),
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


def shutdown_timeout(plan: Plan) -> int | None:
    """vLLM's `--shutdown-timeout` worth its exit for this timeline: R - 1 whole seconds
    (the exit, N + 0.5 s, then fits before G when SIGTERM comes at D), or None. It costs
    N more seconds of exit on every SIGTERM and buys a clean end only for a request still
    running at SIGTERM: one left at D, which plan cannot rule out unless
    G came from observed request times (`plan --observe`), or one that slipped in after
    the last idle read, which a settle shorter than the router's deregistration allows.
    With both ruled out: None. None too for another engine, or when R leaves no whole
    second for it."""
    n = math.floor(plan.config.exit_reserve - 1)
    if plan.engine != "vllm" or n < 1:
        return None
    if plan.grace_observed and plan.config.settle >= ROUTER_DEREGISTRATION:
        return None
    return n


def _vllm_shutdown_timeout(plan: Plan) -> PlanWarning | None:
    if plan.engine != "vllm":
        return None
    n = shutdown_timeout(plan)
    if n is None and math.floor(plan.config.exit_reserve - 1) >= 1:
        return None  # G from observed request times and a full settle: nothing to save
    advice = (
        f"suggest --shutdown-timeout {n} (R - 1)"
        if n is not None
        else "raise --exit-reserve to use it (N = R - 1)"
    )
    return PlanWarning(
        "vllm-shutdown-timeout",
        f"vLLM >= {VLLM_SHUTDOWN_TIMEOUT_SINCE}: without `vllm serve --shutdown-timeout N`, "
        "every request still running at SIGTERM (at D, or one that slipped in after the "
        f"last idle read) hangs until the kill at G; with it, those that end within N "
        f"complete; {advice}",
        "on SIGTERM vLLM kills its engine core at once and sends no abort: running requests "
        "stall and the process waits for their connections until SIGKILL. With the flag "
        "the engine core is killed at N, idle or not: N more seconds of exit on every "
        "SIGTERM (N + 0.5 s against 0.4 s, measured on vLLM 0.32); G from `plan --observe` "
        "with S >= 5 s leaves it nothing to save",
    )


# About the run's own instants, from its own flags: `wait` logs these at its
# start (timeline_warnings), each once.
TIMELINE_RULES: tuple[Rule, ...] = (
    _grace_range,
    _grace_fraction,
    _settle_past_deadline,
    _no_room,
    _settle_short,
    _exit_reserve_short,
)
# Advice for the Pod spec and the engine's own flags (a role, an engine option):
# `plan` only; logging them on every drain would say nothing about that drain.
ADVICE_RULES: tuple[Rule, ...] = (
    _sglang_pd_exit,
    _vllm_prefill_linger,
    _vllm_shutdown_timeout,
)
RULES: tuple[Rule, ...] = TIMELINE_RULES + ADVICE_RULES


def timeline_warnings(config: WaitConfig) -> tuple[PlanWarning, ...]:
    """What TIMELINE_RULES find wrong with the timeline `wait` is about to run.

    Pure arithmetic on the config (microseconds). Never raises: the hook's job is
    the drain, so a rule that fails (a bug) becomes a warning of its own."""
    try:
        plan = make_plan(config)
        return tuple(w for rule in TIMELINE_RULES if (w := rule(plan)) is not None)
    except Exception as exc:  # a bug; the drain goes on (CONTRACT §6)
        return (
            PlanWarning(
                "timeline-unchecked",
                f"the timeline could not be checked: {type(exc).__name__}: {exc}",
                "a bug in drainhook's rules; the drain itself is not affected",
            ),
        )


# -- the advice, applied -----------------------------------------------------------


# How a changed value is named in a comment: the YAML field for G (--grace equals it).
LABELS = {"grace": "terminationGracePeriodSeconds", "exit_reserve": "--exit-reserve"}
APPLIED_FIELDS = ("exit_reserve", "grace")

# G from evidence for a config (its S and R): the value and how it was found, or None.
Evidence = Callable[[WaitConfig], tuple[float, str] | None]


@dataclass(frozen=True)
class Change:
    """One value `--output yaml` carries other than the one given, and why."""

    field: str  # a WaitConfig field in APPLIED_FIELDS
    given: float
    applied: float
    because: tuple[str, ...]  # "code: why" each, in the order they acted

    @property
    def label(self) -> str:
        return LABELS[self.field]

    def text(self) -> str:
        return f"{self.label} {_n(self.given)} -> {_n(self.applied)} ({'; '.join(self.because)})"


@dataclass(frozen=True)
class Applied:
    """The plan as `--output yaml` writes it: its own advice applied."""

    plan: Plan
    changes: tuple[Change, ...]


def apply_advice(plan: Plan, evidence: Evidence | None = None) -> Applied:
    """The one place that decides the values the fragment carries.

    Every value a warning names (its `fixes`: an SGLang prefill/decode's exit
    reserve and grace) is applied, over values given explicitly too (each change
    is named in the fragment); then G from evidence (`plan --observe`) computed
    with that exit reserve replaces G; then the warnings' values again, as floors
    under it. Fixes only raise values, so this ends. Advice without a value (a
    vLLM prefill's --linger, vLLM's --shutdown-timeout, the timeline's warnings)
    stays a warning."""
    reasons: dict[str, list[str]] = {f: [] for f in APPLIED_FIELDS}
    current = _fixed(plan, reasons)
    observed = False
    if evidence is not None:
        found = evidence(current.config)
        if found is not None:
            grace, how = found
            if grace != current.grace:
                reasons["grace"] = [f"observed: {how}"]  # replaces the fixes' G
                current = _with(current, grace=grace)
            current = _fixed(current, reasons)
            observed = True  # fixes after it only raise G
    if observed:  # the rules then know that G covers the observed requests
        current = dataclasses.replace(current, grace_observed=True)
    changes = tuple(
        Change(f, getattr(plan.config, f), getattr(current.config, f), tuple(reasons[f]))
        for f in APPLIED_FIELDS
        if getattr(plan.config, f) != getattr(current.config, f)
    )
    return Applied(current, changes)


def _fixed(plan: Plan, reasons: dict[str, list[str]]) -> Plan:
    """plan with every warning's fixes applied, until none names a new value."""
    for _ in range(len(RULES) + 1):
        fixes = [(w.code, f) for w in plan.warnings for f in w.fixes]
        values = {f.field: f.value for _, f in fixes}
        if not fixes or all(getattr(plan.config, k) == v for k, v in values.items()):
            return plan
        for code, f in fixes:
            if getattr(plan.config, f.field) != f.value:
                reasons[f.field].append(f"{code}: {f.because}")
        plan = _with(plan, **values)
    return plan


def _with(plan: Plan, **values: float) -> Plan:
    """plan with some of APPLIED_FIELDS set."""
    c = plan.config
    config = dataclasses.replace(
        c,
        grace=values.get("grace", c.grace),
        exit_reserve=values.get("exit_reserve", c.exit_reserve),
    )
    return make_plan(config, plan.role, plan.binary, plan.known_engine)


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
        "engine": c.reach.engine,  # as given (the rules may know it otherwise: plan.engine)
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
        "warnings": warnings_json(plan.warnings),
        "applied": applied_json(apply_advice(plan)),
    }


def warnings_json(warnings: tuple[PlanWarning, ...]) -> list[dict[str, str]]:
    return [{"code": w.code, "message": w.message, "reason": w.reason} for w in warnings]


def applied_json(applied: Applied) -> dict[str, object]:
    """What `--output yaml` carries: the values with the advice applied, each change
    and why, the command, and the warnings that still stand."""
    c = applied.plan.config
    return {
        "grace": _j(c.grace),
        "exit_reserve": _j(c.exit_reserve),
        "command": list(applied.plan.command),
        # The engine's own flags the advice names (vLLM's --shutdown-timeout), as
        # arguments to add to the engine's command line: for tooling, not the hook.
        "engine_args": _engine_args(applied.plan),
        "changes": [
            {
                "field": ch.field,
                "name": ch.label,
                "from": _j(ch.given),
                "to": _j(ch.applied),
                "because": list(ch.because),
            }
            for ch in applied.changes
        ],
        "warnings": warnings_json(applied.plan.warnings),
    }


def _engine_args(plan: Plan) -> list[str]:
    n = shutdown_timeout(plan)
    return [] if n is None else ["--shutdown-timeout", str(n)]


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
    lines += applied_text(apply_advice(plan))
    lines += warnings_text(plan.warnings)
    return "\n".join(lines) + "\n"


def applied_text(applied: Applied) -> list[str]:
    """The values `--output yaml` changes, each with why, and its preStop; nothing
    when it changes none."""
    if not applied.changes:
        return []
    lines = ["", f"--output yaml applies the advice ({len(applied.changes)} changed):"]
    for ch in applied.changes:
        lines += textwrap.wrap(
            ch.text(), 100, initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False
        )
    return [*lines, "  preStop: " + " ".join(applied.plan.command)]


def warnings_text(warnings: tuple[PlanWarning, ...]) -> list[str]:
    if not warnings:
        return ["", "warnings: none"]
    lines = ["", f"warnings ({len(warnings)}):"]
    for w in warnings:
        lines += textwrap.wrap(
            f"{w.code}: {w.message}", 100, initial_indent="  ", subsequent_indent="    "
        )
        lines += textwrap.wrap(
            f"why: {w.reason}", 100, initial_indent="    ", subsequent_indent="      "
        )
    return lines


def to_yaml(plan: Plan, notes: Sequence[str] = (), applied: Applied | None = None) -> str:
    """A Pod-spec fragment: terminationGracePeriodSeconds and the container's preStop,
    for the plan with its advice applied (`apply_advice`; `applied` when the caller
    has applied evidence too), each changed value named in a comment, then the
    caller's notes, then the warnings that still stand.

    Every string is written as a JSON string, which YAML reads as a double-quoted
    scalar, so no value can change meaning (`"30"` stays a string)."""
    if applied is None:
        applied = apply_advice(plan)
    chosen = applied.plan
    c = chosen.config
    if c.grace != int(c.grace):
        raise UsageError(
            f"--output yaml needs whole seconds for --grace (not {_n(c.grace)}): "
            "terminationGracePeriodSeconds is an integer"
        )
    name = chosen.engine if chosen.engine != "auto" else "engine"
    lines = [
        "# Pod-spec fragment from `drainhook plan`: merge into the Pod template's spec.",
        f"# --grace must equal terminationGracePeriodSeconds. Container name: yours ({name}).",
    ]
    lines += [f"# changed: {ch.text()}" for ch in applied.changes]
    lines += notes
    for w in chosen.warnings:
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
    lines += [f"            - {json.dumps(arg)}" for arg in chosen.command]
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
