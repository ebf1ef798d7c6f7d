"""The latency histograms of `plan --observe`: a /metrics body to a few families'
series (`scan_families`, with the gauge scanner's grammar and bounds), summed
(`sum_series`) or differenced (`difference`); a family that breaks a rule gets a
`problem`, never a traceback or a wrong count."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from drainhook.engines.gauges import EngineName, spellings

# The sample-line grammar is the gauge scanner's own (names, label sets, values).
from drainhook.engines.grammar import NUMBER, SPECIAL, Needles, lines, placed, sample_rest
from drainhook.engines.verdict import Body
from drainhook.errors import Malformed, ObserveError
from drainhook.hook.config import WaitConfig
from drainhook.hook.timeline import GRACE_MIN
from drainhook.numfmt import json_number, number, seconds

Labels = tuple[tuple[str, str], ...]

# Bounds on each family in one body: twenty times a 64-engine vLLM's e2e family
# (23 lines a series, a series per engine: about 1500 samples, 200 KB). Past one,
# that family is a problem; the others are read on.
MAX_FAMILY_BYTES = 4 * 1024 * 1024  # bytes of one family's lines
MAX_SAMPLES = 32768  # bucket and _count samples of one family

_SUFFIXES = (b"_bucket", b"_count", b"_sum")
INF = math.inf


@dataclass
class RawSeries:
    """One series of a histogram family as written: its buckets (upper bound to
    cumulative count) and its `_count`, if any."""

    buckets: dict[float, float] = field(default_factory=dict)
    count: float | None = None


@dataclass
class Family:
    """What one body says of one histogram family."""

    name: str  # canonical, with `:`
    seen: bool = False  # any sample, or a `# TYPE`/`# HELP` line naming it
    series: dict[Labels, RawSeries] = field(default_factory=dict)
    problem: str | None = None  # the first line or sample that makes it unusable
    read_bytes: int = 0  # of its lines, against MAX_FAMILY_BYTES
    samples: int = 0  # bucket and _count samples, against MAX_SAMPLES

    def fail(self, why: str) -> None:
        self.problem = self.problem or f"{self.name}: {why}"


@dataclass(frozen=True)
class Histogram:
    """Series of one family summed: finite upper bounds in increasing order, and
    the cumulative counts at each, then at +Inf (the total)."""

    name: str
    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]  # len(bounds) + 1; the last is the +Inf bucket
    series: int  # series summed
    dropped: tuple[float, ...] = ()  # bounds not every series had, left out

    @property
    def total(self) -> float:
        return self.cumulative[-1]

    @property
    def largest_bound(self) -> float | None:
        return self.bounds[-1] if self.bounds else None

    def quantile(self, q: float) -> float | None:
        """The upper bound of the first bucket whose cumulative count reaches q x total
        (INF: the +Inf bucket; None: nothing observed), compared exactly (`exact`), so
        that 999 of 1000 requests is p99.9 and not one request short of it."""
        if self.total <= 0:
            return None
        (qn, qd), (tn, td) = exact(q), exact(self.total)
        for bound, cum in zip((*self.bounds, INF), self.cumulative, strict=True):
            cn, cd = exact(cum)
            if cn * qd * td >= qn * tn * cd:
                return bound
        return INF  # pragma: no cover - the +Inf bucket is the total

    def at_most(self, seconds: float) -> float:
        """Requests known to have taken at most `seconds`: the cumulative count at
        the largest bound <= seconds (0 below the smallest bound)."""
        known = 0.0
        for bound, cum in zip(self.bounds, self.cumulative, strict=False):
            if bound > seconds:
                break
            known = cum
        return known

    def buckets(self) -> list[tuple[float, float, float]]:
        """(lower, upper, requests) of every bucket, the last one up to INF."""
        rows = []
        lower, below = 0.0, 0.0
        for bound, cum in zip((*self.bounds, INF), self.cumulative, strict=True):
            rows.append((lower, bound, cum - below))
            lower, below = bound, cum
        return rows


def exact(x: float) -> tuple[int, int]:
    """x as the decimal it prints as (`repr`), a fraction (numerator, denominator):
    0.999 is 999/1000, not the binary float below it. Only for finite x. Not
    fractions.Fraction: it imports decimal, which the binary leaves out."""
    mantissa, _, exponent = repr(float(x)).partition("e")
    whole, _, frac = mantissa.partition(".")
    digits, scale = int(whole + frac), len(frac) - int(exponent or 0)
    return (digits, 10**scale) if scale >= 0 else (digits * 10**-scale, 1)


def scan_families(
    body: Body,
    names: Sequence[str],
    *,
    until: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Family]:
    """Every series of each named histogram family (canonical names), read in the
    gauge scanner's line loop (engines.grammar.lines). Raises TimeUp past `until`; a
    family over its bounds or with a wrong line keeps its first `problem` and is read
    no further, the others on."""
    families = {name: Family(name) for name in names}
    spelled = [(s.encode(), families[name]) for name in names for s in spellings(name)]
    needles = Needles(body, [n for n, _ in spelled])
    for start, at, end, which in lines(body, needles.first_from, until, clock):
        needle, family = spelled[which]
        if family.problem:
            continue
        line = _line(body, needle, family, start, at, end)
        if line is None:
            continue
        suffix = line[0]
        family.read_bytes += end - start
        if family.read_bytes > MAX_FAMILY_BYTES:
            family.fail(f"lines over {MAX_FAMILY_BYTES // 1024 // 1024} MiB")
            continue
        if suffix == b"_sum":
            continue
        family.samples += 1
        if family.samples > MAX_SAMPLES:
            family.fail(f"more than {MAX_SAMPLES} samples")
            continue
        _add(family, suffix, body, line[1], end)
    for family in families.values():
        if family.problem is None:
            _check(family)
    return families


def _line(
    body: Body, needle: bytes, family: Family, start: int, at: int, end: int
) -> tuple[bytes, int] | None:
    """(suffix, where the name ends) of a sample line of the family at `at`, or None
    for anything else (a `# TYPE` line then marks the family seen)."""
    name_end, place = placed(body, start, at, end)
    suffix = bytes(body[at + len(needle) : name_end])
    if place != "sample":
        family.seen = family.seen or (not suffix and place == "meta")
        return None  # the name inside another line (a HELP text, a label value)
    if suffix not in _SUFFIXES:
        return None  # another family: `_created`, a longer name
    family.seen = True
    return suffix, name_end


# A bucket's upper bound, as the Prometheus parsers read one (no `1_000`, no blanks).
_LE = re.compile(rf"{NUMBER}|{SPECIAL}")


def _add(family: Family, suffix: bytes, body: Body, name_end: int, end: int) -> None:
    """One sample line's labels and value, stored; an OpenMetrics exemplar
    (`... value # {labels} v`) is dropped."""
    try:
        try:
            labels, value = sample_rest(body, name_end, end)
        except Malformed:
            cut = body.rfind(b" # {", name_end, end)
            if cut < 0:
                raise
            labels, value = sample_rest(body, name_end, cut)
    except Malformed as exc:
        family.fail(f"malformed line ({exc})")
        return
    le = [v for k, v in labels if k == "le"]
    key = tuple(sorted(kv for kv in labels if kv[0] != "le")) if le else tuple(sorted(labels))
    if math.isnan(value) or math.isinf(value) or value < 0:
        family.fail(f"{_show(key)}: a count of {value:g}")
        return
    series = family.series.setdefault(key, RawSeries())
    if suffix == b"_count":
        if series.count is not None:
            family.fail(f"{_show(key)}: _count written twice")
        series.count = value
        return
    if len(le) != 1:
        family.fail(f"{_show(key)}: a bucket without one le label")
        return
    if _LE.fullmatch(le[0]) is None:
        family.fail(f"{_show(key)}: le={le[0][:40]!r} is not a number")
        return
    bound = float(le[0])
    if math.isnan(bound) or bound < 0:  # a latency: -5 s would lower G (CONTRACT §5)
        family.fail(f"{_show(key)}: le={le[0][:40]!r} is not an upper bound")
        return
    if bound in series.buckets:
        family.fail(f"{_show(key)}: bucket le={le[0][:40]!r} written twice")
        return
    series.buckets[bound] = value


def _check(family: Family) -> None:
    """Each series cumulative, with its total: the +Inf bucket, or `_count` when the
    +Inf bucket is missing; both present must agree."""
    for key, series in family.series.items():
        shown = _show(key)
        total = series.buckets.get(INF)
        if total is None:
            if series.count is None:
                family.fail(f"{shown}: neither a +Inf bucket nor _count")
                return
            series.buckets[INF] = series.count
        elif series.count is not None and series.count != total:
            family.fail(
                f"{shown}: _count is {series.count:g} but the +Inf bucket {total:g} "
                "(a scrape torn between two updates?)"
            )
            return
        below, below_bound = 0.0, 0.0
        for bound in sorted(series.buckets):
            value = series.buckets[bound]
            if value < below:
                family.fail(
                    f"{shown}: bucket le={_bound(bound)} holds {value:g}, fewer than "
                    f"le={_bound(below_bound)} ({below:g}): the buckets are not cumulative"
                )
                return
            below, below_bound = value, bound


def sum_series(name: str, series: Iterable[RawSeries]) -> Histogram:
    """Checked series summed into one histogram, at the bounds they all share (exact for
    each, so for the sum); the others are left out (`dropped`)."""
    kept = [s for s in series if s.buckets]
    if not kept:
        return Histogram(name, (), (0.0,), 0)
    every = set.intersection(*(set(s.buckets) for s in kept))
    shared = sorted(b for b in every if b != INF)
    union = set.union(*(set(s.buckets) for s in kept))
    dropped = tuple(sorted(b for b in union - every if b != INF))
    cumulative = tuple(math.fsum(s.buckets[b] for s in kept) for b in (*shared, INF))
    return Histogram(name, tuple(shared), cumulative, len(kept), dropped)


def difference(
    before: dict[Labels, RawSeries], after: dict[Labels, RawSeries]
) -> tuple[list[RawSeries], int]:
    """The observations between two reads of one target, per series, and how many series
    were reset between them: a series whose counts went down or whose bounds changed
    restarted from 0 and counts whole (as Prometheus's `increase`); a new series
    counts whole; one gone counts nothing."""
    out: list[RawSeries] = []
    resets = 0
    for key, now in after.items():
        then = before.get(key)
        if then is None:
            out.append(now)
            continue
        if set(then.buckets) != set(now.buckets) or any(
            now.buckets[b] < then.buckets[b] for b in now.buckets
        ):
            resets += 1
            out.append(now)
            continue
        out.append(RawSeries({b: now.buckets[b] - then.buckets[b] for b in now.buckets}))
    return out, resets


def _bound(bound: float) -> str:
    return "+Inf" if bound == INF else f"{bound:g}"


def _show(key: Labels) -> str:
    text = ",".join(f'{k}="{v[:40]}"' for k, v in key)
    return f"{{{text[:200]}}}"


# ---- the evidence: what the histogram recommends ----------------------------------

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
    """The evidence against a plan: the observation, the quantile's bound, G, the
    share cut."""

    observed: Observation
    quantile: float
    latency: float | None  # INF: in the +Inf bucket; None: nothing observed
    quantiles: dict[float, float | None]
    grace: int | None  # recommended G, or None when latency is not finite
    raw_grace: int | None  # ceil(S + latency + R) before the 15 s floor
    window_s: float  # D - S of the plan as given
    longer: float | None  # requests not known to end within D - S, or None: none observed


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
    return Recommendation(observed, quantile, latency, quantiles, grace, raw, window, longer)


def formula(config: WaitConfig, rec: Recommendation) -> str:
    """`G = ceil(S 5 + p99.9 30 + R 5) = 40` (and the floor when it acted)."""
    assert rec.latency is not None
    raised = f", raised to {int(GRACE_MIN)}" if rec.raw_grace != rec.grace else ""
    return (
        f"G = ceil(S {number(config.settle)} + "
        f"{quantile_label(rec.quantile)} {number(rec.latency)} "
        f"+ R {number(config.exit_reserve)}) = {rec.raw_grace}{raised}"
    )


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
