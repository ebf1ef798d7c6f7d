"""Counted series of several listeners as one set (CONTRACT §2a).

Series identical in name and labels on two listeners are one series seen
twice (a proxy re-exporting the engine's metrics): they count once, at their
max. Different series add up: vLLM's multi-port data parallel serves each
rank's gauges on its own port, with its own `engine` label. "Identical" sets
`tp_rank` aside, as one body's scan does (§3: series that differ only in
`tp_rank` describe one batch), so a copy read a moment later, whose largest
rank has changed, is still the same series.
"""

from __future__ import annotations

from collections.abc import Sequence

from drainhook.engines import gauges
from drainhook.engines.gauges import SeriesKey
from drainhook.engines.verdict import Series


def series_key(series: Series) -> SeriesKey:
    """What makes two series the same: gauges.series_key's rule (tp_rank aside)."""
    return gauges.series_key(series.name, series.labels)


def merge_series(per_target: Sequence[Sequence[Series]]) -> tuple[Series, ...]:
    """Every target's series as one set, in first-seen order; a series seen on
    several targets once, with its largest value (and that copy's labels)."""
    merged: dict[SeriesKey, Series] = {}
    for series in per_target:
        for one in series:
            key = series_key(one)
            held = merged.get(key)
            if held is None or one.value > held.value:
                merged[key] = one
    return tuple(merged.values())
