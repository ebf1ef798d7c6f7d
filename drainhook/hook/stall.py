"""The stall rule of CONTRACT §2b (every case is there): work reported is not work
done. Pure: `StallWatch.observe(t, reading)` sees each read at its start time and
says whether the replica is stalled: a target's window opens at its first read of
work that can stall (the scheduler's count less `Progress.external`) and again at
every counter move or reset, and the replica is stalled once a window has been
open W seconds and no target that reports work says otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from drainhook.engines.verdict import Reading, Series, Verdict
from drainhook.numfmt import number

CounterKey = tuple[str, tuple[tuple[str, str], ...]]


@dataclass(frozen=True)
class Frozen:
    """One stalled target: its name (`""` for the only one), how long its counters
    have not moved, the work that could stall and all its work, at the last read,
    and its counters as they froze."""

    target: str
    seconds: float
    work: float
    in_flight: float
    counters: tuple[Series, ...]


@dataclass(frozen=True)
class Stall:
    """Every target that reports work is stalled (the outcome `stalled`)."""

    after: float  # W
    targets: tuple[Frozen, ...]

    @property
    def seconds(self) -> float:
        """How long no counter of any stalled target has moved: the shortest."""
        return min(f.seconds for f in self.targets)

    @property
    def work(self) -> float:
        return math.fsum(f.work for f in self.targets)

    @property
    def in_flight(self) -> float:
        return math.fsum(f.in_flight for f in self.targets)

    @property
    def counters(self) -> dict[str, float]:
        """Each frozen counter's name and value, summed over its series and targets."""
        return counter_totals(c for f in self.targets for c in f.counters)

    def describe(self) -> str:
        """One line: the frozen counters, the work they froze with, and for how long."""
        frozen = ", ".join(f"{name}={number(v)}" for name, v in self.counters.items())
        work, total = number(self.work), number(self.in_flight)
        also = "" if self.work == self.in_flight else f" ({total} in flight)"
        where = ""
        if len(self.targets) > 1 or self.targets[0].target:
            where = f" on {', '.join(f.target for f in self.targets)}"
        return (
            f"no progress for {self.seconds:.1f} s (--stall-after {number(self.after)}) with "
            f"{work} request{'' if self.work == 1 else 's'} that can stall{also}{where}; "
            f"frozen: {frozen}"
        )


def counter_totals(counters: Iterable[Series]) -> dict[str, float]:
    """name -> the sum of its series, in first-seen order (what `probe --json` shows)."""
    sums: dict[str, list[float]] = {}
    for c in counters:
        sums.setdefault(c.name, []).append(c.value)
    return {name: math.fsum(values) for name, values in sums.items()}


@dataclass
class _Track:
    """One target's window: the counters at the last read, and since when none moved."""

    values: dict[CounterKey, float] = field(default_factory=dict)
    since: float | None = None  # None: no window (no work that can stall)


class StallWatch:
    """The rule over a drain's reads; `after` is W (> 0). `on_note(text)` is told,
    once per target, that a target reporting work has no progress counter (its
    stall detection is off), and of each reset."""

    def __init__(self, after: float, on_note: Callable[[str], None] = lambda _t: None) -> None:
        self.after = after
        self._on_note = on_note
        self._tracks: dict[str, _Track] = {}
        self._noted: set[str | tuple[str, str]] = set()

    def observe(self, t: float, reading: Reading) -> Stall | None:
        """The read at t (seconds from the hook's start): a Stall, or None."""
        if reading.verdict not in (Verdict.IDLE, Verdict.BUSY):
            return None
        frozen: list[Frozen] = []
        blocked = False  # a target reports work and is not stalled
        for name, part in reading.per_target():
            if part.verdict is Verdict.UNREACHABLE:  # exited (counted as 0), or stood in for
                self._tracks.pop(name, None)
                continue
            found = self._one(t, name, part)
            if found is not None:
                frozen.append(found)
            elif (part.in_flight or 0) > 0:
                blocked = True
        if frozen and not blocked:
            return Stall(self.after, tuple(frozen))
        return None

    def _one(self, t: float, name: str, part: Reading) -> Frozen | None:
        # Only the scheduler's count can stall: work that only the HTTP server or
        # the connections show (an upload, rendering, a media fetch) makes no
        # tokens, and never counts toward a stall (CONTRACT §2b).
        work = part.scheduler or 0.0
        progress = part.progress
        if progress is None:  # a counter line that could not be read: no judgement
            return None
        track = self._tracks.setdefault(name, _Track())
        if not progress.counters:
            track.values, track.since = {}, None
            if work > 0 and name not in self._noted:
                self._noted.add(name)
                who = f"{name}: " if name else ""
                self._on_note(
                    f"{who}the engine exports no progress counter: no stall detection "
                    "(--stall-after) for it"
                )
            return None
        values: dict[CounterKey, float] = {}
        for c in progress.counters:
            key = (c.name, tuple(sorted(c.labels)))
            values[key] = max(values.get(key, c.value), c.value)
        stallable = max(0.0, work - progress.external)
        previous, track.values = track.values, values
        if stallable <= 0:
            track.since = None
            return None
        if track.since is None:
            track.since = t  # the window opens with the work
            return None
        reset = any(values.get(k, -math.inf) < v for k, v in previous.items())
        moved = any(previous.get(k, -math.inf) < v for k, v in values.items())
        if reset:
            track.since = t
            if ("reset", name) not in self._noted:  # said once per target
                self._noted.add(("reset", name))
                who = f"{name}: " if name else ""
                self._on_note(f"{who}a progress counter went down (an engine restart): a reset")
            return None
        if moved:
            track.since = t
            return None
        quiet = t - track.since
        if quiet < self.after:
            return None
        return Frozen(name, quiet, stallable, part.in_flight or work, progress.counters)
