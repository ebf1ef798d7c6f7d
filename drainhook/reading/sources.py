"""One target's read (CONTRACT §2a): its /metrics, then the side source its engine
declares (drainhook.engines.gauges.SideSource: SGLang's live /v1/loads counted in
the scheduler's stead, vLLM's /load as the server's own count), then the
connections on its port, dumped last so that none of the hook's own is in flight,
all under one time budget. A side source that fails keeps /metrics' count (a
warning, or the signal missing); a 401, 403 or 404 switches it off for good.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from drainhook.engines.gauges import BY_NAME, SideSource
from drainhook.engines.verdict import (
    CONNECTIONS,
    SERVER,
    Progress,
    Reading,
    Signals,
    Verdict,
    engine_shown,
    with_signals,
)
from drainhook.reading import TargetReader
from drainhook.reading.connections import Socket, Unavailable, dump, in_flight, own_inodes
from drainhook.reading.read import Reader

# What a read counts when /v1/loads gives no count: said in the warning, a sentence.
_STALE_METRICS = "/metrics, which SGLang republishes only every 30 s while idle"
_NO_TIME = "no time left in the read"


class EngineReader:
    """One target: /metrics (`metrics`), then the side source of the engine its
    body names (`sides`: a reader of each side path, by path), then the
    connections on `port` (None: not read); `read(timeout)` ends within timeout
    and never raises."""

    def __init__(
        self,
        metrics: TargetReader,
        *,
        sides: dict[str, Callable[[], Reader]] | None = None,
        port: int | None = None,
        engine: str = "auto",
        every: bool = False,
        dumper: Callable[[float, int], list[Socket]] | None = None,
        own: Callable[[], set[int]] = own_inodes,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._metrics = metrics
        self._sides = sides or {}  # made on first use (side_scanner imports lazily)
        self._made: dict[str, Reader] = {}
        self._port = port
        self._engine = engine
        self._every = every
        self._dump = dumper or (lambda timeout, port: dump(timeout, port=port))
        self._own = own
        self._clock = clock
        self._off: dict[str, str] = {}  # why a side path or the connections are no longer read

    @property
    def name(self) -> str:
        return self._metrics.name

    def close(self) -> None:
        self._metrics.close()
        for reader in self._made.values():
            reader.close()

    def read(self, timeout: float) -> Reading:
        start = self._clock()
        until = start + timeout
        got = self._metrics.read(timeout)
        engine = BY_NAME.get(engine_shown(got, self._engine) or "")
        side = engine.side if engine is not None else None
        if side is not None and side.path in self._sides:
            if side.counts == "scheduler":
                got = self._scheduler_from(side, got, start, until)
            elif got.counted and (got.verdict is not Verdict.BUSY or self._every):
                got = self._server_from(side, got, start, until)
        if self._port is None or not got.counted:
            return got  # doubt stays doubt
        if got.verdict is Verdict.BUSY and not self._every:
            return got  # busy already: the count is the largest signal
        return self._connections(got, until)

    def _side(self, path: str) -> Reader:
        if path not in self._made:
            self._made[path] = self._sides[path]()
        return self._made[path]

    def _scheduler_from(
        self, side: SideSource, first: Reading, start: float, until: float
    ) -> Reading:
        """SGLang's /v1/loads read after /metrics: counted in its stead when valid."""
        if side.path in self._off:
            return _with_warning(first, self._off[side.path], first.read_ms)
        left = until - self._clock()
        if left <= 0:
            why = f"{_NO_TIME} for {side.path}: that read counts {_STALE_METRICS}"
            return _with_warning(first, why, first.read_ms)
        live = self._side(side.path).read(left)
        took = (self._clock() - start) * 1000.0
        if live.counted:
            warnings = first.warnings + tuple(w for w in live.warnings if w not in first.warnings)
            # Both bodies' progress counters; /v1/loads' external waiting, whose
            # work is the one counted (CONTRACT §2b).
            m, lo = first.progress, live.progress
            progress = (
                None if m is None or lo is None else Progress(m.counters + lo.counters, lo.external)
            )
            counted = dataclasses.replace(
                live, read_ms=took, warnings=warnings, source="loads", progress=progress
            )
            if first.signals is None:
                return counted
            # /v1/loads stands in for the scheduler's gauges only: the server's own
            # count read in the same /metrics body still counts (CONTRACT §2a).
            signals = dataclasses.replace(first.signals, scheduler=live.in_flight)
            return with_signals(counted, signals)
        if live.status in side.off_for_good:
            why = side.off_for_good[live.status]
            self._off[side.path] = (
                f"{side.path} answered HTTP {live.status} ({why}): counting {_STALE_METRICS}"
            )
            return _with_warning(first, self._off[side.path], took)
        why = f"{side.path} gave no count ({_kind(live)}): that read counts {_STALE_METRICS}"
        return _with_warning(first, why, took)

    def _server_from(self, side: SideSource, first: Reading, start: float, until: float) -> Reading:
        """vLLM's /load read after /metrics: its count the `server` signal."""
        signals = first.signals or Signals(first.scheduler)
        if side.path in self._off:
            return with_signals(first, signals.without(SERVER, self._off[side.path]))
        left = until - self._clock()
        if left <= 0:
            return with_signals(first, signals.without(SERVER, f"{_NO_TIME} for {side.path}"))

        from drainhook.engines.server_load import parse_server_load  # vLLM's only

        got = self._side(side.path).read_with(left, parse_server_load)
        first = dataclasses.replace(first, read_ms=(self._clock() - start) * 1000.0)
        if isinstance(got, Reading):  # no 2xx body
            if got.status in side.off_for_good:
                why = side.off_for_good[got.status]
                self._off[side.path] = f"{side.path} answered HTTP {got.status} ({why})"
                return with_signals(first, signals.without(SERVER, self._off[side.path]))
            why = f"{side.path} gave no count ({_kind(got)})"
            return with_signals(first, signals.without(SERVER, why))
        if got.absent is not None:
            self._off[side.path] = f"{side.path} is not vLLM's ({got.absent})"
            return with_signals(first, signals.without(SERVER, self._off[side.path]))
        if got.value is None:  # doubt: never released on
            why = f"{side.path}: {got.doubt}"
            return dataclasses.replace(
                first, verdict=Verdict.UNKNOWN, in_flight=None, reason=why, signals=signals
            )
        return with_signals(first, dataclasses.replace(signals, server=got.value))

    def _connections(self, got: Reading, until: float) -> Reading:
        """The connection signal on the port, after the HTTP reads."""
        signals = got.signals or Signals(got.scheduler)
        if CONNECTIONS in self._off:
            return with_signals(got, signals.without(CONNECTIONS, self._off[CONNECTIONS]))
        left = until - self._clock()
        try:
            if left <= 0:
                raise Unavailable(_NO_TIME)
            found = self._dump(left, self._port or 0)
            # The hook's own sockets are listed (/proc/self/fd) only when a
            # request is seen at all: most dumps find none.
            count = in_flight(found, self._port or 0)
            if count:
                count = in_flight(found, self._port or 0, self._own())
        except Unavailable as exc:
            why = str(exc)
            if why != _NO_TIME:
                self._off[CONNECTIONS] = why = f"the connection table cannot be read: {why}"
            return with_signals(got, signals.without(CONNECTIONS, why))
        return with_signals(got, dataclasses.replace(signals, connections=float(count)))


def _kind(reading: Reading) -> str:
    """A failed read's reason, short and the same each time it recurs (the log
    shows each warning once): `HTTP 503`, `read timed out`, `not JSON`."""
    reason = reading.reason or str(reading.verdict)
    if reading.verdict is Verdict.UNREACHABLE:
        return reason
    return reason.split(":", 1)[0].split(" (", 1)[0]


def _with_warning(reading: Reading, warning: str, read_ms: float) -> Reading:
    return dataclasses.replace(
        reading, read_ms=read_ms, warnings=(*reading.warnings, warning), source="metrics"
    )
