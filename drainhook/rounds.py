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
- otherwise the total of the answering targets: `busy` or `idle`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

from drainhook.verdict import Reading, Verdict, count


class TargetReader(Protocol):
    """What a round needs of one target's reader (drainhook.read.Reader)."""

    @property
    def name(self) -> str: ...

    def read(self, timeout: float) -> Reading: ...

    def close(self) -> None: ...


class Round:
    """Reads every target once per `read`, within one shared timeout."""

    def __init__(
        self, readers: Sequence[TargetReader], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._readers = list(readers)
        self._clock = clock
        self._answered: set[str] = set()

    def read(self, timeout: float) -> Reading:
        start = self._clock()
        until = start + timeout
        parts: list[tuple[str, Reading]] = []
        for reader in self._readers:
            # Every target ends by the same instant: the round is one read.
            left = max(until - self._clock(), 1e-6)
            parts.append((reader.name, reader.read(left)))
        combined = combine(parts, self._answered)
        self._answered.update(n for n, r in parts if r.verdict is not Verdict.UNREACHABLE)
        return _with_ms(combined, (self._clock() - start) * 1000.0)

    def close(self) -> None:
        for reader in self._readers:
            reader.close()


def _with_ms(reading: Reading, read_ms: float) -> Reading:
    return Reading(
        reading.verdict,
        reading.engine,
        reading.in_flight,
        reading.series,
        reading.reason,
        read_ms,
        reading.warnings,
        reading.parts,
    )


def combine(parts: Sequence[tuple[str, Reading]], answered: set[str]) -> Reading:
    """One reading from each target's (pure); `answered`: targets that answered before."""
    parts = tuple(parts)
    read_ms = sum(r.read_ms for _, r in parts)
    warnings = tuple(f"{n}: {w}" for n, r in parts for w in r.warnings)
    gone = [(n, r) for n, r in parts if r.verdict is Verdict.UNREACHABLE]
    answering = [(n, r) for n, r in parts if r.verdict is not Verdict.UNREACHABLE]
    series = tuple(s for _, r in answering for s in r.series)
    engines = {r.engine for _, r in answering if r.engine}
    engine = next(iter(engines)) if len(engines) == 1 else None

    def unknown(reason: str) -> Reading:
        return Reading(Verdict.UNKNOWN, engine, None, series, reason, read_ms, warnings, parts)

    if not answering:
        n, r = gone[0]
        why = f"all {len(parts)} targets unreachable; {n}: {r.reason}"
        return Reading(Verdict.UNREACHABLE, None, None, (), why, read_ms, warnings, parts)
    for n, r in answering:
        if r.verdict is Verdict.UNKNOWN:
            return unknown(f"{n}: {r.reason}")
    never = [(n, r) for n, r in gone if n not in answered]
    if never:
        n, r = never[0]
        return unknown(f"{n} unreachable and has not answered yet ({r.reason})")
    if len(engines) > 1:
        return unknown(f"targets disagree on the engine ({', '.join(sorted(engines))})")
    verdict, total, note = count(r.in_flight or 0.0 for _, r in answering)
    if gone and total is not None:
        names = ", ".join(n for n, _ in gone)
        note = f"{names} unreachable after answering: counted as 0 (its engine exited)"
    return Reading(verdict, engine, total, series, note, read_ms, warnings, parts)
