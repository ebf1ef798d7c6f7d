"""`drainhook plan --observe`: G from evidence (CONTRACT §4): the end-to-end latency
histogram (every series and target summed; saved scrapes; or two reads' difference)
gives the upper bound of the bucket holding `--quantile`, and G = ceil(S + it + R).
`gather` is the only I/O; `recommend` and `observe_warnings` are pure."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from drainhook.engines.gauges import BY_NAME, ENGINES, Engine, EngineName
from drainhook.engines.grammar import TimeUp
from drainhook.engines.verdict import Body, Reading, Verdict
from drainhook.errors import NoHistogram, ObserveError, Unreachable, UsageError
from drainhook.hook.config import WaitConfig
from drainhook.hook.timeline import GRACE_MAX, GRACE_MIN, PlanWarning
from drainhook.numfmt import json_number, number, seconds
from drainhook.planning import plan as planning
from drainhook.planning.histogram import (
    INF,
    Family,
    Histogram,
    Labels,
    RawSeries,
    difference,
    exact,
    scan_families,
    sum_series,
)
from drainhook.reading.config import DEFAULT_MAX_BODY, ReadConfig

DEFAULT_QUANTILE = 0.999
SMALL_SAMPLE = 100  # fewer requests than this: the quantile says little
QUANTILES = (0.5, 0.99, 0.999)  # shown as evidence whatever --quantile is


@dataclass(frozen=True)
class Observation:
    """What the engine's histogram says: the summed histogram and where it came from."""

    engine: EngineName
    histogram: Histogram
    source: str
    window: float | None = None  # seconds between the two reads, or None: one read
    resets: int = 0  # series reset (engine restarted) between the two reads

    @property
    def requests(self) -> float:
        return self.histogram.total


@dataclass(frozen=True)
class Recommendation:
    """The evidence against a plan: the quantile's bound, G, the share cut."""

    quantile: float
    latency: float | None  # INF: in the +Inf bucket; None: nothing observed
    quantiles: dict[float, float | None]
    grace: int | None  # recommended G, or None when latency is not finite
    raw_grace: int | None  # ceil(S + latency + R) before the 15 s floor
    window_s: float  # D - S of the plan as given
    longer: float | None  # requests not known to end within D - S, or None: none observed
    warnings: tuple[PlanWarning, ...]


def gather(
    *,
    engine: str = "auto",
    reach: ReadConfig | None = None,
    files: Sequence[Path] = (),
    max_body: int = DEFAULT_MAX_BODY,
    window: float | None = None,
    read_file: Callable[[Path, int], bytes] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Observation:
    """Read the histogram from every target, once or twice `window` apart, or from
    saved scrapes (`files`, read by `read_file(path, max_body)`)."""
    if reach is None:
        assert read_file is not None
        return from_bodies([(str(p), read_file(p, max_body)) for p in files], engine)
    first = _read_histograms(reach)
    if window is None:
        return _observation(first, engine, reach.display)
    start = clock()
    while (left := start + window - clock()) > 0:
        sleep(left)
    second = _read_histograms(reach)
    return _window_observation(first, second, engine, reach.display, clock() - start)


def from_bodies(bodies: Sequence[tuple[str, Body]], engine: str = "auto") -> Observation:
    """The observation of saved scrapes, (name, body) each, summed (pure)."""
    parts = [(name, scan_body(body, engine)) for name, body in bodies]
    return _observation(parts, engine, ", ".join(name for name, _ in bodies))


def scan_body(body: Body, engine: str, until: float | None = None) -> dict[str, Family]:
    """The latency families of one body: the engine's, or both engines' for auto."""
    engines = [BY_NAME[engine]] if engine in BY_NAME else list(ENGINES)
    return scan_families(body, [e.latency.name for e in engines], until=until)


def _read_histograms(reach: ReadConfig) -> list[tuple[str, dict[str, Family]]]:
    """Each target read once (drainhook.reading.assemble makes the readers, as for probe);
    the scan runs inside the read's time, as for a verdict."""
    from drainhook.reading.assemble import plain_reader

    found = []
    for target in reach.targets:
        reader = plain_reader(reach, target)
        try:
            got = reader.read_with(reach.read_timeout, _scanner(reach.engine))
        finally:
            reader.close()
        if isinstance(got, Reading):
            what = f"{target.display}: {got.reason}"
            if got.verdict is Verdict.UNREACHABLE:
                raise Unreachable(f"cannot read {what}")
            raise ObserveError(f"cannot read {what}")
        if isinstance(got, str):
            raise ObserveError(f"cannot read {target.display}: {got}")
        found.append((target.display, got))
    return found


def _scanner(engine: str) -> Callable[[Body, float], dict[str, Family] | str]:
    def scan(body: Body, until: float) -> dict[str, Family] | str:
        try:
            return scan_body(body, engine, until)
        except TimeUp as exc:
            return str(exc)

    return scan


def _family(parts: list[tuple[str, dict[str, Family]]], pin: str) -> Engine:
    """The engine whose latency family the bodies hold; NoHistogram when none or both."""
    engines: set[str] = set()
    for where, families in parts:
        here = {
            e.name for e in ENGINES if e.latency.name in families and families[e.latency.name].seen
        }
        if len(here) > 1:
            raise NoHistogram(
                f"{where} has both vLLM's and SGLang's latency histogram: pin --engine"
            )
        if not here:
            wanted = " or ".join(e.latency.name for e in ENGINES if pin in ("auto", e.name))
            hint = "" if pin == "vllm" else " (SGLang writes it only with --enable-metrics)"
            raise NoHistogram(f"no {wanted} histogram in {where}{hint}")
        engines |= here
    if len(engines) > 1:
        raise NoHistogram("the targets disagree on the engine (vLLM and SGLang): pin --engine")
    return BY_NAME[engines.pop()]


def _series(where: str, families: dict[str, Family], name: str) -> dict[Labels, RawSeries]:
    family = families[name]
    if family.problem is not None:
        raise ObserveError(f"{where}: {family.problem}")
    return family.series


def _observation(parts: list[tuple[str, dict[str, Family]]], pin: str, source: str) -> Observation:
    engine = _family(parts, pin)
    name = engine.latency.name
    series = [s for where, fams in parts for s in _series(where, fams, name).values()]
    return Observation(engine.name, sum_series(name, series), source)


def _window_observation(
    first: list[tuple[str, dict[str, Family]]],
    second: list[tuple[str, dict[str, Family]]],
    pin: str,
    source: str,
    took: float,
) -> Observation:
    engine = _family(first + second, pin)
    name = engine.latency.name
    series: list[RawSeries] = []
    resets = 0
    for (where, before), (_, after) in zip(first, second, strict=True):
        got, reset = difference(_series(where, before, name), _series(where, after, name))
        series += got
        resets += reset
    return Observation(engine.name, sum_series(name, series), source, window=took, resets=resets)


GRACE_LIMIT = 2**63 - 1  # terminationGracePeriodSeconds is an int64


def ceil_sum(*values: float) -> int:
    """ceil of the exact decimal sum: 5 + 0.3 + 5 is 10.3, never 10.299999..."""
    num, den = 0, 1
    for n, d in map(exact, values):
        num, den = num * d + n * den, den * d
    return -(-num // den)


def recommend(config: WaitConfig, observed: Observation, quantile: float) -> Recommendation:
    """G for the observed latency, and the share of requests the given G would cut."""
    h = observed.histogram
    latency = h.quantile(quantile)
    quantiles = {q: h.quantile(q) for q in QUANTILES}
    raw = None
    if latency is not None and latency != INF:
        raw = ceil_sum(config.settle, latency, config.exit_reserve)
        if raw > GRACE_LIMIT:
            raise ObserveError(
                f"a latency of {latency:.3g} s gives a G of {len(str(raw))} digits, past "
                "what Kubernetes accepts (terminationGracePeriodSeconds is an int64): "
                "the histogram cannot be right"
            )
    grace = None if raw is None else max(raw, int(GRACE_MIN))
    window = config.deadline - config.settle
    longer = None
    if h.total > 0:
        longer = (h.total - (h.at_most(window) if window > 0 else 0.0)) / h.total
    draft = Recommendation(quantile, latency, quantiles, grace, raw, window, longer, ())
    return dataclasses.replace(draft, warnings=observe_warnings(config, observed, draft))


@dataclass(frozen=True)
class Evidence:
    """What the observation rules read: the plan's values, the observation, and
    the recommendation drafted from it (its warnings not yet there)."""

    config: WaitConfig
    observed: Observation
    rec: Recommendation

    @property
    def label(self) -> str:
        return quantile_label(self.rec.quantile)


# The honest edges of the evidence, a table of rules like plan's RULES (`observe-*`).
ObserveRule = Callable[[Evidence], PlanWarning | None]


def _small_sample(e: Evidence) -> PlanWarning | None:
    """observe-small-sample: under 100 requests observed"""
    n = e.observed.histogram.total
    if n >= SMALL_SAMPLE:
        return None
    return PlanWarning(
        "observe-small-sample",
        f"{count_text(n)} observed" + ("" if n else ": no recommendation"),
        f"under {SMALL_SAMPLE} requests a {e.label} says little about the long "
        "requests a drain leaves; observe longer, or under real traffic",
    )


def _inf(e: Evidence) -> PlanWarning | None:
    """observe-inf: the quantile is in the +Inf bucket"""
    if e.rec.latency != INF:
        return None
    largest = e.observed.histogram.largest_bound
    shown = "no finite bucket" if largest is None else f"the largest bound, {seconds(largest)}"
    flag = BY_NAME[e.observed.engine].latency.bucket_flag
    return PlanWarning(
        "observe-inf",
        f"the {e.label} is in the +Inf bucket, above {shown}: no G can be read from it",
        f"the requests there may take any time; give the engine larger buckets ({flag})",
    )


def _floor(e: Evidence) -> PlanWarning | None:
    """observe-floor: the recommended G was raised to 15 s"""
    raw, grace = e.rec.raw_grace, e.rec.grace
    if raw is None or grace is None or raw >= grace:
        return None
    return PlanWarning(
        "observe-floor",
        f"ceil(S + {e.label} + R) = {raw}s, raised to {seconds(GRACE_MIN)}",
        "under 15 s there is no room to settle, read and let the engine exit",
    )


def _grace_range(e: Evidence) -> PlanWarning | None:
    """observe-grace-range: the recommended G is over 3600 s"""
    if e.rec.grace is None or e.rec.grace <= GRACE_MAX:
        return None
    return PlanWarning(
        "observe-grace-range",
        f"the recommended G = {e.rec.grace}s is over {seconds(GRACE_MAX)}",
        "the evidence asks for it, but a drain that long outlasts node drains "
        "and holds every rollout as long; consider capping requests (max_tokens, "
        "a request timeout) instead",
    )


def _cuts(e: Evidence) -> PlanWarning | None:
    """observe-cuts: more requests than the quantile leaves ran longer than D - S"""
    rec = e.rec
    if rec.longer is None or rec.longer <= 1 - rec.quantile + 1e-12:
        return None
    return PlanWarning(
        "observe-cuts",
        f"with G = {seconds(e.config.grace)} now, at most {pct(rec.longer)} of observed "
        f"requests ran longer than D - S = {seconds(rec.window_s)}",
        "a request that starts as the Pod is deleted has D - S to finish; "
        "longer ones are cut at SIGTERM",
    )


def _reset(e: Evidence) -> PlanWarning | None:
    """observe-reset: a series restarted from 0 during --window"""
    if not e.observed.resets:
        return None
    return PlanWarning(
        "observe-reset",
        f"{e.observed.resets} series restarted from 0 during the window",
        "an engine restarted between the two reads; its requests before the "
        "restart are not in the difference",
    )


def _bounds(e: Evidence) -> PlanWarning | None:
    """observe-bounds: the series disagree on bucket bounds"""
    dropped = e.observed.histogram.dropped
    if not dropped:
        return None
    more = ", ..." if len(dropped) > 6 else ""
    shown = ", ".join(seconds(b) for b in dropped[:6]) + more
    return PlanWarning(
        "observe-bounds",
        f"the series disagree on bucket bounds: summed at the bounds they share ({shown} left out)",
        "an engine or target with other custom buckets; the shared bounds are exact, only coarser",
    )


OBSERVE_RULES: tuple[ObserveRule, ...] = (
    _small_sample,
    _inf,
    _floor,
    _grace_range,
    _cuts,
    _reset,
    _bounds,
)


def observe_warnings(
    config: WaitConfig, observed: Observation, rec: Recommendation
) -> tuple[PlanWarning, ...]:
    """What OBSERVE_RULES find in the evidence, in their order."""
    evidence = Evidence(config, observed, rec)
    return tuple(w for rule in OBSERVE_RULES if (w := rule(evidence)) is not None)


@dataclass(frozen=True)
class ObserveRequest:
    """What `plan --observe` is asked: the plan's values, where the evidence is
    (a reach to read, or saved scrapes), and how to read it."""

    config: WaitConfig
    role: planning.Role = "unified"
    binary: str = planning.DEFAULT_BINARY
    output: planning.Output = "text"
    reach: ReadConfig | None = None  # None: read `files` instead
    files: tuple[Path, ...] = ()
    quantile: float = DEFAULT_QUANTILE
    window: float | None = None
    max_body: int = DEFAULT_MAX_BODY


def run_observe(request: ObserveRequest) -> tuple[planning.Plan, Observation, Recommendation]:
    """`plan --observe`: read, recommend; what render.observe_render prints (an error
    raises, with its exit code). Every usage error comes before any read."""
    from drainhook.reading.target import read_small_file

    r = request
    r.config.check()
    if r.window is not None and r.files:
        raise UsageError("--window needs two reads of a target, not --from-file")
    if r.window is not None and not (0 < r.window < math.inf):
        raise UsageError(f"--window must be a number of seconds > 0, not {r.window}")
    if not 0 < r.quantile <= 1:
        raise UsageError(f"--quantile must be in (0, 1], not {r.quantile}")
    observed = gather(
        engine=r.config.reach.engine,
        reach=r.reach,
        files=r.files,
        max_body=r.max_body,
        window=r.window,
        read_file=lambda path, cap: read_small_file(path, cap, "--from-file"),
    )
    rec = recommend(r.config, observed, r.quantile)
    # The engine is known from its histogram: its advice comes even with --engine auto.
    plan = planning.make_plan(r.config, r.role, r.binary, observed.engine)
    return plan, observed, rec


def quantile_label(q: float) -> str:
    """0.999 as p99.9, 0.5 as p50."""
    return "p" + f"{q * 100:.10f}".rstrip("0").rstrip(".")


def bound_text(value: float | None) -> str:
    if value is None:
        return "-"
    return "+Inf" if value == INF else seconds(value)


def count_text(n: float) -> str:
    return f"{number(n)} request" + ("" if n == 1 else "s")


def pct(share: float) -> str:
    return f"{share * 100:.3g}%"


def finite(value: float | None) -> float | int | None:
    """A number for JSON; null for none or +Inf (JSON has no infinity)."""
    if value is None or value == INF:
        return None
    return json_number(value)
