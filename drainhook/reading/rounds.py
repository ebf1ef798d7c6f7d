"""Several targets read as one (`--url` or `--port` given more than once).

vLLM's `--data-parallel-multi-port-external-lb` runs one API server per DP
rank on port + local rank, each serving its own rank's gauges; the hook reads
every target each round and sums them. A round's verdict:

- every target unreachable: `unreachable` (ends `wait`, as for one target);
- a target that answers `unknown`: `unknown`;
- a target unreachable that answered earlier in this hook: its engine has
  exited and holds no work, so it counts as 0 (and the round says so);
- a target unreachable that has never answered while others do: `unknown`.
  It may be an engine that is gone, or a port typed wrong; the hook cannot
  tell, and a typo must not silently shrink the drain to the other targets.
  The read line and `probe` name it;
- a target that refused from the start and that listener discovery stands in
  for (`replaced`, CONTRACT §2a): 0 while it refuses; counted if it answers;
- otherwise the total of the answering targets: `busy` or `idle`.

The total is over the answering targets' series merged (drainhook.reading.merge):
a series identical in name and labels on two targets (a proxy re-exporting
the engine's metrics) counts once, at its largest; different series add up.
Counts are never negative, so the verdict is the one a plain sum would give:
the merge only keeps the total shown from counting a copy twice.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Collection, Sequence

from drainhook.engines.verdict import Reading, Signals, Verdict, count, with_signals
from drainhook.reading import TargetReader
from drainhook.reading.merge import merge_series


class Round:
    """Reads every target once per `read`, within one shared timeout.

    `answered`: targets known to have answered already (listener discovery's
    finds); `replaced`: targets that refused from the start, which discovery
    stands in for (see `combine_readings`).
    """

    def __init__(
        self,
        readers: Sequence[TargetReader],
        clock: Callable[[], float] = time.monotonic,
        *,
        answered: Collection[str] = (),
        replaced: Collection[str] = (),
    ) -> None:
        self._readers = list(readers)
        self._clock = clock
        self._answered: set[str] = set(answered)
        self._replaced = frozenset(replaced)

    @property
    def readers(self) -> tuple[TargetReader, ...]:
        return tuple(self._readers)

    @property
    def name(self) -> str:
        """The targets as shown, comma-separated."""
        return ",".join(r.name for r in self._readers)

    def read(self, timeout: float) -> Reading:
        start = self._clock()
        until = start + timeout
        parts: list[tuple[str, Reading]] = []
        for reader in self._readers:
            # Every target ends by the same instant: the round is one read.
            left = max(until - self._clock(), 1e-6)
            parts.append((reader.name, reader.read(left)))
        combined = combine_readings(parts, self._answered, self._replaced)
        self._answered.update(n for n, r in parts if r.verdict is not Verdict.UNREACHABLE)
        return dataclasses.replace(combined, read_ms=(self._clock() - start) * 1000.0)

    def close(self) -> None:
        for reader in self._readers:
            reader.close()


def combine_readings(
    parts: Sequence[tuple[str, Reading]],
    answered: Collection[str],
    replaced: Collection[str] = (),
) -> Reading:
    """One reading from each target's (pure); `answered`: targets that answered
    before; `replaced`: targets that refused from the start, stood in for by
    the listeners discovery found (they count as 0 while they refuse)."""
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
        refused = all(r.refused for _, r in parts)
        return Reading(
            Verdict.UNREACHABLE, None, None, (), why, read_ms, warnings, parts, refused=refused
        )
    for n, r in answering:
        if r.verdict is Verdict.UNKNOWN:
            return reading(Verdict.UNKNOWN, None, f"{n}: {r.reason}")
    never = [(n, r) for n, r in gone if n not in answered and n not in replaced]
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
    exited = [n for n, _ in gone if n not in replaced or n in answered]
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
