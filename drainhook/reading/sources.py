"""One target's read (CONTRACT §2a): its /metrics, then the side source its engine
declares (drainhook.engines.gauges.SideSource: SGLang's live /v1/loads counted in
the scheduler's stead, vLLM's /load as the server's own count), then the
connections on its port, dumped last so that none of the hook's own is in flight;
each within a read timeout of its own, all by D. A signal the target does not
serve (401, 403, 404, a body that is not the engine's, no sock_diag) is missing
while it has never answered a count: said, the others decide, and asked again on
the next read. After its first count, and for any other failure (a 5xx, a
timeout, no time left, an empty or cut body, a value that is not a count), it is
doubt: the read is `unknown`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from drainhook.engines.exposition import NO_GAUGES_WARNING
from drainhook.engines.gauges import BY_NAME, SERVER_LOAD, SideSource
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
from drainhook.reading.config import DEFAULT_READ_TIMEOUT
from drainhook.reading.connections import Doubt, Socket, Unavailable, Watch, dump, own_inodes
from drainhook.reading.read import Reader

NO_LOG_STATS = (
    "vLLM serves no scheduler gauges (started with --disable-log-stats): remove that flag; "
    "until then every read is in doubt and the hook holds to D"
)
# What a read counts when /v1/loads is missing: said in the warning, a sentence.
STALE_METRICS = "/metrics, which SGLang republishes only every 30 s while idle"


class EngineReader:
    """One target: /metrics (`metrics`), then the side source of the engine its
    body names (`sides`: a reader of each side path, by path), then the
    connections on `port` (None: not read); `read(left)` ends within `left`
    (the time to D) and never raises."""

    def __init__(
        self,
        metrics: TargetReader,
        *,
        sides: dict[str, Callable[[], Reader]] | None = None,
        port: int | None = None,
        engine: str = "auto",
        every: bool = False,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
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
        self._read_timeout = read_timeout
        self._dump = dumper or (lambda timeout, port: dump(timeout, port=port))
        self._own = own
        self._clock = clock
        self._counted: set[str] = set()  # the signals that have answered a count
        self._watch = Watch()  # each connection as the last dump found it

    @property
    def name(self) -> str:
        return self._metrics.name

    def close(self) -> None:
        self._metrics.close()
        for reader in self._made.values():
            reader.close()

    def read(self, left: float) -> Reading:
        start = self._clock()
        until = start + left
        got = self._metrics.read(left)
        if got.verdict is Verdict.UNKNOWN and NO_GAUGES_WARNING[0] in got.warnings:
            got = self._no_gauges(got, until)  # a 2xx body without gauges, not a failed read
        engine = BY_NAME.get(engine_shown(got, self._engine) or "")
        side = engine.side if engine is not None else None
        if side is not None and side.path in self._sides:
            if side.counts == "scheduler":
                got = self._scheduler_from(side, got, until)
            elif got.counted and (got.verdict is not Verdict.BUSY or self._every):
                got = self._server_from(side, got, until)
        if got.counted:
            got = dataclasses.replace(got, read_ms=(self._clock() - start) * 1000.0)
        if self._port is None or not got.counted:
            return got  # doubt stays doubt
        # Dumped on a busy read too: a connection's tie is read from what it did
        # since the last dump (drainhook.reading.connections.Watch).
        return self._connections(got, until)

    def _no_gauges(self, got: Reading, until: float) -> Reading:
        """A 2xx /metrics with no counted gauge from a listener whose vLLM /load answers:
        a vLLM started with --disable-log-stats, named with the fix (CONTRACT §2a)."""
        if got.engine not in (None, "vllm") or SERVER_LOAD.path not in self._sides:
            return got
        from drainhook.engines.server_load import parse_server_load  # vLLM's only

        try:
            load = self._side(SERVER_LOAD.path).read_with(
                self._left(until, SERVER_LOAD.path), parse_server_load
            )
        except NoTime:
            return got
        if isinstance(load, Reading) or load.value is None:
            return got
        return dataclasses.replace(got, engine="vllm", reason=NO_LOG_STATS)

    def _side(self, path: str) -> Reader:
        if path not in self._made:
            self._made[path] = self._sides[path]()
        return self._made[path]

    def _left(self, until: float, what: str) -> float:
        """The time left before D for a side read: NoTime when there is none."""
        left = until - self._clock()
        if left <= 0:
            raise NoTime(f"{what}: no time left before D: doubt")
        return left

    def _scheduler_from(self, side: SideSource, first: Reading, until: float) -> Reading:
        """SGLang's /v1/loads read after /metrics: counted in its stead when valid."""
        try:
            live = self._side(side.path).read(self._left(until, side.path))
        except NoTime as exc:
            return _doubt(first, str(exc))
        if live.status in side.not_served or _not_loads(live):
            why = (
                f"answered HTTP {live.status} ({side.not_served[live.status]})"
                if live.status is not None
                else f"is not SGLang's ({live.reason})"
            )
            if side.path in self._counted:  # after a count, doubt (CONTRACT §2a)
                return _doubt(first, f"{side.path} {why} after a count: doubt")
            return _with_warning(first, f"{side.path} {why}: counting {STALE_METRICS}")
        if not live.counted:
            return _doubt(first, f"{side.path} gave no count ({_kind(live)}): doubt")
        self._counted.add(side.path)
        warnings = first.warnings + tuple(w for w in live.warnings if w not in first.warnings)
        # Both bodies' progress counters; /v1/loads' external waiting, whose
        # work is the one counted (CONTRACT §2b).
        m, lo = first.progress, live.progress
        progress = (
            None if m is None or lo is None else Progress(m.counters + lo.counters, lo.external)
        )
        counted = dataclasses.replace(live, warnings=warnings, source="loads", progress=progress)
        if first.signals is None:
            return counted
        # /v1/loads stands in for the scheduler's gauges only: the server's own
        # count read in the same /metrics body still counts (CONTRACT §2a).
        return with_signals(counted, dataclasses.replace(first.signals, scheduler=live.in_flight))

    def _server_from(self, side: SideSource, first: Reading, until: float) -> Reading:
        """vLLM's /load read after /metrics: its count the `server` signal."""
        signals = first.signals or Signals(first.scheduler)
        from drainhook.engines.server_load import parse_server_load  # vLLM's only

        try:
            got = self._side(side.path).read_with(self._left(until, side.path), parse_server_load)
        except NoTime as exc:
            return _doubt(first, str(exc))
        if isinstance(got, Reading):  # no 2xx body
            if got.status not in side.not_served:
                return _doubt(first, f"{side.path} gave no count ({_kind(got)}): doubt")
            why = f"answered HTTP {got.status} ({side.not_served[got.status]})"
        elif got.absent is not None:
            why = f"is not vLLM's ({got.absent})"
        elif got.value is None:
            return _doubt(first, f"{side.path}: {got.doubt}: doubt")
        else:
            self._counted.add(side.path)
            return with_signals(first, dataclasses.replace(signals, server=got.value))
        if side.path in self._counted:
            return _doubt(first, f"{side.path} {why} after a count: doubt")
        return with_signals(first, signals.without(SERVER, f"{side.path} {why}"))

    def _connections(self, got: Reading, until: float) -> Reading:
        """The connection signal on the port, after the HTTP reads."""
        signals = got.signals or Signals(got.scheduler)
        port = self._port or 0
        try:
            left = min(self._left(until, "the connection table"), self._read_timeout)
            count = self._watch.count(self._dump(left, port), port, self._own)
        except NoTime as exc:
            return _doubt(got, str(exc))
        except Doubt as exc:
            return _doubt(got, f"the connection table: {exc}: doubt")
        except Unavailable as exc:
            why = f"the connection table cannot be read: {exc}"
            if CONNECTIONS in self._counted:
                return _doubt(got, f"{why} after a count: doubt")
            return with_signals(got, signals.without(CONNECTIONS, why))
        self._counted.add(CONNECTIONS)
        return with_signals(got, dataclasses.replace(signals, connections=float(count)))


class NoTime(Exception):
    """No time is left before D for a side signal: doubt (CONTRACT §2a)."""


def _not_loads(got: Reading) -> bool:
    """A 2xx /v1/loads body that is no load report (drainhook.engines.loads.NOT_LOADS)."""
    from drainhook.engines.loads import NOT_LOADS  # SGLang's only

    return got.engine is None and (got.reason or "").startswith(NOT_LOADS)


def _kind(got: Reading) -> str:
    """A failed read's reason, short and the same each time it recurs: `HTTP 503`,
    `read timed out`, `loads list is empty`."""
    if got.status is not None:
        return f"HTTP {got.status}"
    reason = got.reason or str(got.verdict)
    return reason.split(":", 1)[0].split(" (", 1)[0]


def _doubt(reading: Reading, why: str) -> Reading:
    """The read in doubt (CONTRACT §2a): `unknown`, which holds, with why."""
    return dataclasses.replace(reading, verdict=Verdict.UNKNOWN, in_flight=None, reason=why)


def _with_warning(reading: Reading, warning: str) -> Reading:
    return dataclasses.replace(reading, warnings=(*reading.warnings, warning), source="metrics")
