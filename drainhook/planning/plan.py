"""`drainhook plan`: the timeline of CONTRACT §1 for given values, with warnings
and advice (§4). Pure: a `WaitConfig` (what `wait` runs on) plus a role and a
binary in, a `Plan` out (`make_plan`); the warnings two tables of rules (the
timeline's, `ADVICE_RULES`);
`apply_advice`, the one place that decides the values the fragment carries;
`engine_flags`, the engine's own flags the advice names. render.py writes it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from drainhook.engines.gauges import EngineChoice, default_port
from drainhook.hook.config import TIMELINE as TIMELINE_FLAGS
from drainhook.hook.config import Parsed, WaitConfig
from drainhook.hook.timeline import (
    ROUTER_DEREGISTRATION,
    TIMELINE_RULES,
    Fix,
    Instants,
    PlanWarning,
    instants,
    least_grace,
)
from drainhook.numfmt import number, seconds
from drainhook.planning.evidence_rules import OBSERVE_RULES
from drainhook.planning.histogram import (
    DEFAULT_QUANTILE,
    Observation,
    Recommendation,
    formula,
    recommend,
)
from drainhook.reading.config import ReadConfig
from drainhook.reading.target import build_url, parse_url

SCHEMA = 1
Role = Literal["unified", "prefill", "decode"]
Output = Literal["text", "json", "yaml"]
SPLIT_ROLES: tuple[Role, ...] = ("prefill", "decode")
# How inject brings the binary: in the engine image, an image volume, an init container.
Via = Literal["image", "image-volume", "init"]
DEFAULT_BINARY = "/usr/local/bin/drainhook"
# The kubelet throws a hook's output away (its event says only "PreStopHook
# failed"): the container's PID 1's stdout puts the hook's lines in `kubectl logs`.
LOG_FILE = "/proc/1/fd/1"

# What an engine takes to exit after SIGTERM, and what vLLM's `--shutdown-timeout N`
# (>= 0.18, vllm-project/vllm#34730) costs: CONTRACT §7, measured in benchmarks/.
SGLANG_EXIT = 10.0
SGLANG_PD_EXIT = 20.0
SGLANG_PD_GRACE = 45.0  # 20 s to drain after a 5 s settle, then R
VLLM_SHUTDOWN_TIMEOUT_SINCE = "0.18"


@dataclass(frozen=True)
class Plan:
    """The instants of one timeline, for an engine's role and the hook's path in the
    container."""

    at: Instants
    role: Role = "unified"
    binary: str = DEFAULT_BINARY
    known_engine: EngineChoice | None = None  # the engine when known otherwise (plan --observe)
    # vLLM's API-server processes (its --api-server-count; 0.32's default is its
    # --data-parallel-size), when known: /load reaches one per read (CONTRACT §2a).
    api_servers: int | None = None
    observed: Observation | None = None  # plan --observe's evidence, its G's for quantile
    quantile: float = DEFAULT_QUANTILE

    @property
    def warnings(self) -> tuple[PlanWarning, ...]:
        """What the timeline's rules, then the advice's, find wrong with this plan."""
        found = [rule(self.at) for rule in TIMELINE_RULES]
        found += [rule(self) for rule in ADVICE_RULES]
        found += [rule(self.recommendation, self.config.grace) for rule in OBSERVE_RULES]
        return tuple(w for w in found if w is not None)

    @property
    def config(self) -> WaitConfig:
        return self.at.config

    @functools.cached_property
    def recommendation(self) -> Recommendation | None:
        """What the evidence recommends for this plan's S and R (None: no evidence)."""
        if self.observed is None:
            return None
        return recommend(self.config, self.observed, self.quantile)

    @property
    def engine(self) -> str:
        """The engine the rules advise for: --engine, or the one the evidence showed.
        The preStop command keeps --engine as given."""
        return self.known_engine or self.config.reach.engine

    @property
    def command(self) -> tuple[str, ...]:
        """The preStop as it runs in a Pod: the timeline's flags, and --log-file on PID
        1's stdout, for the kubelet keeps a hook's own output to itself."""
        return (*prestop_command(self.config, self.binary), "--log-file", LOG_FILE)


# wait_config's parameters: the timeline's flags of `wait` (hook.config.TIMELINE),
# which `plan` takes and renders (prestop_command); inject keeps the hook's other
# flags as given.
TIMELINE = tuple(f.name for f in TIMELINE_FLAGS)


def wait_config(**given: Parsed) -> WaitConfig:
    """The `WaitConfig` that `wait` would build from these timeline flags (the others
    at their defaults; the default target)."""
    values: dict[str, Parsed] = {f.name: given.get(f.name, f.default) for f in TIMELINE_FLAGS}
    engine, read_timeout = values.pop("engine"), values.pop("read_timeout")
    target = parse_url(build_url("http", "127.0.0.1", default_port(engine), "/metrics"))
    reach = ReadConfig(target=target, engine=engine, read_timeout=read_timeout)
    return WaitConfig(reach=reach, **values)


def make_plan(
    config: WaitConfig,
    role: Role = "unified",
    binary: str = DEFAULT_BINARY,
    known_engine: EngineChoice | None = None,
    *,
    api_servers: int | None = None,
) -> Plan:
    """The timeline `wait` runs for config, and what is wrong with it. known_engine:
    the engine when something other than --engine showed it (a latency histogram)."""
    config.check()
    return Plan(instants(config), role, binary, known_engine, api_servers=api_servers)


# The advice: one function each, `(plan) -> PlanWarning | None`, in the order `plan`
# prints them (ADVICE_RULES, after the timeline's); a rule's `fixes` are applied by
# `apply_advice`, and its docstring, `code: when` on one line, is what `plan --help` lists.
Rule = Callable[[Plan], PlanWarning | None]


def _sglang_exit(plan: Plan) -> PlanWarning | None:
    """sglang-exit: an SGLang server (--engine sglang) needs R >= 10 s"""
    if plan.engine != "sglang" or plan.role != "unified":
        return None
    why = ": its watchdog looks for work left every 5 s, then it takes 1-2 s to stop"
    return _sglang_reserve(plan, "sglang-exit", SGLANG_EXIT, 0.0, why)


def _sglang_pd_exit(plan: Plan) -> PlanWarning | None:
    """sglang-pd-exit: an SGLang prefill/decode server needs R >= 20 s and G >= 45 s"""
    if plan.engine not in ("sglang", "auto") or plan.role not in ("prefill", "decode"):
        return None
    why = ", and is at least 45 s: 20 s to drain after a 5 s settle"
    return _sglang_reserve(plan, "sglang-pd-exit", SGLANG_PD_EXIT, SGLANG_PD_GRACE, why)


def _sglang_reserve(
    plan: Plan, code: str, exit_s: float, least_g: float, why: str
) -> PlanWarning | None:
    """R rises to exit_s; G rises by as much, so that the time left to drain (D)
    stays what it was, and to least_g at least."""
    g, r, role = plan.at.grace, plan.config.exit_reserve, plan.role
    if r >= exit_s and g >= least_g:
        return None
    new_r = max(r, exit_s)
    kept = g + (new_r - r)
    new_g = max(kept, least_g)
    server = "server" if role == "unified" else f"{role} server"
    needs = f"an SGLang {server} needs about {seconds(exit_s)} after SIGTERM"
    fixes = []
    if new_r != r:
        fixes.append(Fix("exit_reserve", new_r, needs))
    if new_g != g:
        rises = f"G rises with R, so that D stays {seconds(plan.at.deadline)}"
        least = f"an SGLang {server} needs G >= {seconds(least_g)}"
        fixes.append(Fix("grace", new_g, rises if kept >= least_g and new_r != r else least))
    return PlanWarning(
        code,
        f"{needs}: use --exit-reserve {number(new_r)} (now {seconds(r)}) and "
        f"G = {seconds(new_g)} (now {seconds(g)})",
        "with less, the kubelet kills it before it has exited; G rises with R so that the "
        f"deadline stays{why}",
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
    if c.stall_after is None or c.stall_after <= 0 or plan.at.stall_earliest is not None:
        return None
    start = plan.at.first_read if plan.at.first_read is not None else c.settle
    return PlanWarning(
        "stall-after-deadline",
        f"--stall-after W = {seconds(c.stall_after)} cannot end the hook: the first read at "
        f"{seconds(start)} plus W is {seconds(start + c.stall_after)}, not before "
        f"D = {seconds(plan.at.deadline)}",
        "a stalled engine then holds the replica to D as a busy one does; lower "
        "--stall-after (above the longest healthy flat stretch) or raise G to "
        f"{least_grace(c)} s",
    )


def shutdown_timeout(plan: Plan) -> int | None:
    """vLLM's `--shutdown-timeout` worth its exit for this timeline: R - 1 whole
    seconds, or None. It lengthens every exit and saves only a request a router
    slower than the settle sends after the release, so only where S is under the
    usual deregistration (docs/design.md, §4), for vLLM, with a whole second in R."""
    n = math.floor(plan.config.exit_reserve - 1)
    slow_router = plan.config.settle < ROUTER_DEREGISTRATION
    return n if plan.engine == "vllm" and slow_router and n >= 1 else None


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
        "process waits for their connections until SIGKILL. The flag adds its engine "
        "core's teardown to every drained exit (4 to 6.3 s against 0.4 s, vLLM 0.32); "
        "with S >= 5 s nothing slips in after the release and it is not advised",
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


# Advice for the Pod spec and the engine's own flags: `plan` only, never logged by a
# drain (a W set for every Pod would warn on each short-G Pod's drains).
ADVICE_RULES: tuple[Rule, ...] = (
    _stall_after_deadline,
    _sglang_exit,
    _sglang_pd_exit,
    _vllm_prefill_linger,
    _vllm_shutdown_timeout,
    _vllm_api_servers,
)


def help_text() -> str:
    """`plan --help`: what it shows, and the warnings, listed from the rules."""

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
    Exit: 0, 1 a warning stands (--strict), 2 usage or no histogram, 3 unreadable or
    malformed histogram (or a G past an int64), 4 unreachable, 74 output not written.
    """


# How a changed value is named in a comment: the YAML field for G (--grace equals it).
LABELS = {"grace": "terminationGracePeriodSeconds", "exit_reserve": "--exit-reserve"}
APPLIED_FIELDS = ("exit_reserve", "grace")


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
        lower = ", lower" if self.applied < self.given else ""  # plan --observe's shorter G
        return f"{self.label} {number(self.given)} -> {number(self.applied)}{lower} ({why})"


@dataclass(frozen=True)
class Applied:
    """The plan as `--output yaml` writes it: its own advice applied."""

    plan: Plan
    changes: tuple[Change, ...]


def apply_advice(plan: Plan) -> Applied:
    """The one place that decides the values the fragment carries: the warnings'
    `fixes` (floors from the plan's own values: one application reaches them), over
    values given too, each change named; then G from the evidence (`plan --observe`),
    computed with that R, replaces G, the fixes still floors. Advice without a
    value stays a warning."""
    reasons: dict[str, list[str]] = {f: [] for f in APPLIED_FIELDS}
    current = _fixed(plan, reasons)
    rec = current.recommendation
    if rec is not None and rec.grace is not None and rec.latency is not None:
        if rec.grace != current.at.grace:
            reasons["grace"] = [f"observed: {formula(current.config, rec)}"]  # replaces G
            current = _with(current, grace=rec.grace)
        current = _fixed(current, reasons)  # the fixes stay floors under the new G
    changes = tuple(
        Change(f, getattr(plan.config, f), getattr(current.config, f), tuple(reasons[f]))
        for f in APPLIED_FIELDS
        if getattr(plan.config, f) != getattr(current.config, f)
    )
    return Applied(current, changes)


def _fixed(plan: Plan, reasons: dict[str, list[str]]) -> Plan:
    """plan with its warnings' fixes applied (each a floor: once is enough)."""
    values: dict[str, float] = {}
    for w in plan.warnings:
        for f in w.fixes:
            if getattr(plan.config, f.field) != f.value:
                reasons[f.field].append(f"{w.code}: {f.because}")
                values[f.field] = f.value
    return _with(plan, **values) if values else plan


def _with(plan: Plan, **values: float) -> Plan:
    """plan with some of APPLIED_FIELDS set (its evidence kept)."""
    c = plan.config
    config = dataclasses.replace(
        c,
        grace=values.get("grace", c.grace),
        exit_reserve=values.get("exit_reserve", c.exit_reserve),
    )
    config.check()
    return dataclasses.replace(plan, at=instants(config))


def prestop_command(config: WaitConfig, binary: str = DEFAULT_BINARY) -> tuple[str, ...]:
    """The preStop exec command that runs config: `--grace` always, other flags when
    they differ from the defaults."""
    args = [binary, "wait"]
    for f in TIMELINE_FLAGS:
        value = f.of(config)
        if f.name == "grace" or value not in (f.default, f.unset):
            args += [f.flag, number(value) if f.kind == "seconds" else str(value)]
    return tuple(args)


# SGLang serves /metrics only with --enable-metrics (without it every read is a
# 404); vLLM's `GET /load` answers only with --enable-server-load-tracking, in every
# vLLM since 0.9.
VLLM_LOAD_TRACKING_SINCE = "0.9"


@dataclass(frozen=True)
class EngineFlag:
    """One flag of the engine's own command line that the advice names. `value` None:
    a switch; `ceiling`: a larger value given is advised down to it, a smaller kept;
    `needed`: the hook cannot read the engine without it; `reads`: the hook reads the
    engine or its server's count through it (inject adds it where missing; the other
    advice it names); `since`: the version that has it (older ones refuse it and do
    not start); `add`: advised where missing."""

    flag: str
    value: str | None
    why: str
    since: str | None = None
    ceiling: bool = False
    needed: bool = False
    add: bool = True  # False: only a value already given is advised (down)
    reads: bool = False

    @property
    def args(self) -> list[str]:
        return [self.flag] if self.value is None else [self.flag, self.value]


def engine_flags(plan: Plan) -> tuple[EngineFlag, ...]:
    """The engine's own flags this plan's advice names, in one place: `plan`'s JSON
    (`applied.engine_args`) and `inject`, which writes them into the engine's
    command line, both read them here. Nothing for `auto` (whose flag is unknown)."""
    if plan.engine == "sglang":
        why = "SGLang serves /metrics only with it"
        return (EngineFlag("--enable-metrics", None, why, needed=True, reads=True),)
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
        # One already given (llm-d's 45) adds the engine core's teardown (3.4 to 5.6 s)
        # to every drained exit: vLLM's default advised, never added (inject names it).
        why = "with S >= 5 s the hook leaves it nothing to save; it lengthens every exit"
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
    flags.append(
        EngineFlag("--enable-server-load-tracking", None, why, VLLM_LOAD_TRACKING_SINCE, reads=True)
    )
    return tuple(flags)


def engine_args(plan: Plan) -> list[str]:
    return [arg for flag in engine_flags(plan) if flag.add for arg in flag.args]
