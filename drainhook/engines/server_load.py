"""vLLM's `GET /load` body (CONTRACT §2a, the server's own count): `{"server_load": N}`,
every inference request one API-server process holds, with
`--enable-server-load-tracking` (0 without; 404 before the route). A count, doubt
(negative or not finite, as vLLM #49526 saw; an empty or cut body: `unknown`), or
no /load (missing, until it has answered a count)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass

from drainhook.engines.verdict import Body, Scan, Series, Verdict, cut_json

FIELD = "server_load"
MAX_BYTES = 64 * 1024  # a /load answer is a few bytes; a larger body is not one


@dataclass(frozen=True)
class ServerLoad:
    """One /load answer: its count, or why there is none (`doubt` or `absent`)."""

    value: float | None = None
    doubt: str | None = None  # a /load answer whose count cannot be counted
    absent: str | None = None  # not a /load answer at all


class _Object(list[tuple[str, object]]):
    """A JSON object as its pairs, in order, a key given twice kept twice."""


def parse_server_load(body: Body, _until: float = 0.0) -> ServerLoad:
    """A 2xx /load body to its count, its doubt, or its absence (never raises)."""
    if len(body) > MAX_BYTES:
        return ServerLoad(absent=f"a body of {len(body)} bytes is not a /load answer")
    try:
        document = json.loads(bytes(body), parse_int=float, object_pairs_hook=_Object)
    except (ValueError, UnicodeDecodeError, RecursionError):
        if cut_json(body):
            return ServerLoad(doubt="an empty or cut body")
        return ServerLoad(absent="not JSON")
    values = [v for k, v in document if k == FIELD] if isinstance(document, _Object) else []
    if not values:
        return ServerLoad(absent=f"no {FIELD} in the body")
    if len(values) > 1:  # which one a server meant is anyone's guess (CONTRACT §2a)
        return ServerLoad(doubt=f"{FIELD} given {len(values)} times")
    value = values[0]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return ServerLoad(doubt=f"{FIELD} is not a number")
    if not math.isfinite(value):
        return ServerLoad(doubt=f"{FIELD} is {value}")
    if value < 0:
        return ServerLoad(doubt=f"{FIELD} is negative ({value:g})")
    return ServerLoad(float(value))


@dataclass(frozen=True)
class ServerLoadScanner:
    """`parse_server_load` as a Reader's scanner: a /load body to a Scan (the
    count, or `unknown` with why there is none)."""

    accept: str = "application/json"
    source: str = "load"

    def __call__(self, body: Body, *, until: float, clock: Callable[[], float]) -> Scan:
        found = parse_server_load(body)
        if found.value is None:
            why = found.doubt or found.absent or "no count"
            return Scan(Verdict.UNKNOWN, "vllm", None, (), why)
        verdict = Verdict.BUSY if found.value > 0 else Verdict.IDLE
        return Scan(verdict, "vllm", found.value, (Series(FIELD, (), found.value),))
