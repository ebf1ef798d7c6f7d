"""The line scanner: a /metrics body to a verdict (CONTRACT §2-3). Only the counted
gauges' lines are parsed (Prometheus text 0.0.4 and OpenMetrics 1.0), so a bad or
huge family elsewhere cannot change the verdict; what a body can make it hold or do
is bounded, and past a bound the verdict is unknown, as for a body over --max-body."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from drainhook.engines import grammar
from drainhook.engines.gauges import (
    BY_NAME,
    ENGINES,
    PRIORITY_LABEL,
    Engine,
    SeriesKey,
    external_work,
    sample_kind,
    series_key,
    spellings,
)
from drainhook.engines.grammar import BLANKS
from drainhook.engines.verdict import (
    SERVER,
    Body,
    Progress,
    Scan,
    Series,
    Signals,
    Verdict,
    count,
    value_problem,
    with_signals,
)
from drainhook.errors import Malformed

ACCEPT = "text/plain;version=0.0.4"  # the Accept header of a /metrics read
Labels = tuple[tuple[str, str], ...]

# Every counted name starts with `<prefix>:num_` or `<prefix>_num_`; `bytes.find`
# locates those far faster than a regular expression would.
_NEEDLES: dict[str, tuple[bytes, ...]] = {
    e.name: tuple(n.encode() for n in spellings(f"{e.prefix}:num_")) for e in ENGINES
}
# A progress counter (CONTRACT §2b) is found by its name after the prefix and
# its separator, one needle for every spelling (gauges.NAME_SEPARATORS); the
# name then starts the line, and sample_kind checks the separator.
_INNER: dict[str, tuple[bytes, ...]] = {
    e.name: tuple(n[len(e.prefix) + 1 :].encode() for n in e.progress) for e in ENGINES
}
# The server's own count (CONTRACT §2a) is found the same way, in any body with
# the engine's counted gauges.
_SERVER: dict[str, tuple[bytes, ...]] = {
    e.name: (e.server.name[len(e.prefix) + 1 :].encode(),) if e.server else () for e in ENGINES
}
_LONGEST_NAME = max(
    len(n)
    for e in ENGINES
    for n in (
        *e.counted,
        *e.progress,
        *(w.name for w in e.external),
        *((e.server.name,) if e.server else ()),
    )
)

# Bounds on one body: ten times a large server's few hundred counted lines (under 200
# bytes, at most 8 labels each), holding the scanner under about 10 MB.
MAX_COUNTED_BYTES = 2 * 1024 * 1024  # counted lines read from one body, in bytes
MAX_SERIES = 2048  # counted series kept (series differing only in tp_rank: one)
MAX_LABELS_KEPT = 16384  # labels on all the counted series kept


class _Candidates(grammar.Needles):
    """Offsets of `<prefix>[:_]num_` in body (Needles), and of an engine's progress
    counters and server count where its counted gauges are. Such a needle is found
    inside its name: its offset is that of its line's first non-blank byte."""

    def __init__(self, body: Body, engines: Sequence[Engine], progress: bool = True) -> None:
        super().__init__(body, [n for e in engines for n in _NEEDLES[e.name]])
        self._anchored = len(self.needles)
        # Each needle costs a pass over the body: an engine's progress counters
        # are looked for only in a body that has its counted gauges.
        first = 0
        for engine in engines:
            spelt = len(_NEEDLES[engine.name])
            if any(at >= 0 for at in self.next[first : first + spelt]):
                inner = (_INNER[engine.name] if progress else ()) + _SERVER[engine.name]
                self.needles += inner
                self.next += [body.find(n) for n in inner]
            first += spelt

    def first_from(self, pos: int) -> tuple[int, int]:
        """The first offset >= pos and its needle, or (-1, -1)."""
        body = self.body
        while True:
            best, which = super().first_from(pos)
            if which < self._anchored:
                return best, which
            start = body.rfind(b"\n", 0, best) + 1
            begin = BLANKS.match(body, start, best).end()  # type: ignore[union-attr]
            if body[begin : begin + 1] != b"#":
                return begin, which
            # A HELP or TYPE line of a progress counter (or of the server's
            # count): looked past, not read.
            end = body.find(b"\n", best)
            self.next[which] = -1 if end < 0 else body.find(self.needles[which], end)


class _ScanState:
    """What one body's scan has gathered so far: one `add_*` per kind of sample
    line (gauges.sample_kind: counted, progress, external, server), and `finish`,
    the Scan they make. A bound passed raises _GaveUp."""

    def __init__(self, pinned: Engine | None) -> None:
        self.pinned = pinned
        self.seen: set[str] = set()  # engines whose counted families appear
        self.sampled: set[str] = set()  # canonical names with at least one total series
        # Per engine, the series kept: one per label set without tp_rank, the largest.
        self.kept: dict[str, dict[SeriesKey, Series]] = {e.name: {} for e in ENGINES}
        # Per engine: progress counters (the largest per label set), uncounted
        # external waiting's sums (§2b), the server's own count's series (§2a).
        self.counters: dict[str, dict[SeriesKey, Series]] = {e.name: {} for e in ENGINES}
        self.outside: dict[str, dict[str, float]] = {e.name: {} for e in ENGINES}
        self.server: dict[str, dict[SeriesKey, Series]] = {e.name: {} for e in ENGINES}
        self.n_kept = 0
        self.n_labels = 0
        self.problem: str | None = None  # why the verdict is unknown (the first)
        self.progress_bad = False  # a bad progress line: no progress this read

    def _keep(self, table: dict[SeriesKey, Series], key: SeriesKey, one: Series) -> None:
        """Keep one series under key, the largest of its copies, within the bounds."""
        held = table.get(key)
        if held is None:
            self.n_kept += 1
            self.n_labels += len(one.labels)
            if self.n_kept > MAX_SERIES:
                raise _GaveUp(f"more than {MAX_SERIES} counted series")
            if self.n_labels > MAX_LABELS_KEPT:
                raise _GaveUp(f"more than {MAX_LABELS_KEPT} labels on counted series")
        if held is None or one.value > held.value:
            table[key] = one

    def doubt(self, why: str) -> None:
        self.problem = self.problem or why

    def add_counted(self, eng: Engine, name: str, labels: Labels, value: float) -> None:
        if (why := value_problem(name, value)) is not None:
            self.doubt(why)
        elif eng.name != "sglang" or not any(k == PRIORITY_LABEL and v for k, v in labels):
            # (a non-empty priority: SGLang's per-priority breakdown of the total; a
            # vLLM series with one is counted: skipping it would read its work as 0)
            self.sampled.add(name)
            # Series that differ only in tp_rank describe one batch: the largest.
            self._keep(self.kept[eng.name], series_key(name, labels), Series(name, labels, value))

    def add_progress(self, eng: Engine, name: str, labels: Labels, value: float) -> None:
        if value_problem(name, value) is not None:
            self.progress_bad = True
            return
        key: SeriesKey = (name, tuple(sorted(labels)))
        self._keep(self.counters[eng.name], key, Series(name, labels, value))

    def add_external(self, eng: Engine, name: str, labels: Labels, value: float) -> None:
        if value_problem(name, value) is not None:
            self.progress_bad = True
            return
        for wait in eng.external:
            if wait.name == name and (wait.label is None or wait.label in labels):
                sums = self.outside[eng.name]
                sums[name] = sums.get(name, 0.0) + value

    def add_server(self, eng: Engine, name: str, labels: Labels, value: float) -> None:
        # A bad value of the server's count is doubt, as a counted gauge's is.
        if (why := value_problem(name, value)) is not None:
            self.doubt(why)
            return
        self._keep(self.server[eng.name], series_key(name, labels), Series(name, labels, value))

    def finish(self, body: Body, progress: bool) -> Scan:
        """The Scan of everything added: the verdict, the engine, the signals."""
        pinned = self.pinned
        if pinned is None and len(self.seen) != 1:
            none = not self.seen
            what = "no vllm or sglang request gauges" if none else "both vllm and sglang gauges"
            return Scan(Verdict.UNKNOWN, None, None, (), what, NO_GAUGES_WARNING if none else ())
        chosen = pinned or BY_NAME[next(iter(self.seen))]
        series = tuple(self.kept[chosen.name].values())
        warnings = _warnings(body, pinned, series, self.sampled)
        if self.problem is None:
            missing = [n for n in chosen.required if n not in self.sampled]
            if missing:
                self.doubt(f"required gauge missing: {', '.join(missing)}")
        made: Progress | None = None
        if progress and not self.progress_bad:
            read = tuple(self.counters[chosen.name].values())
            made = Progress(read, external_work(chosen, series, self.outside[chosen.name]))
        if self.problem is not None:
            return Scan(Verdict.UNKNOWN, chosen.name, None, series, self.problem, warnings, made)
        verdict, total, reason = count(s.value for s in series)
        scan = Scan(verdict, chosen.name, total, series, reason, warnings, made)
        if total is None:
            return scan
        return with_signals(scan, self._signals(chosen, total))

    def _signals(self, engine: Engine, scheduler: float) -> Signals:
        """The scheduler's count and the server's own (CONTRACT §2a) over the
        endpoints that carry work: missing where the body has no such gauge."""
        gauge = engine.server
        if gauge is None:
            return Signals(scheduler)
        found = self.server[engine.name].values()
        if not found:
            why = f"no {gauge.name} in /metrics (an SGLang older than it, or its Rust server)"
            return Signals(scheduler).without(SERVER, why)
        return Signals(scheduler, math.fsum(s.value for s in found if gauge.carries_work(s.labels)))


class _GaveUp(Exception):
    """A bound on one body passed: the read is unknown, with this reason."""


def scan(
    body: Body,
    engine: str = "auto",
    *,
    until: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    progress: bool = True,
) -> Scan:
    """The verdict of a 2xx body, with the engine and every counted series. `engine`:
    `auto` or the one engine whose gauges are read; past `until` (on `clock`) the
    scan is unknown, as a slow server's read is; `progress`: read the counters of
    CONTRACT §2b too (about twice the scan's time), else the scan's `progress` is None."""
    pinned: Engine | None = None if engine == "auto" else BY_NAME[engine]
    state = _ScanState(pinned)
    try:
        _scan_lines(body, state, until, clock, progress)
    except (_GaveUp, grammar.TimeUp) as exc:
        return Scan(Verdict.UNKNOWN, pinned.name if pinned else None, None, (), str(exc))
    return state.finish(body, progress)


def _scan_lines(
    body: Body,
    state: _ScanState,
    until: float | None,
    clock: Callable[[], float],
    progress: bool,
) -> None:
    """Every line the scanner reads, each handed to its kind's `add`."""
    pinned = state.pinned
    adds = {
        "counted": state.add_counted,
        "progress": state.add_progress,
        "external": state.add_external,
        "server": state.add_server,
    }
    candidates = _Candidates(body, [pinned] if pinned else ENGINES, progress)
    counted_bytes = 0
    for start, at, end, _ in grammar.lines(body, candidates.first_from, until, clock):
        name_end, place = grammar.placed(body, start, at, end)
        if name_end - at > _LONGEST_NAME:
            continue  # no counted name is that long
        hit = sample_kind(body[at:name_end].decode("ascii", "replace"))
        if hit is None:
            continue  # a look-alike such as vllm:num_requests_waiting_total
        eng, canonical, kind = hit
        if (pinned is not None and eng is not pinned) or (kind in _PROGRESS and not progress):
            continue
        if place != "sample":
            if kind == "counted" and place in ("meta", "quoted"):
                state.seen.add(eng.name)
            if kind == "counted" and place == "quoted":
                # Prometheus 3's `{"name",...}`, a format not asked for: its count
                # cannot be said to be the only one (CONTRACT §2: doubt).
                state.doubt(f"{canonical} written as a quoted name (a format not asked for)")
            continue  # the name inside another line (a HELP text, a label value)
        counted_bytes += end - start
        if counted_bytes > MAX_COUNTED_BYTES:
            raise _GaveUp(f"counted lines over {MAX_COUNTED_BYTES // 1024 // 1024} MiB")
        if kind == "counted":
            state.seen.add(eng.name)
        try:
            labels, value = grammar.sample_rest(body, name_end, end)
        except Malformed as exc:
            if kind in _PROGRESS:
                state.progress_bad = True
            else:
                state.doubt(f"malformed {canonical} line ({exc})")
            continue
        adds[kind](eng, canonical, labels, value)


# The kinds read for stall detection only (CONTRACT §2b): a bad line of theirs
# leaves the read without progress and never changes its verdict.
_PROGRESS = frozenset({"progress", "external"})


@dataclass(frozen=True)
class MetricsScanner:
    """`scan` as a Reader's scanner: a /metrics body, `engine` pinned or auto."""

    engine: str = "auto"
    accept: str = ACCEPT
    source: str = "metrics"
    progress: bool = True  # read the progress counters too (CONTRACT §2b)

    def __call__(self, body: Body, *, until: float, clock: Callable[[], float]) -> Scan:
        return scan(body, self.engine, until=until, clock=clock, progress=self.progress)


NO_GAUGES_WARNING = (
    "no engine request gauges at all: a wrong port, or a routing proxy's listener, "
    "not the engine's",
)


def _warnings(
    body: Body,
    pinned: Engine | None,
    series: tuple[Series, ...],
    sampled: set[str],
) -> tuple[str, ...]:
    """Shapes that usually mean trouble, for `probe` to show."""
    found: list[str] = []
    models = sorted({v for s in series for k, v in s.labels if k == "model_name"})
    if len(models) > 1:
        # PROMETHEUS_MULTIPROC_DIR reused across restarts keeps the dead run's
        # series (vLLM and SGLang both aggregate the whole directory).
        shown = ", ".join(models[:4]) + (", ..." if len(models) > 4 else "")
        found.append(
            f"several model_name values ({shown}): a reused PROMETHEUS_MULTIPROC_DIR keeps "
            "a dead run's series, which can hold the hook to the deadline"
        )
    if pinned is not None and not sampled:
        others = [
            e.name
            for e in ENGINES
            if e is not pinned and any(body.find(n) >= 0 for n in _NEEDLES[e.name])
        ]
        if others:
            found.append(
                f"--engine {pinned.name} does not match the body, which has "
                f"{' and '.join(others)} gauges"
            )
        else:
            found.extend(NO_GAUGES_WARNING)
    return tuple(found)
