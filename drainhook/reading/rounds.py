"""Several targets read as one (`--url` or `--port` given more than once, as for
vLLM's `--data-parallel-multi-port-external-lb`), and listener discovery's first
read (CONTRACT §2a). A round's verdict and its merge of series that two targets
both export are the rules of docs/design.md, "Several targets" (`combine_readings`):
a target that answered before and now refuses counts 0 (its engine exited); one
that never answered makes the round `unknown` (a typo must not shrink the drain).
"""

from __future__ import annotations

import dataclasses
import functools
import time
import typing
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

from drainhook.engines.gauges import SeriesKey, series_key
from drainhook.engines.verdict import Reading, Series, Signals, Verdict, count, with_signals
from drainhook.reading import TargetReader
from drainhook.reading.target import Target

if typing.TYPE_CHECKING:  # discovery is loaded only when a search runs
    from drainhook.reading.discovery.listeners import Listener
    from drainhook.reading.discovery.search import Discovery, SearchRecord


@dataclass(frozen=True)
class Discover:
    """Listener discovery for a round (CONTRACT §2a). `on_refused`: search when every
    target refused the first read; `always` (`probe --discover`): search on the first
    read whatever it gave, to list what the Pod serves; `on_search` hears of the search."""

    targets: Sequence[Target]
    make_reader: Callable[[str], TargetReader]
    read_timeout: float
    engine: str = "auto"
    on_refused: bool = True
    always: bool = False
    listeners: Callable[[], Iterable[Listener]] | None = None
    on_search: Callable[[SearchRecord], None] = lambda _s: None


class Round:
    """Reads every target once per `read`, within one shared timeout (`combine_readings`:
    `answered`, targets known to have answered; `replaced`, refusing ones discovery
    stands in for). With `discover`, the first read alone may search the Pod's
    listeners within its time left; what it finds joins the round, its reads of them
    that first reading, the refusing targets then 0. `last_search`: the search, if any."""

    def __init__(
        self,
        readers: Sequence[TargetReader],
        clock: Callable[[], float] = time.monotonic,
        *,
        answered: Collection[str] = (),
        replaced: Collection[str] = (),
        discover: Discover | None = None,
    ) -> None:
        self._readers = list(readers)
        self._clock = clock
        self._answered: set[str] = set(answered)
        self._replaced = frozenset(replaced)
        self._discover = discover
        self.last_search: SearchRecord | None = None

    @property
    def name(self) -> str:
        """The targets as shown, comma-separated."""
        return ",".join(r.name for r in self._readers)

    def close(self) -> None:
        for reader in self._readers:
            reader.close()

    def read(self, timeout: float) -> Reading:
        start = self._clock()
        until = start + timeout
        if len(self._readers) == 1:
            reading = self._readers[0].read(timeout)
        else:
            parts: list[tuple[str, Reading]] = []
            for reader in self._readers:
                # Every target ends by the same instant: the round is one read.
                left = max(until - self._clock(), 1e-6)
                parts.append((reader.name, reader.read(left)))
            combined = combine_readings(parts, self._answered, self._replaced)
            self._answered.update(n for n, r in parts if r.verdict is not Verdict.UNREACHABLE)
            reading = dataclasses.replace(combined, read_ms=(self._clock() - start) * 1000.0)
        discover, self._discover = self._discover, None  # only the first read searches
        if discover is None:
            return reading
        refused = reading.verdict is Verdict.UNREACHABLE and reading.refused
        if not (refused and discover.on_refused) and not discover.always:
            return reading
        found = self._search(discover, until)
        if not refused:
            return reading
        took = (self._clock() - start) * 1000.0
        if not found.found:
            reason = f"{reading.reason}; no engine elsewhere in the Pod: {found.describe()}"
            return dataclasses.replace(reading, reason=reason, read_ms=took)
        return dataclasses.replace(self._add_found(discover, reading, found), read_ms=took)

    def _search(self, discover: Discover, until: float) -> Discovery:
        from drainhook.reading.discovery.listeners import read_listeners
        from drainhook.reading.discovery.search import SearchRecord, names_engine, search

        first = discover.targets[0]
        started = self._clock()
        found = search(
            discover.make_reader,
            read_timeout=discover.read_timeout,
            until=until,
            scheme=first.scheme,
            path=first.path,
            exclude=[(t.connect_host, t.port) for t in discover.targets],
            clock=self._clock,
            is_engine=functools.partial(names_engine, engine=discover.engine),
            listeners=discover.listeners or read_listeners,
        )
        configured = tuple(r.name for r in self._readers)
        self.last_search = SearchRecord(configured, found, started, self._clock())
        discover.on_search(self.last_search)
        return found

    def _add_found(self, discover: Discover, refused: Reading, found: Discovery) -> Reading:
        """The round of every target from now on; its first reading from the
        search's reads."""
        readers = [discover.make_reader(t.url) for t in found.found]
        names = [r.name for r in readers]
        configured = [r.name for r in self._readers]
        parts = list(refused.parts) or [(configured[0], refused)]
        parts += [
            (n, t.reading) for n, t in zip(names, found.found, strict=True) if t.reading is not None
        ]
        self._readers += readers
        self._answered.update(names)
        self._replaced = frozenset(configured)
        return combine_readings(parts, names, configured)


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
