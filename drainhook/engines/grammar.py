"""The grammar and the bounded line loop (`lines`) both line readers share: the
counted gauges' (drainhook.engines.exposition) and `plan --observe`'s histogram's
(drainhook.planning.histogram). A sample line is `name{labels} value [timestamp]`,
read as the Prometheus Go parser reads it, in text 0.0.4 and OpenMetrics 1.0 alike.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence

from drainhook.errors import Malformed

MAX_LABELS = 16  # labels on one counted series
CLOCK_EVERY = 256  # candidate lines between two looks at the clock
Bytes = bytes | bytearray

NAME_END = re.compile(rb"[{ \t\r\"]|$")  # `"`: the end of a quoted name
BLANKS = re.compile(rb"[ \t]*")
META = re.compile(rb"[ \t]*#[ \t]+(?:TYPE|HELP|UNIT)[ \t]+")
QUOTED = re.compile(rb'[ \t]*\{[ \t]*"')  # Prometheus 3's quoted name: `{"name",...} 1`
# A label value of a megabyte is read in one pass without memory per character:
# possessive repeats (Python 3.11) keep no backtracking state; before 3.11 the
# unrolled form keeps some (about 130 bytes) per escape sequence, so a counted
# line may hold at most MAX_ESCAPES_UNROLLED of them there.
POSSESSIVE = sys.version_info >= (3, 11)
VALUE = r'((?:[^"\\\n]++|\\.)*+)' if POSSESSIVE else r'([^"\\\n]*(?:\\.[^"\\\n]*)*)'
MAX_ESCAPES_UNROLLED = 4096
LABEL = re.compile(rf'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"{VALUE}"[ \t]*(,|\}})')
CLOSE = re.compile(r"[ \t]*\}")
NUMBER = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
SPECIAL = r"[+-]?(?:[Ii][Nn][Ff](?:[Ii][Nn][Ii][Tt][Yy])?|[Nn][Aa][Nn])"
# The value follows the name after blanks, or the label set after none or more
# (both as the Prometheus Go parser reads them); a timestamp needs blanks before it.
TAIL = re.compile(rf"[ \t]*({NUMBER}|{SPECIAL})(?:[ \t]+{NUMBER})?[ \t]*")


def unescape(value: str) -> str:
    """Undo `\\\\`, `\\n` and `\\"` (any other escape stays as written), in C
    string operations: a value of a million escapes costs no call per escape.

    `\\\\` pairs are taken left to right first, as the parser reads them, and
    set aside; what is left has no backslash pairs, so its escapes are unambiguous.
    """
    if "\\" not in value:
        return value
    if "\0" in value:
        parts = value.split("\\\\")
        return "\\".join(p.replace("\\n", "\n").replace('\\"', '"') for p in parts)
    swapped = value.replace("\\\\", "\0").replace("\\n", "\n").replace('\\"', '"')
    return swapped.replace("\0", "\\")


def parse_rest(rest: str) -> tuple[tuple[tuple[str, str], ...], float]:
    """Parse what follows a counted name: optional `{labels}`, value, timestamp."""
    labels: list[tuple[str, str]] = []
    pos = 0
    if not POSSESSIVE and rest.count("\\") > MAX_ESCAPES_UNROLLED:
        raise Malformed(f"more than {MAX_ESCAPES_UNROLLED} escapes")
    if rest.lstrip(" \t").startswith("{"):  # blanks between name and `{` are allowed
        rest = rest.lstrip(" \t")
        pos = 1
        closing = CLOSE.match(rest, pos)
        if closing:
            pos = closing.end()
        else:
            while True:
                m = LABEL.match(rest, pos)
                if m is None:
                    raise Malformed("bad label set")
                if len(labels) == MAX_LABELS:
                    raise Malformed(f"more than {MAX_LABELS} labels")
                labels.append((sys.intern(m.group(1)), unescape(m.group(2))))
                pos = m.end()
                if m.group(3) == "}":
                    break
                closing = CLOSE.match(rest, pos)
                if closing:  # trailing comma
                    pos = closing.end()
                    break
    m = TAIL.fullmatch(rest, pos)
    if m is None:
        raise Malformed("bad value")
    return tuple(labels), float(m.group(1))


class TimeUp(Exception):
    """The read's time ran out while a body was scanned: nothing can be said of it."""


class Needles:
    """Offsets of any of some byte strings in a body, in order, each found only as it
    is needed: a body of nothing but needles costs no list, and a line already read
    is searched no further."""

    def __init__(self, body: Bytes, needles: Sequence[bytes]) -> None:
        self.body = body
        self.needles = list(needles)
        self.next = [body.find(n) for n in self.needles]

    def first_from(self, pos: int) -> tuple[int, int]:
        """The first offset >= pos and the index of its needle; (-1, -1) for none."""
        best, which = -1, -1
        for i, at in enumerate(self.next):
            if 0 <= at < pos:
                at = self.next[i] = self.body.find(self.needles[i], pos)
            if at >= 0 and (best < 0 or at < best):
                best, which = at, i
        return best, which


def lines(
    body: Bytes,
    first_from: Callable[[int], tuple[int, int]],
    until: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[tuple[int, int, int, int]]:
    """(start, at, end, which) of each line that holds a candidate at `at`, found by
    needle `which` (`first_from`), in order, each line once; TimeUp past `until`."""
    pos = looked = 0
    while True:
        at, which = first_from(pos)
        if at < 0:
            return
        looked += 1
        if until is not None and looked % CLOCK_EVERY == 0 and clock() >= until:
            raise TimeUp("read timed out: the read's time ran out scanning the body")
        start, end = body.rfind(b"\n", 0, at) + 1, body.find(b"\n", at)
        end = len(body) if end < 0 else end
        yield start, at, end, which
        pos = end + 1


def placed(body: Bytes, start: int, at: int, end: int) -> tuple[int, str]:
    """Where the name at `at` ends, and where it stands: `sample` (starting the line),
    `meta` (`# TYPE` and alike), `quoted` (`{"name",...}`), `inside` (a HELP text)."""
    name_end = NAME_END.search(body, at, end).start()  # type: ignore[union-attr]
    if BLANKS.match(body, start, at).end() == at:  # type: ignore[union-attr]
        return name_end, "sample"
    if META.fullmatch(body, start, at):
        return name_end, "meta"
    return name_end, "quoted" if QUOTED.fullmatch(body, start, at) else "inside"


def sample_rest(body: Bytes, name_end: int, end: int) -> tuple[tuple[tuple[str, str], ...], float]:
    """A sample line's labels and value; a line not UTF-8 is malformed (as Go's reads)."""
    try:
        rest = bytes(body[name_end:end]).decode("utf-8").rstrip("\r")
    except UnicodeDecodeError:
        raise Malformed("not UTF-8") from None
    return parse_rest(rest)
