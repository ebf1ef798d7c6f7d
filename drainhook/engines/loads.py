"""SGLang's `GET /v1/loads` body (JSON) to a verdict, by CONTRACT §2's rules: one entry
per DP rank (docs/engines.md has the shape), the numbers of `Engine.loads_fields`
summed. The body is another process's: at most MAX_RANKS entries are read, and
nothing it holds (NaN, a string, a deep nest, a huge integer) raises here."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from drainhook.engines.gauges import BY_NAME, LoadsField, external_work
from drainhook.engines.verdict import (
    Body,
    Progress,
    Scan,
    Series,
    Verdict,
    count,
    cut_json,
    value_problem,
)
from drainhook.errors import Malformed

ENGINE = BY_NAME["sglang"]
MAX_RANKS = 4096  # real bodies list tens of ranks: more is no engine's, refused unread
# Values in the whole body, counted as its commas before it is parsed: parsing
# builds every value first, and a 16 MiB body of `0,0,0,...` would cost some
# 300 MB of objects. A real body (64 ranks, every section, 64 decode windows
# each) holds under 200,000.
MAX_VALUES = 1_000_000
# json.loads cannot be interrupted: a body is parsed only when the time left
# before the read's deadline covers it at this rate (measured: about 40 ms a
# MiB on two cores; twice that for margin), and never more than MAX_BYTES.
PARSE_SECONDS_PER_MIB = 0.08
MAX_BYTES = 4 * 1024 * 1024
DP_RANK_LABEL = "dp_rank"
_MAX_LABEL = 64  # characters of a dp_rank value kept as a label


def _field_value(entry: dict[str, object], field: LoadsField) -> float | None:
    """The field's value in one rank entry: None when absent (and not required)."""
    node: object = entry
    for i, key in enumerate(field.path):
        if not isinstance(node, dict):
            where = ".".join(field.path[:i]) or "rank entry"
            raise Malformed(f"{where} is not an object")
        if key not in node or node[key] is None:
            if field.required:
                raise Malformed(f"required field missing: {field.name}")
            return None
        node = node[key]
    # bool is an int to Python; `true` is not a count.
    if isinstance(node, bool) or not isinstance(node, (int, float)):
        raise Malformed(f"{field.name} is not a number")
    try:
        value = float(node)
    except OverflowError:  # an integer of hundreds of digits
        value = math.inf
    if (why := value_problem(field.name, value)) is not None:
        raise Malformed(why)
    return value


def _rank_label(entry: dict[str, object], index: int) -> str:
    """The entry's dp_rank as written, or its position when it has none usable.

    Integers were parsed as floats (see `_parse`): 3.0 is written back as 3.
    """
    rank = entry.get(DP_RANK_LABEL)
    if isinstance(rank, str):
        return rank[:_MAX_LABEL]
    if isinstance(rank, float) and rank.is_integer() and abs(rank) < 2**53:
        return str(int(rank))
    return str(index)


NOT_LOADS = "not a load report"


class NotLoads(Malformed):
    """A body that is no /v1/loads report at all (CONTRACT §2a: the signal is missing,
    not in doubt); its Scan names no engine, and its reason starts NOT_LOADS."""


def _ranks(document: object) -> list[object]:
    if isinstance(document, dict):
        loads = document.get("loads")
        if not isinstance(loads, list):
            raise NotLoads("no loads list in the body")
        return loads
    if isinstance(document, list):
        return document
    raise NotLoads(f"body is a JSON {type(document).__name__}, not an object or a list")


def _parse(body: bytes | bytearray | memoryview) -> object:
    if len(body) > MAX_BYTES:
        # Parsed in one json.loads call, which no deadline can interrupt.
        raise NotLoads(f"body over {MAX_BYTES // 1024 // 1024} MiB")
    data = bytes(body)
    if data.count(b",") >= MAX_VALUES:
        raise Malformed(f"more than {MAX_VALUES} JSON values")
    try:
        # Integers as floats: a 100,000-digit integer is then inf (refused
        # below) instead of a ValueError from the digit limit, or a slow int.
        return json.loads(data, parse_int=float)
    except RecursionError:  # [[[[... nested past the interpreter's stack
        raise Malformed("JSON nested too deep") from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        if cut_json(data):
            raise Malformed("an empty or cut body") from None
        raise NotLoads(f"not JSON ({str(exc).splitlines()[0][:80]})") from None


def scan_loads(
    body: bytes | bytearray | memoryview,
    *,
    until: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Scan:
    """The verdict of a 2xx /v1/loads body; unknown when its parse would not end by
    `until` (on `clock`), as a server too slow to send it is."""
    if until is not None:
        parse = len(body) / (1024 * 1024) * PARSE_SECONDS_PER_MIB
        if clock() + parse > until:
            late = "read timed out: no time left to parse the body before the deadline"
            return Scan(Verdict.UNKNOWN, ENGINE.name, None, (), late)
    fields = ENGINE.loads_fields
    try:
        ranks = _ranks(_parse(body))
        if not ranks:
            raise Malformed("loads list is empty (no DP rank answered)")
        if len(ranks) > MAX_RANKS:
            raise Malformed(f"more than {MAX_RANKS} rank entries")
        series: list[Series] = []
        counters: list[Series] | None = []
        uncounted: dict[str, float] = {}
        for index, entry in enumerate(ranks):
            if not isinstance(entry, dict):
                raise Malformed(f"rank entry {index} is not an object")
            labels = ((DP_RANK_LABEL, _rank_label(entry, index)),)
            for field in fields:
                value = _field_value(entry, field)
                if value is not None:
                    series.append(Series(field.name, labels, value))
            if counters is not None:
                counters = _progress(entry, labels, counters, uncounted)
    except NotLoads as exc:
        return Scan(Verdict.UNKNOWN, None, None, (), f"{NOT_LOADS}: {exc}")
    except Malformed as exc:
        return Scan(Verdict.UNKNOWN, ENGINE.name, None, (), str(exc))
    progress = None
    if counters is not None:
        external = external_work(ENGINE, series, uncounted, ENGINE.loads_external)
        progress = Progress(tuple(counters), external)
    verdict, total, reason = count(s.value for s in series)
    return Scan(verdict, ENGINE.name, total, tuple(series), reason, progress=progress)


def _progress(
    entry: dict[str, object],
    labels: tuple[tuple[str, str], ...],
    counters: list[Series],
    uncounted: dict[str, float],
) -> list[Series] | None:
    """One rank entry's progress counters added to `counters`, and its uncounted
    external waiting to `uncounted` (CONTRACT §2b); None when one of them is not
    a count (the read then has no progress; its verdict does not change)."""
    try:
        for path in ENGINE.loads_progress:
            value = _at(entry, path)
            if value is not None:
                name = ".".join(str(p) for p in path)
                counters.append(Series(name, labels, value))
        for wait in ENGINE.loads_external:
            if not wait.counted:
                value = _at(entry, tuple(wait.name.split(".")))
                if value is not None:
                    uncounted[wait.name] = uncounted.get(wait.name, 0.0) + value
    except Malformed:
        return None
    return counters


def _at(entry: dict[str, object], path: tuple[str | int, ...]) -> float | None:
    """The number at path in a rank entry (a str keys an object, an int indexes a
    list); None when absent; Malformed when it is not a finite count."""
    node: object = entry
    for key in path:
        if isinstance(key, int):
            if not isinstance(node, list) or len(node) <= key:
                return None
            node = node[key]
        elif isinstance(node, dict) and node.get(key) is not None:
            node = node[key]
        else:
            return None
    return _field_value({"v": node}, LoadsField(("v",), "", required=True))


@dataclass(frozen=True)
class LoadsScanner:
    """`scan_loads` as a Reader's scanner: a /v1/loads body (JSON)."""

    accept: str = "application/json"
    source: str = "loads"

    def __call__(self, body: Body, *, until: float, clock: Callable[[], float]) -> Scan:
        return scan_loads(body, until=until, clock=clock)
