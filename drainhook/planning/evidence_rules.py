"""`plan --observe`'s rules (CONTRACT §4): the honest edges of the evidence a plan
was made from (`observe-*`), after the plan's advice. Each finds nothing in a plan
that holds no observation."""

from __future__ import annotations

from collections.abc import Callable

from drainhook.engines.gauges import BY_NAME
from drainhook.hook.timeline import GRACE_MAX, GRACE_MIN, PlanWarning
from drainhook.numfmt import seconds
from drainhook.planning.histogram import (
    INF,
    SMALL_SAMPLE,
    Recommendation,
    count_text,
    pct,
    quantile_label,
)

# A rule reads the plan's recommendation and its G (Plan.warnings hands them in).
EvidenceRule = Callable[[Recommendation | None, float], PlanWarning | None]


def _observe_small_sample(r: Recommendation | None, grace: float) -> PlanWarning | None:
    """observe-small-sample: under 100 requests observed"""
    if r is None:
        return None
    n = r.observed.histogram.total
    if n >= SMALL_SAMPLE:
        return None
    return PlanWarning(
        "observe-small-sample",
        f"{count_text(n)} observed" + ("" if n else ": no recommendation"),
        f"under {SMALL_SAMPLE} requests a {quantile_label(r.quantile)} says little about the long "
        "requests a drain leaves; observe longer, or under real traffic",
    )


def _observe_inf(r: Recommendation | None, grace: float) -> PlanWarning | None:
    """observe-inf: the quantile is in the +Inf bucket"""
    if r is None or r.latency != INF:
        return None
    largest = r.observed.histogram.largest_bound
    shown = "no finite bucket" if largest is None else f"the largest bound, {seconds(largest)}"
    flag = BY_NAME[r.observed.engine].latency.bucket_flag
    return PlanWarning(
        "observe-inf",
        f"the {quantile_label(r.quantile)} is in the +Inf bucket, above {shown}: no G can be "
        "read from it",
        f"the requests there may take any time; give the engine larger buckets ({flag})",
    )


def _observe_floor(r: Recommendation | None, grace: float) -> PlanWarning | None:
    """observe-floor: the recommended G was raised to 15 s"""
    if r is None:
        return None
    raw, raised = r.raw_grace, r.grace
    if raw is None or raised is None or raw >= raised:
        return None
    return PlanWarning(
        "observe-floor",
        f"ceil(S + {quantile_label(r.quantile)} + R) = {raw}s, raised to {seconds(GRACE_MIN)}",
        "under 15 s there is no room to settle, read and let the engine exit",
    )


def _observe_grace_range(r: Recommendation | None, grace: float) -> PlanWarning | None:
    """observe-grace-range: the recommended G is over 3600 s"""
    if r is None or r.grace is None or r.grace <= GRACE_MAX:
        return None
    return PlanWarning(
        "observe-grace-range",
        f"the recommended G = {r.grace}s is over {seconds(GRACE_MAX)}",
        "the evidence asks for it, but a drain that long outlasts node drains "
        "and holds every rollout as long; consider capping requests (max_tokens, "
        "a request timeout) instead",
    )


def _observe_cuts(r: Recommendation | None, grace: float) -> PlanWarning | None:
    """observe-cuts: more requests than the quantile leaves ran longer than D - S"""
    if r is None or r.longer is None or r.longer <= 1 - r.quantile + 1e-12:
        return None
    return PlanWarning(
        "observe-cuts",
        f"with G = {seconds(grace)} now, at most {pct(r.longer)} of observed "
        f"requests ran longer than D - S = {seconds(r.window_s)}",
        "a request that starts as the Pod is deleted has D - S to finish; "
        "longer ones are cut at SIGTERM",
    )


def _observe_reset(r: Recommendation | None, grace: float) -> PlanWarning | None:
    """observe-reset: a series restarted from 0 during --window"""
    if r is None or not r.observed.resets:
        return None
    return PlanWarning(
        "observe-reset",
        f"{r.observed.resets} series restarted from 0 during the window",
        "an engine restarted between the two reads; its requests before the "
        "restart are not in the difference",
    )


def _observe_bounds(r: Recommendation | None, grace: float) -> PlanWarning | None:
    """observe-bounds: the series disagree on bucket bounds"""
    if r is None:
        return None
    dropped = r.observed.histogram.dropped
    if not dropped:
        return None
    more = ", ..." if len(dropped) > 6 else ""
    shown = ", ".join(seconds(b) for b in dropped[:6]) + more
    return PlanWarning(
        "observe-bounds",
        f"the series disagree on bucket bounds: summed at the bounds they share ({shown} left out)",
        "an engine or target with other custom buckets; the shared bounds are exact, only coarser",
    )


OBSERVE_RULES: tuple[EvidenceRule, ...] = (
    _observe_small_sample,
    _observe_inf,
    _observe_floor,
    _observe_grace_range,
    _observe_cuts,
    _observe_reset,
    _observe_bounds,
)
