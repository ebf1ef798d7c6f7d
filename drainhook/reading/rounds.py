"""Several targets read as one (`--url` or `--port` given more than once, as for
vLLM's `--data-parallel-multi-port-external-lb`). A round's verdict and its merge
of series that two targets both export are the rules of docs/design.md, "Several
targets" (`combine_readings`): a target that answered before and now refuses counts
0 (its engine exited); one that never answered makes the round `unknown` (a typo
must not shrink the drain).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Collection, Sequence

from drainhook.engines.gauges import SeriesKey, series_key
from drainhook.engines.verdict import Reading, Series, Signals, Verdict, count, with_signals
from drainhook.reading import TargetReader


class Round:
    """Reads every target once per `read`, each within its own read timeout and all
    by the round's `left` (CONTRACT §1: a target past D is not read; the round is
    then `unknown`); `combine_readings` with `answered`, the targets that answered."""

    def __init__(
        self, readers: Sequence[TargetReader], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._readers = list(readers)
        self._clock = clock
        self._answered: set[str] = set()

    @property
    def name(self) -> str:
        """The targets as shown, comma-separated."""
        return ",".join(r.name for r in self._readers)

    def close(self) -> None:
        for reader in self._readers:
            reader.close()

    def read(self, left: float) -> Reading:
        start = self._clock()
        until = start + left
        parts: list[tuple[str, Reading]] = []
        for reader in self._readers:
            now = self._clock()
            if now >= until:
                why = f"no time left before D to read {reader.name}"
                return Reading.failed(Verdict.UNKNOWN, why, (now - start) * 1000.0)
            parts.append((reader.name, reader.read(until - now)))
        combined = combine_readings(parts, self._answered)
        self._answered.update(n for n, r in parts if r.verdict is not Verdict.UNREACHABLE)
        return dataclasses.replace(combined, read_ms=(self._clock() - start) * 1000.0)


def combine_readings(parts: Sequence[tuple[str, Reading]], answered: Collection[str]) -> Reading:
    """One reading from each target's (pure); `answered`: targets that answered before."""
    parts = tuple(parts)
    read_ms = sum(r.read_ms for _, r in parts)
    warnings = tuple(f"{n}: {w}" for n, r in parts for w in r.warnings)
    gone = [(n, r) for n, r in parts if r.verdict is Verdict.UNREACHABLE]
    answering = [(n, r) for n, r in parts if r.verdict is not Verdict.UNREACHABLE]
    series = merge_series([r.series for _, r in answering])
    engines = {r.engine for _, r in answering if r.engine}
    engine = next(iter(engines)) if len(engines) == 1 else None
    sources = {r.source for _, r in answering if r.source}
    source = (next(iter(sources)) if len(sources) == 1 else "mixed") if sources else None

    def reading(verdict: Verdict, total: float | None, reason: str | None) -> Reading:
        return Reading(
            verdict, engine, total, series, reason, read_ms, warnings, parts, source=source
        )

    if not answering:
        n, r = gone[0]
        why = f"all {len(parts)} targets unreachable; {n}: {r.reason}"
        return Reading(Verdict.UNREACHABLE, None, None, (), why, read_ms, warnings, parts)
    for n, r in answering:
        if r.verdict is Verdict.UNKNOWN:
            return reading(Verdict.UNKNOWN, None, f"{n}: {r.reason}")
    never = [(n, r) for n, r in gone if n not in answered]
    if never:
        n, r = never[0]
        return reading(
            Verdict.UNKNOWN, None, f"{n} unreachable and has not answered yet ({r.reason})"
        )
    if len(engines) > 1:
        return reading(
            Verdict.UNKNOWN, None, f"targets disagree on the engine ({', '.join(sorted(engines))})"
        )
    verdict, total, note = count(s.value for s in series)
    exited = [n for n, _ in gone]
    if exited and total is not None:
        note = f"{', '.join(exited)} unreachable after answering: counted as 0 (its engine exited)"
    combined = reading(verdict, total, note)
    if total is None:
        return combined
    # CONTRACT §2a: each signal summed over the answering targets (the scheduler's
    # from the merged series), the round's count the largest of them.
    signals = Signals()
    for _, r in answering:
        signals = signals.plus(r.signals or Signals(r.scheduler))
    return with_signals(combined, dataclasses.replace(signals, scheduler=total))


def merge_series(per_target: Sequence[Sequence[Series]]) -> tuple[Series, ...]:
    """Every target's series as one set, in first-seen order: one seen on several targets
    once, at its largest, "the same" setting `tp_rank` aside as one body's scan does (§3)."""
    merged: dict[SeriesKey, Series] = {}
    for series in per_target:
        for one in series:
            key = series_key(one.name, one.labels)
            held = merged.get(key)
            if held is None or one.value > held.value:
                merged[key] = one
    return tuple(merged.values())
