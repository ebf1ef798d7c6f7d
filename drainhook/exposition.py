"""The line scanner: a /metrics body (bytes) to a verdict (CONTRACT §2-3).

Only the lines of counted gauges are parsed; every other family is skipped
without being read, so a malformed, exotic or huge family elsewhere cannot
change the verdict, and a body costs about one pass of `re.search` over it.

Both Prometheus text 0.0.4 and OpenMetrics 1.0 sample lines are accepted:
`name{labels} value [timestamp]`, CRLF or LF, `# EOF`, names with `_` for `:`.
"""

from __future__ import annotations

import math
import re

from drainhook.gauges import BY_NAME, ENGINES, PRIORITY_LABEL, TP_RANK_LABEL, Engine, counted_name
from drainhook.verdict import Scan, Series, Verdict

# Every counted name starts with `<prefix>:num_` or `<prefix>_num_`; `bytes.find`
# locates those far faster than a regular expression would.
_NEEDLES: dict[str, tuple[bytes, ...]] = {
    e.name: (f"{e.prefix}:num_".encode(), f"{e.prefix}_num_".encode()) for e in ENGINES
}
_NAME_END = re.compile(rb"[{ \t\r]|$")
_META = re.compile(rb"[ \t]*#[ \t]+(?:TYPE|HELP|UNIT)[ \t]+$")
_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\\n]|\\.)*)"[ \t]*(,|\})')
_NUMBER = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_SPECIAL = r"[+-]?(?:[Ii][Nn][Ff](?:[Ii][Nn][Ii][Tt][Yy])?|[Nn][Aa][Nn])"
# The value follows the name after blanks, or the label set after none or more
# (both as the Prometheus Go parser reads them); a timestamp needs blanks before it.
_TAIL = re.compile(rf"[ \t]*({_NUMBER}|{_SPECIAL})(?:[ \t]+{_NUMBER})?[ \t]*")
_ESCAPE = re.compile(r"\\(.)")
_UNESCAPE = {"n": "\n", "\\": "\\", '"': '"'}


class _Malformed(ValueError):
    """A counted gauge's line that does not parse."""


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return _ESCAPE.sub(lambda m: _UNESCAPE.get(m.group(1), m.group(0)), value)


def _parse_rest(rest: str) -> tuple[tuple[tuple[str, str], ...], float]:
    """Parse what follows a counted name: optional `{labels}`, value, timestamp."""
    labels: list[tuple[str, str]] = []
    pos = 0
    if rest.lstrip(" \t").startswith("{"):  # blanks between name and `{` are allowed
        rest = rest.lstrip(" \t")
        pos = 1
        closing = re.match(r"[ \t]*\}", rest[pos:])
        if closing:
            pos += closing.end()
        else:
            while True:
                m = _LABEL.match(rest, pos)
                if m is None:
                    raise _Malformed("bad label set")
                labels.append((m.group(1), _unescape(m.group(2))))
                pos = m.end()
                if m.group(3) == "}":
                    break
                closing = re.match(r"[ \t]*\}", rest[pos:])
                if closing:  # trailing comma
                    pos += closing.end()
                    break
    m = _TAIL.fullmatch(rest, pos)
    if m is None:
        raise _Malformed("bad value")
    return tuple(labels), float(m.group(1))


def _candidates(body: bytes, engines: tuple[Engine, ...] | list[Engine]) -> list[int]:
    """Offsets of every `<prefix>[:_]num_` in body, in order."""
    found: list[int] = []
    for engine in engines:
        for needle in _NEEDLES[engine.name]:
            at = body.find(needle)
            while at >= 0:
                found.append(at)
                at = body.find(needle, at + len(needle))
    found.sort()
    return found


def _line_bounds(body: bytes, pos: int) -> tuple[int, int]:
    start = body.rfind(b"\n", 0, pos) + 1
    end = body.find(b"\n", pos)
    return start, len(body) if end < 0 else end


def scan(body: bytes, engine: str = "auto") -> Scan:
    """The verdict of a 2xx body, with the engine and every counted series.

    `engine` is `auto` (recognise from the families present) or an engine
    name (only its gauges are read; the other engine's are ignored).
    """
    pinned: Engine | None = None if engine == "auto" else BY_NAME[engine]
    seen: set[str] = set()  # engines whose counted families appear
    sampled: set[str] = set()  # canonical names with at least one total series
    found: list[tuple[Engine, Series]] = []
    problem: str | None = None
    pos = 0
    for at in _candidates(body, [pinned] if pinned else ENGINES):
        if at < pos:
            continue  # another candidate on a line already read
        start, end = _line_bounds(body, at)
        pos = end + 1
        lead = body[start:at]
        name_end = _NAME_END.search(body, at, end).start()  # type: ignore[union-attr]
        raw_name = body[at:name_end].decode("ascii", "replace")
        hit = counted_name(raw_name)
        if hit is None:
            continue  # a look-alike such as vllm:num_requests_waiting_by_reason
        eng, canonical = hit
        if pinned is not None and eng is not pinned:
            continue
        if lead.strip(b" \t"):
            if _META.fullmatch(lead):
                seen.add(eng.name)
            continue  # the name inside another line (a HELP text, a label value)
        seen.add(eng.name)
        try:
            # Text exposition is UTF-8; a label value that is not is a malformed
            # line (the Prometheus Go parser rejects it too), not a series to count.
            rest = body[name_end:end].decode("utf-8").rstrip("\r")
            labels, value = _parse_rest(rest)
        except UnicodeDecodeError:
            problem = problem or f"malformed {canonical} line (not UTF-8)"
            continue
        except _Malformed as exc:
            problem = problem or f"malformed {canonical} line ({exc})"
            continue
        if math.isnan(value) or math.isinf(value):
            problem = problem or f"{canonical} is {value}"
            continue
        if value < 0:
            problem = problem or f"{canonical} is negative ({value:g})"
            continue
        if any(k == PRIORITY_LABEL and v for k, v in labels):
            continue  # SGLang's per-priority breakdown of the priority="" total
        sampled.add(canonical)
        found.append((eng, Series(canonical, labels, value)))

    if pinned is None and len(seen) != 1:
        what = "no vllm or sglang request gauges" if not seen else "both vllm and sglang gauges"
        return Scan(Verdict.UNKNOWN, None, None, (), what)
    chosen = pinned or BY_NAME[seen.pop()]
    series = _dedup_tp_rank([s for e, s in found if e is chosen])
    if problem is None:
        missing = [n for n in chosen.required if n not in sampled]
        if missing:
            problem = f"required gauge missing: {', '.join(missing)}"
    if problem is not None:
        return Scan(Verdict.UNKNOWN, chosen.name, None, series, problem)
    try:
        total = math.fsum(s.value for s in series)
    except OverflowError:  # finite samples (1e308 each) whose sum is not
        total = math.inf
    if math.isinf(total):
        return Scan(Verdict.UNKNOWN, chosen.name, None, series, "counted total is not finite")
    verdict = Verdict.BUSY if total > 0 else Verdict.IDLE
    return Scan(verdict, chosen.name, total, series)


def _dedup_tp_rank(series: list[Series]) -> tuple[Series, ...]:
    """Keep, of series that differ only in tp_rank, the one with the largest value."""
    best: dict[tuple[str, tuple[tuple[str, str], ...]], Series] = {}
    for s in series:
        key = (s.name, tuple(sorted(kv for kv in s.labels if kv[0] != TP_RANK_LABEL)))
        kept = best.get(key)
        if kept is None or s.value > kept.value:
            best[key] = s
    return tuple(best.values())
