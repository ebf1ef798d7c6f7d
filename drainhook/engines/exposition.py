"""The line scanner: a /metrics body (bytes) to a verdict (CONTRACT §2-3).

Only the lines of counted gauges are parsed; every other family is skipped
without being read, so a malformed, exotic or huge family elsewhere cannot
change the verdict, and a body costs about one pass of `re.search` over it.

Both Prometheus text 0.0.4 and OpenMetrics 1.0 sample lines are accepted:
`name{labels} value [timestamp]`, CRLF or LF, `# EOF`, names with `_` for `:`.

A body comes from a process the hook does not control, so what one body can
make the scanner hold or do is bounded: the bytes of counted lines it reads,
the series and the labels it keeps (the limits below, each far above what
vLLM or SGLang write), and, when the read's deadline is handed in, its time.
Past any of them the verdict is unknown, like a body over --max-body.
"""

from __future__ import annotations

import mmap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

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
from drainhook.engines.grammar import BLANKS, META, NAME_END, parse_rest
from drainhook.engines.verdict import Progress, Scan, Series, Verdict, count, value_problem
from drainhook.errors import Malformed

ACCEPT = "text/plain;version=0.0.4"  # the Accept header of a /metrics read

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
_LONGEST_NAME = max(
    len(n) for e in ENGINES for n in (*e.counted, *e.progress, *(w.name for w in e.external))
)

# Bounds on one body (see the module docstring). A vLLM or SGLang server of
# any size writes a few hundred counted lines of under 200 bytes, with at
# most 8 labels each (SGLang 0.5); these leave that ten times over and keep
# what the scanner holds under about 10 MB.
MAX_COUNTED_BYTES = 2 * 1024 * 1024  # counted lines read from one body, in bytes
MAX_SERIES = 2048  # counted series kept (series differing only in tp_rank: one)
MAX_LABELS_KEPT = 16384  # labels on all the counted series kept
_CLOCK_EVERY = 256  # candidate lines between two looks at the clock


class _Candidates:
    """Offsets of `<prefix>[:_]num_` in body, in order, found as they are needed:
    a body of nothing but needles costs no list, and a line already read is
    searched no further. A progress counter's needle is found inside its name:
    its offset is that of its line's first non-blank byte."""

    def __init__(
        self, body: bytes | bytearray | mmap.mmap, engines: Sequence[Engine], progress: bool = True
    ) -> None:
        self._body = body
        self._needles = [n for e in engines for n in _NEEDLES[e.name]]
        self._next = [body.find(n) for n in self._needles]
        self._anchored = len(self._needles)
        # Each needle costs a pass over the body: an engine's progress counters
        # are looked for only in a body that has its counted gauges.
        first = 0
        for engine in engines:
            spelt = len(_NEEDLES[engine.name])
            if progress and any(at >= 0 for at in self._next[first : first + spelt]):
                inner = _INNER[engine.name]
                self._needles += inner
                self._next += [body.find(n) for n in inner]
            first += spelt

    def first_from(self, pos: int) -> int:
        """The first offset >= pos, or -1."""
        body = self._body
        while True:
            best, which = -1, -1
            for i, at in enumerate(self._next):
                if 0 <= at < pos:
                    at = self._next[i] = body.find(self._needles[i], pos)
                if at >= 0 and (best < 0 or at < best):
                    best, which = at, i
            if which < self._anchored:
                return best
            start = body.rfind(b"\n", 0, best) + 1
            begin = BLANKS.match(body, start, best).end()  # type: ignore[union-attr]
            if body[begin : begin + 1] != b"#":
                return begin
            # A HELP or TYPE line of a progress counter: looked past, not read.
            end = body.find(b"\n", best)
            self._next[which] = -1 if end < 0 else body.find(self._needles[which], end)


def _line_bounds(body: bytes | bytearray | mmap.mmap, pos: int) -> tuple[int, int]:
    start = body.rfind(b"\n", 0, pos) + 1
    end = body.find(b"\n", pos)
    return start, len(body) if end < 0 else end


def scan(
    body: bytes | bytearray | mmap.mmap,
    engine: str = "auto",
    *,
    until: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    progress: bool = True,
) -> Scan:
    """The verdict of a 2xx body, with the engine and every counted series.

    `engine` is `auto` (recognise from the families present) or an engine
    name (only its gauges are read; the other engine's are ignored). `until`,
    on `clock`'s scale, is when the read must be over: a body that takes
    longer to scan is unknown, as a server that takes longer to send it is.
    `progress`: read the progress counters and external waiting too (CONTRACT
    §2b; about twice the scan's time, so a hook whose stall window cannot
    close before D does not): else the scan's `progress` is None.
    """
    pinned: Engine | None = None if engine == "auto" else BY_NAME[engine]
    seen: set[str] = set()  # engines whose counted families appear
    sampled: set[str] = set()  # canonical names with at least one total series
    # Per engine, the series kept: one per label set without tp_rank, the largest.
    kept: dict[str, dict[SeriesKey, Series]] = {e.name: {} for e in ENGINES}
    n_kept = 0
    n_labels = 0
    counted_bytes = 0
    problem: str | None = None
    # Progress counters (one per label set, the largest) and the uncounted
    # external-waiting gauges' sums, per engine (CONTRACT §2b); a bad line of
    # either leaves the read without progress, never changes its verdict.
    counters: dict[str, dict[SeriesKey, Series]] = {e.name: {} for e in ENGINES}
    outside: dict[str, dict[str, float]] = {e.name: {} for e in ENGINES}
    progress_bad = False

    def gave_up(why: str) -> Scan:
        return Scan(Verdict.UNKNOWN, pinned.name if pinned else None, None, (), why)

    candidates = _Candidates(body, [pinned] if pinned else ENGINES, progress)
    pos = 0
    looked = 0
    while (at := candidates.first_from(pos)) >= 0:
        looked += 1
        if until is not None and looked % _CLOCK_EVERY == 0 and clock() >= until:
            return gave_up("read timed out: the read's time ran out scanning the body")
        start, end = _line_bounds(body, at)
        pos = end + 1
        name_end = NAME_END.search(body, at, end).start()  # type: ignore[union-attr]
        if name_end - at > _LONGEST_NAME:
            continue  # no counted name is that long
        raw_name = body[at:name_end].decode("ascii", "replace")
        hit = sample_kind(raw_name)
        if hit is None:
            continue  # a look-alike such as vllm:num_requests_waiting_total
        eng, canonical, kind = hit
        if (pinned is not None and eng is not pinned) or (kind != "counted" and not progress):
            continue
        if BLANKS.match(body, start, at).end() != at:  # type: ignore[union-attr]
            if kind == "counted" and META.fullmatch(body, start, at):
                seen.add(eng.name)
            continue  # the name inside another line (a HELP text, a label value)
        counted_bytes += end - start
        if counted_bytes > MAX_COUNTED_BYTES:
            return gave_up(f"counted lines over {MAX_COUNTED_BYTES // 1024 // 1024} MiB")
        if kind != "counted":
            try:
                labels, value = parse_rest(body[name_end:end].decode("utf-8").rstrip("\r"))
            except (UnicodeDecodeError, Malformed):
                progress_bad = True
                continue
            if value_problem(canonical, value) is not None:
                progress_bad = True
                continue
            if kind == "external":
                for wait in eng.external:
                    if wait.name == canonical and (wait.label is None or wait.label in labels):
                        sums = outside[eng.name]
                        sums[canonical] = sums.get(canonical, 0.0) + value
                continue
            # One counter per label set as written (its largest value).
            key: SeriesKey = (canonical, tuple(sorted(labels)))
            found = counters[eng.name]
            if key not in found:
                n_kept += 1
                n_labels += len(labels)
                if n_kept > MAX_SERIES:
                    return gave_up(f"more than {MAX_SERIES} counted series")
                if n_labels > MAX_LABELS_KEPT:
                    return gave_up(f"more than {MAX_LABELS_KEPT} labels on counted series")
            if key not in found or value > found[key].value:
                found[key] = Series(canonical, labels, value)
            continue
        seen.add(eng.name)
        try:
            # Text exposition is UTF-8; a label value that is not is a malformed
            # line (the Prometheus Go parser rejects it too), not a series to count.
            rest = body[name_end:end].decode("utf-8").rstrip("\r")
            labels, value = parse_rest(rest)
        except UnicodeDecodeError:
            problem = problem or f"malformed {canonical} line (not UTF-8)"
            continue
        except Malformed as exc:
            problem = problem or f"malformed {canonical} line ({exc})"
            continue
        if (why := value_problem(canonical, value)) is not None:
            problem = problem or why
            continue
        if any(k == PRIORITY_LABEL and v for k, v in labels):
            continue  # SGLang's per-priority breakdown of the priority="" total
        sampled.add(canonical)
        # Series that differ only in tp_rank describe one batch: keep the largest.
        key = series_key(canonical, labels)
        table = kept[eng.name]
        held = table.get(key)
        if held is None:
            n_kept += 1
            n_labels += len(labels)
            if n_kept > MAX_SERIES:
                return gave_up(f"more than {MAX_SERIES} counted series")
            if n_labels > MAX_LABELS_KEPT:
                return gave_up(f"more than {MAX_LABELS_KEPT} labels on counted series")
            table[key] = Series(canonical, labels, value)
        elif value > held.value:
            table[key] = Series(canonical, labels, value)

    if pinned is None and len(seen) != 1:
        what = "no vllm or sglang request gauges" if not seen else "both vllm and sglang gauges"
        warning = NO_GAUGES_WARNING if not seen else ()
        return Scan(Verdict.UNKNOWN, None, None, (), what, warning)
    chosen = pinned or BY_NAME[seen.pop()]
    series = tuple(kept[chosen.name].values())
    warnings = _warnings(body, pinned, series, sampled)
    if problem is None:
        missing = [n for n in chosen.required if n not in sampled]
        if missing:
            problem = f"required gauge missing: {', '.join(missing)}"
    made: Progress | None = None
    if progress and not progress_bad:
        read = tuple(counters[chosen.name].values())
        made = Progress(read, external_work(chosen, series, outside[chosen.name]))
    if problem is not None:
        return Scan(Verdict.UNKNOWN, chosen.name, None, series, problem, warnings, made)
    verdict, total, reason = count(s.value for s in series)
    return Scan(verdict, chosen.name, total, series, reason, warnings, made)


@dataclass(frozen=True)
class MetricsScanner:
    """`scan` as a Reader's scanner: a /metrics body, `engine` pinned or auto."""

    engine: str = "auto"
    accept: str = ACCEPT
    source: str = "metrics"
    progress: bool = True  # read the progress counters too (CONTRACT §2b)

    def __call__(
        self, body: bytes | bytearray | mmap.mmap, *, until: float, clock: Callable[[], float]
    ) -> Scan:
        return scan(body, self.engine, until=until, clock=clock, progress=self.progress)


NO_GAUGES_WARNING = (
    "no engine request gauges at all: a wrong port, or a routing proxy's listener, "
    "not the engine's",
)


def _warnings(
    body: bytes | bytearray | mmap.mmap,
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
