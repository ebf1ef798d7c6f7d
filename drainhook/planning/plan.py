"""`drainhook plan`: the timeline of CONTRACT §1 for given values, with warnings,
as text, JSON or the Pod-spec fragment that runs it (CONTRACT §4).

Pure: a `WaitConfig` (the same value `wait` runs on, so the deadline is the
hook's own) plus a role and a binary path in, a `Plan` and its renderings out.
YAML is written by hand so that the hook never needs a YAML library.

Layout: `Plan` (drainhook.hook.timeline's instants, with a role and the binary)
and `make_plan`; the warnings as a table of rules (`RULES`: timeline's
`TIMELINE_RULES`, about the run's own instants, which `wait` logs at its
start, then `ADVICE_RULES`, advice for the Pod spec and the engine's flags);
`apply_advice`, the one place that decides the values `--output yaml`
carries; `engine_flags`, the engine's own flags that advice names (`plan`'s
JSON and `inject` read both); the three renderings.
"""

from __future__ import annotations

import dataclasses
import json
import math
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from drainhook.engines.gauges import default_port
from drainhook.errors import UsageError
from drainhook.hook.config import (
    DEFAULT_CONFIRM,
    DEFAULT_EXIT_RESERVE,
    DEFAULT_GRACE,
    DEFAULT_INTERVAL,
    DEFAULT_LINGER,
    DEFAULT_SETTLE,
    DEFAULT_STALL_AFTER,
    WaitConfig,
)
from drainhook.hook.timeline import (
    KUBELET_MIN_STOP,
    ROUTER_DEREGISTRATION,
    TIMELINE_RULES,
    Fix,
    Instants,
    PlanWarning,
    instants,
)
from drainhook.numfmt import json_number, number, seconds
from drainhook.reading.config import DEFAULT_READ_TIMEOUT, ReadConfig
from drainhook.reading.target import build_url, parse_url

SCHEMA = 1
ROLES = ("unified", "prefill", "decode")
OUTPUTS = ("text", "json", "yaml")
DEFAULT_BINARY = "/usr/local/bin/drainhook"

# An SGLang prefill or decode server (disaggregation, 0.5.x) needs about 20 s
# after SIGTERM to exit; G = 45 then leaves 20 s to drain after a 5 s settle.
SGLANG_PD_EXIT = 20.0
SGLANG_PD_GRACE = 45.0
# `vllm serve --shutdown-timeout N` (vLLM >= 0.18.0, vllm-project/vllm#34730)
# lets running requests go on for N s after SIGTERM; what still runs at N stalls
# until the kubelet's SIGKILL, as every running request does without the flag.
# Measured on vLLM 0.32: the engine core is killed only at N, idle or not, so
# the exit takes about N + 0.5 s on every SIGTERM (0.4 s without the flag).
VLLM_SHUTDOWN_TIMEOUT_SINCE = "0.18"


@dataclass(frozen=True)
class Plan(Instants):
    """The instants of one timeline (timeline.Instants), for an engine's role and
    the hook's path in the container."""

    role: str = "unified"
    binary: str = DEFAULT_BINARY
    known_engine: str | None = None  # the engine when known otherwise (plan --observe)
    grace_observed: bool = False  # G came from observed request times (plan --observe)
    # vLLM's API-server processes (its --api-server-count; 0.32's default is its
    # --data-parallel-size), when known: /load reaches one per read (CONTRACT §2a).
    api_servers: int | None = None

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
    stall_after: float | None = None,
    engine: str = "auto",
) -> WaitConfig:
    """The `WaitConfig` that `wait` would build from these flags (default target)."""
    target = parse_url(build_url("http", "127.0.0.1", default_port(engine), "/metrics"))
    return WaitConfig(
        reach=ReadConfig(target=target, engine=engine, read_timeout=read_timeout),
        grace=grace,
        settle=settle,
        exit_reserve=exit_reserve,
        interval=interval,
        confirm=confirm,
        linger=linger,
        max_wait=max_wait,
        stall_after=stall_after,
    )


def check_role(role: str) -> None:
    if role not in ROLES:
        raise UsageError(f"--role must be one of {', '.join(ROLES)}, not {role!r}")


def make_plan(
    config: WaitConfig,
    role: str = "unified",
    binary: str = DEFAULT_BINARY,
    known_engine: str | None = None,
    *,
    api_servers: int | None = None,
) -> Plan:
    """The timeline `wait` runs for config, and what is wrong with it. known_engine:
    the engine when something other than --engine showed it (a latency histogram)."""
    check_role(role)
    config.check()
    t = instants(config)
    return Plan(
        t.config, t.first_read, t.idle_return, t.idle_drains, t.reads_max,
        role, binary, known_engine, api_servers=api_servers,
    )  # fmt: skip


# The warnings: one rule each, `(plan) -> PlanWarning | None`, checked in the
# order of RULES (the order `plan` prints them). A new warning is one function
# and one entry in TIMELINE_RULES or ADVICE_RULES. They read only the plan, so
# any WaitConfig's plan has them: `make_plan(config).warnings`. A rule whose
# advice names values (`fixes`) has them applied by `apply_advice`. A rule's
# docstring is `code: when`, one line: `plan --help` lists them (help_text).
Rule = Callable[[Plan], PlanWarning | None]


def _sglang_pd_exit(plan: Plan) -> PlanWarning | None:
    """sglang-pd-exit: an SGLang prefill/decode server needs R >= 20 s and G >= 45 s"""
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
    needs = f"an SGLang {role} server needs about {seconds(SGLANG_PD_EXIT)} after SIGTERM"
    fixes = []
    if new_r != r:
        fixes.append(Fix("exit_reserve", new_r, needs))
    if new_g != g:
        why = (
            f"G rises with R, so that D stays {seconds(plan.deadline)}"
            if kept >= SGLANG_PD_GRACE and new_r != r
            else f"an SGLang {role} server needs G >= {seconds(SGLANG_PD_GRACE)}"
        )
        fixes.append(Fix("grace", new_g, why))
    return PlanWarning(
        "sglang-pd-exit",
        f"{needs}: use --exit-reserve {number(new_r)} (now {seconds(r)}) and "
        f"G = {seconds(new_g)} (now {seconds(g)})",
        "with less, the kubelet kills it before it has exited; G rises with R so "
        "that the deadline stays, and is at least 45 s: 20 s to drain after a 5 s settle",
        tuple(fixes),
    )


def _vllm_prefill_linger(plan: Plan) -> PlanWarning | None:
    """vllm-prefill-linger: a vLLM prefill without --linger"""
    if plan.engine not in ("vllm", "auto") or plan.role != "prefill" or plan.config.linger:
        return None
    return PlanWarning(
        "vllm-prefill-linger",
        "a vLLM prefill (KV producer) reads idle while decode instances still pull "
        "its KV: add --linger SECONDS, the longest pull you expect",
        "its running/waiting gauges drop to 0 when the prefill ends, before the KV "
        "is read; SIGTERM then frees the KV under the decode",
    )


def _stall_after_deadline(plan: Plan) -> PlanWarning | None:
    """stall-after-deadline: a --stall-after W given cannot close before D"""
    # Only a W given (--stall-after, DRAINHOOK_STALL_AFTER): the default W with a
    # G too short for it is no mistake, and the timeline shows it off.
    c = plan.config
    if c.stall_after is None or c.stall_after <= 0 or plan.stall_earliest is not None:
        return None
    start = plan.first_read if plan.first_read is not None else c.settle
    return PlanWarning(
        "stall-after-deadline",
        f"--stall-after W = {seconds(c.stall_after)} cannot end the hook: the first read at "
        f"{seconds(start)} plus W is {seconds(start + c.stall_after)}, not before "
        f"D = {seconds(plan.deadline)}",
        "a stalled engine then holds the replica to D as a busy one does; lower "
        "--stall-after (above the longest healthy flat stretch) or raise G",
    )


def shutdown_timeout(plan: Plan) -> int | None:
    """vLLM's `--shutdown-timeout` worth its exit for this timeline: R - 1 whole
    seconds (the exit, N + 0.5 s, then fits before G), or None.

    The flag costs N more seconds of exit on every SIGTERM, idle or not, and buys
    a clean end only for a request still running at SIGTERM. One left at D is
    better served by N more seconds of G: the engine still serves it then, and an
    idle replica pays nothing for them. What is left is a request that slips in
    after the hook's release, which only a router slower than the settle sends:
    so the flag pays for itself only where S is under the usual router
    deregistration (docs/design.md, §4). None too for another engine, or when
    R leaves no whole second for it."""
    n = math.floor(plan.config.exit_reserve - 1)
    if plan.engine != "vllm" or n < 1:
        return None
    if plan.config.settle >= ROUTER_DEREGISTRATION:
        return None
    return n


def _vllm_shutdown_timeout(plan: Plan) -> PlanWarning | None:
    """vllm-shutdown-timeout: vLLM with S under 5 s (a slow router): --shutdown-timeout R - 1"""
    if plan.engine != "vllm" or plan.config.settle >= ROUTER_DEREGISTRATION:
        return None
    n = shutdown_timeout(plan)
    advice = (
        f"suggest --shutdown-timeout {n} (R - 1)"
        if n is not None
        else "raise --exit-reserve to use it (N = R - 1)"
    )
    return PlanWarning(
        "vllm-shutdown-timeout",
        f"vLLM >= {VLLM_SHUTDOWN_TIMEOUT_SINCE} with S = {seconds(plan.config.settle)}, under "
        f"the usual {seconds(ROUTER_DEREGISTRATION)} router deregistration: a request a slow "
        "router sends after the hook's release hangs until the kill at G unless "
        f"`vllm serve --shutdown-timeout N` lets it end within N; {advice}",
        "on SIGTERM vLLM kills its engine core at once: running requests stall and the "
        "process waits for their connections until SIGKILL. The flag costs N more seconds "
        "of exit on every SIGTERM, idle or not (N + 0.5 s against 0.4 s, vLLM 0.32); with "
        "S >= 5 s nothing slips in after the release and it is not advised",
    )


def _vllm_api_servers(plan: Plan) -> PlanWarning | None:
    """vllm-api-servers: vLLM with --api-servers N > 1 (its --api-server-count, or data parallel)"""
    n = plan.api_servers
    if plan.engine not in ("vllm", "auto") or n is None or n <= 1:
        return None
    return PlanWarning(
        "vllm-api-servers",
        f"vLLM with {n} API servers: GET /load reaches one of them per read (they share "
        f"the port and the kernel hands each connection to one), so /load alone cannot "
        f"see what the other {n - 1} hold",
        "the scheduler's gauges cover every engine, and the connection signal sees every "
        "API server's connections on the port: run the hook in a container of the Pod "
        "(its network namespace), where the connections are read",
    )


# Advice for the Pod spec and the engine's own flags (a role, an engine option):
# `plan` only; logging them on every drain would say nothing about that drain.
# `stall-after-deadline` too: with a W given for a longer G (one flag set for
# every Pod), a short-G Pod's drain would log it every time.
ADVICE_RULES: tuple[Rule, ...] = (
    _stall_after_deadline,
    _sglang_pd_exit,
    _vllm_prefill_linger,
    _vllm_shutdown_timeout,
    _vllm_api_servers,
)
RULES: tuple[Rule, ...] = TIMELINE_RULES + ADVICE_RULES


def help_text() -> str:
    """`plan --help`: what it shows, and the warnings, listed from RULES."""

    def when(rules: Sequence[Callable[..., object]]) -> str:
        return "; ".join((rule.__doc__ or "").strip() for rule in rules)

    return f"""The timeline of `wait` for these values, with warnings; or its Pod-spec fragment.

    Warns, with the reason, on the timeline's own values ({when(TIMELINE_RULES)}; `wait`
    logs these at its start too), and with advice for the Pod spec and the engine
    ({when(ADVICE_RULES)}).

    --output yaml applies the advice that names a value (an SGLang prefill/decode
    server's R and G; the recommended G with --observe), over values given too,
    and names each change in a comment; text and json show the same changes.

    --observe reads vLLM's or SGLang's e2e_request_latency_seconds histogram
    (every series and target summed) and recommends G = ceil(S + latency + R),
    latency being the upper bound of the bucket holding --quantile; it shows
    p50/p99/p99.9 and the share of requests longer than D - S for the G given.
    Exit: 0, 2 usage or no histogram, 3 unreadable or malformed histogram, 4
    unreachable.
    """


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
        why = "; ".join(self.because)
        return f"{self.label} {number(self.given)} -> {number(self.applied)} ({why})"


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
    return make_plan(
        config, plan.role, plan.binary, plan.known_engine, api_servers=plan.api_servers
    )


def prestop_command(config: WaitConfig, binary: str = DEFAULT_BINARY) -> tuple[str, ...]:
    """The preStop exec command that runs config: `--grace` always, other flags when
    they differ from the defaults."""
    args = [binary, "wait", "--grace", number(config.grace)]
    for flag, value, default in (
        ("--settle", config.settle, DEFAULT_SETTLE),
        ("--exit-reserve", config.exit_reserve, DEFAULT_EXIT_RESERVE),
        ("--interval", config.interval, DEFAULT_INTERVAL),
        ("--read-timeout", config.reach.read_timeout, DEFAULT_READ_TIMEOUT),
        ("--linger", config.linger, DEFAULT_LINGER),
    ):
        if value != default:
            args += [flag, number(value)]
    if config.confirm != DEFAULT_CONFIRM:
        args += ["--confirm", str(config.confirm)]
    if config.max_wait is not None:
        args += ["--max-wait", number(config.max_wait)]
    if config.stall_after is not None and config.stall_after != DEFAULT_STALL_AFTER:
        args += ["--stall-after", number(config.stall_after)]
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


def to_json(
    plan: Plan, applied: Applied | None = None, more: Sequence[PlanWarning] = ()
) -> dict[str, object]:
    """The stable JSON form (schema 1): inputs, every instant, the command, warnings.
    `applied`: the advice as applied with evidence (plan --observe), and `more`:
    the evidence's own warnings, after the plan's."""
    c = plan.config
    return {
        "schema": SCHEMA,
        "engine": c.reach.engine,  # as given (the rules may know it otherwise: plan.engine)
        "role": plan.role,
        "grace": json_number(c.grace),
        "settle": json_number(c.settle),
        "exit_reserve": json_number(c.exit_reserve),
        "interval": json_number(c.interval),
        "read_timeout": json_number(c.reach.read_timeout),
        "confirm": c.confirm,
        "linger": json_number(c.linger),
        "max_wait": None if c.max_wait is None else json_number(c.max_wait),
        "stall_after": json_number(c.stall_window),
        "instants": {
            "hook_start": 0,
            "settle_end": json_number(plan.settle_end),
            "first_read": None if plan.first_read is None else json_number(plan.first_read),
            "idle_return": json_number(plan.idle_return),
            "stall_earliest": (
                None if plan.stall_earliest is None else json_number(plan.stall_earliest)
            ),
            "deadline": json_number(plan.deadline),
            "sigterm_latest": json_number(plan.sigterm_latest),
            "kill": json_number(plan.kill),
        },
        "idle_outcome": "drained" if plan.idle_drains else "deadline",
        "reads_max": plan.reads_max,
        "exit_window": json_number(plan.kill - plan.sigterm_latest),
        "termination_grace_period_seconds": int(c.grace) if c.grace == int(c.grace) else None,
        "command": list(plan.command),
        "warnings": warnings_json((*plan.warnings, *more)),
        "applied": applied_json(apply_advice(plan) if applied is None else applied),
    }


def warnings_json(warnings: Sequence[PlanWarning]) -> list[dict[str, str]]:
    return [{"code": w.code, "message": w.message, "reason": w.reason} for w in warnings]


def applied_json(applied: Applied) -> dict[str, object]:
    """What `--output yaml` carries: the values with the advice applied, each change
    and why, the command, and the warnings that still stand."""
    c = applied.plan.config
    return {
        "grace": json_number(c.grace),
        "exit_reserve": json_number(c.exit_reserve),
        "command": list(applied.plan.command),
        # The engine's own flags the advice names (engine_flags: vLLM's
        # --shutdown-timeout and /load, SGLang's /metrics), as arguments to add to
        # the engine's command line: for tooling (the rehearsal, inject), not the hook.
        "engine_args": _engine_args(applied.plan),
        "changes": [
            {
                "field": ch.field,
                "name": ch.label,
                "from": json_number(ch.given),
                "to": json_number(ch.applied),
                "because": list(ch.because),
            }
            for ch in applied.changes
        ],
        "warnings": warnings_json(applied.plan.warnings),
    }


# -- the engine's own flags ---------------------------------------------------------

# SGLang serves /metrics only with --enable-metrics: without it every read is
# unreachable (404) and the hook returns right after the settle.
# vLLM's `GET /load` (the count its HTTP server holds, issue 25's server signal)
# answers only with --enable-server-load-tracking (default off); it is in every
# vLLM this project supports (0.9 and newer, read in vLLM's code).
VLLM_LOAD_TRACKING_SINCE = "0.9"


@dataclass(frozen=True)
class EngineFlag:
    """One flag of the engine's own command line that the advice names.

    `value` None: a switch. `ceiling`: the value is the most the timeline leaves
    (vLLM's --shutdown-timeout): a larger one given is brought down to it, a smaller
    one kept. `needed`: the hook cannot read the engine without it. `since`: the
    engine version that has it (older ones refuse the flag and do not start).
    `add`: written where missing (False: a value given is only brought down)."""

    flag: str
    value: str | None
    why: str
    since: str | None = None
    ceiling: bool = False
    needed: bool = False
    add: bool = True  # False: only a value already given is changed (brought down)

    @property
    def args(self) -> list[str]:
        return [self.flag] if self.value is None else [self.flag, self.value]


def engine_flags(plan: Plan) -> tuple[EngineFlag, ...]:
    """The engine's own flags this plan's advice names, in one place: `plan`'s JSON
    (`applied.engine_args`) and `inject`, which writes them into the engine's
    command line, both read them here. Nothing for `auto` (whose flag is unknown)."""
    if plan.engine == "sglang":
        return (
            EngineFlag(
                "--enable-metrics", None, "SGLang serves /metrics only with it", needed=True
            ),
        )
    if plan.engine != "vllm":
        return ()
    flags = []
    n = shutdown_timeout(plan)
    if n is not None:
        why = "R - 1, for a request a router slower than S sends after the release"
        flags.append(
            EngineFlag("--shutdown-timeout", str(n), why, VLLM_SHUTDOWN_TIMEOUT_SINCE, ceiling=True)
        )
    else:
        # A long one already given (llm-d's 45) holds every replica that long after
        # SIGTERM, idle or not: brought down to vLLM's default, never added.
        why = "with S >= 5 s the hook leaves it nothing to save; it costs N s of every exit"
        flags.append(
            EngineFlag(
                "--shutdown-timeout",
                "0",
                why,
                VLLM_SHUTDOWN_TIMEOUT_SINCE,
                ceiling=True,
                add=False,
            )
        )
    why = "GET /load: what the HTTP server holds, which the scheduler's gauges miss"
    flags.append(EngineFlag("--enable-server-load-tracking", None, why, VLLM_LOAD_TRACKING_SINCE))
    return tuple(flags)


def _engine_args(plan: Plan) -> list[str]:
    return [arg for flag in engine_flags(plan) if flag.add for arg in flag.args]


def to_text(plan: Plan) -> str:
    """The timeline as a person reads it, then the preStop command and the warnings."""
    c = plan.config
    d = plan.deadline
    rows: list[tuple[str, str]] = [
        ("t=0", "hook starts; the kubelet's grace countdown starts too"),
        (f"0..{seconds(plan.settle_end)}", "settle: the engine keeps serving untouched"),
    ]
    if plan.first_read is not None:
        rows.append(
            (
                f"t={seconds(plan.first_read)}",
                f"first read of /metrics, then one every {seconds(c.interval)}, every "
                f"{seconds(c.interval / 4)} while the work drains "
                f"({plan.reads_max} before D at the slower step)",
            )
        )
        word = "read" if c.confirm == 1 else f"{c.confirm} idle reads in a row"
        linger = f", then --linger {seconds(c.linger)}" if c.linger else ""
        if plan.idle_drains:
            fast = plan.settle_end + (c.confirm - 1) * c.interval / 4
            what = (
                f"an idle engine's hook returns ({word}{linger}; from "
                f"t={seconds(fast)} when the server's count or connections read the zero)"
            )
            rows.append((f"t={seconds(plan.idle_return)}", what))
    w = c.stall_window
    if plan.stall_earliest is not None:
        what = (
            f"earliest `stalled` return (exit 5): work reported, no progress for W = {seconds(w)}"
        )
        rows.append((f"t={seconds(plan.stall_earliest)}", what))
    rule = "min(G - R, max-wait)" if c.max_wait is not None else "G - R"
    kill_rule = (
        "G" if plan.kill == c.grace else f"D + {seconds(KUBELET_MIN_STOP)}, the kubelet's least"
    )
    rows += [
        (f"t={seconds(d)}", f"deadline D = {rule}: the hook returns by now, busy or not"),
        (f"t={seconds(plan.sigterm_latest)}", "SIGTERM at the latest (sent when the hook returns)"),
        (
            f"{seconds(plan.sigterm_latest)}..{seconds(plan.kill)}",
            f"the engine exits ({seconds(plan.kill - plan.sigterm_latest)})",
        ),
        (f"t={seconds(plan.kill)}", f"the kubelet kills the container ({kill_rule})"),
    ]
    if plan.stall_earliest is None and w > 0 and plan.first_read is not None:
        late = plan.first_read + w
        what = f"stall detection off: first read + W = {seconds(late)}, not before D"
        rows.append((f"W={seconds(w)}", what))
    width = max(len(when) for when, _ in rows)
    head = (
        f"drainhook plan: G={seconds(c.grace)} S={seconds(c.settle)} R={seconds(c.exit_reserve)} "
        f"I={seconds(c.interval)} confirm={c.confirm}, engine {plan.engine}, role {plan.role}"
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
            f"--output yaml needs whole seconds for --grace (not {number(c.grace)}): "
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
