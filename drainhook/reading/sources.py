"""SGLang's live count (CONTRACT §2a, `--source auto`, the default): /metrics,
and /v1/loads beside it when the body is SGLang's.

While idle, SGLang republishes its scheduler gauges only every 30 s, so its
/metrics can show requests that ended long ago and hold the hook to the
deadline; `GET /v1/loads` counts the scheduler's queues when it is asked
(drainhook.engines.loads). Each read of an `AutoReader` is one read of /metrics and,
when that body names SGLang, one of /v1/loads on the same listener, both
within the read's one timeout; a valid /v1/loads body is counted instead.

What /v1/loads may answer instead, and what the read then counts:

- 401 or 403 (the server has `--api-key`, the hook no `--api-key-file`) or
  404 (an SGLang without /v1/loads): /metrics, for the rest of the hook; the
  reading carries a warning, which the log shows once;
- anything else that is not a count (a timeout, a 5xx, a refused or reset
  connection, a malformed body) or no time left for it: /metrics' verdict for
  that read, and /v1/loads is asked again on the next. Never `unreachable`
  or `unknown` because of /v1/loads: the hook would otherwise end, or hold
  to the deadline, on a side source while /metrics answers.

A vLLM body, or any body that names no engine, is never followed by a
/v1/loads read.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from drainhook.engines.server_load import parse_server_load
from drainhook.engines.verdict import (
    SERVER,
    Progress,
    Reading,
    Signals,
    Verdict,
    engine_shown,
    with_signals,
)
from drainhook.reading import TargetReader
from drainhook.reading.read import Reader

# The statuses that say /v1/loads will not answer this hook: it is not asked again.
_FOR_GOOD = {
    401: "SGLang's --api-key guards it; give the key with --api-key-file",
    403: "SGLang's --api-key guards it; give the key with --api-key-file",
    404: "this SGLang has no /v1/loads",
}
# What a read counts when /v1/loads gives no count: said in the warning, a sentence.
_STALE_METRICS = "/metrics, which SGLang republishes only every 30 s while idle"


def is_sglang(reading: Reading, engine: str = "auto") -> bool:
    """Whether a /metrics reading is an SGLang server's (verdict.engine_shown's rule)."""
    return engine_shown(reading, engine) == "sglang"


class AutoReader:
    """/metrics, then SGLang's /v1/loads on the same listener when the body is
    SGLang's; `read(timeout)` ends within timeout and never raises."""

    def __init__(
        self,
        metrics: TargetReader,
        loads: TargetReader,
        *,
        engine: str = "auto",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._metrics = metrics
        self._loads = loads
        self._engine = engine
        self._clock = clock
        self._loads_off: str | None = None  # why /v1/loads is no longer asked

    @property
    def name(self) -> str:
        return self._metrics.name

    def close(self) -> None:
        self._metrics.close()
        self._loads.close()

    def read(self, timeout: float) -> Reading:
        start = self._clock()
        first = self._metrics.read(timeout)
        if not is_sglang(first, self._engine):
            return first
        if self._loads_off is not None:
            return _with_warning(first, self._loads_off, first.read_ms)
        left = start + timeout - self._clock()
        if left <= 0:
            why = f"no time left in the read for /v1/loads: that read counts {_STALE_METRICS}"
            return _with_warning(first, why, first.read_ms)
        live = self._loads.read(left)
        took = (self._clock() - start) * 1000.0
        if live.counted:
            warnings = first.warnings + tuple(w for w in live.warnings if w not in first.warnings)
            progress = _progress_of(first.progress, live.progress)
            counted = dataclasses.replace(
                live, read_ms=took, warnings=warnings, source="loads", progress=progress
            )
            if first.signals is None:
                return counted
            # /v1/loads stands in for the scheduler's gauges only: the server's own
            # count read in the same /metrics body still counts (CONTRACT §2a).
            return with_signals(
                counted, dataclasses.replace(first.signals, scheduler=live.in_flight)
            )
        if live.status in _FOR_GOOD:
            why = _FOR_GOOD[live.status]
            self._loads_off = (
                f"/v1/loads answered HTTP {live.status} ({why}): counting {_STALE_METRICS}"
            )
            return _with_warning(first, self._loads_off, took)
        why = f"/v1/loads gave no count ({_kind(live)}): that read counts {_STALE_METRICS}"
        return _with_warning(first, why, took)


def _progress_of(metrics: Progress | None, loads: Progress | None) -> Progress | None:
    """A read counted from /v1/loads: the progress counters of both bodies, and the
    external waiting of /v1/loads, whose work is the one counted (CONTRACT §2b)."""
    if metrics is None or loads is None:
        return None
    return Progress(metrics.counters + loads.counters, loads.external)


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


# The statuses that say /load will not answer this hook: it is not asked again.
_LOAD_FOR_GOOD = {
    401: "vLLM's --api-key guards it; give the key with --api-key-file",
    403: "vLLM's --api-key guards it; give the key with --api-key-file",
    404: "a vLLM without the /load route",
}


class ServerLoadReader:
    """/metrics (or what `metrics` reads), then vLLM's `GET /load` on the same
    listener when the body is vLLM's and counted, within the read's one timeout:
    its `server_load` is the reading's `server` signal (CONTRACT §2a).

    A 401, 403 or 404, or a body that is no /load answer: the signal is missing
    for the rest of the hook (said once: `Signals.missing`), /load asked no more.
    Any other failure (a timeout, a 5xx, no time left): missing for that read.
    A /load answer whose count is negative or not a number: doubt, the read is
    `unknown`. `--api-server-count > 1`: one GET reaches one API server's count
    (drainhook.engines.server_load), the connection signal sees them all.
    A read already busy is not followed by /load unless `every` (probe): the
    count is the largest signal, so /load can change only an idle read.
    """

    def __init__(
        self,
        metrics: TargetReader,
        load: Reader,
        *,
        engine: str = "auto",
        every: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._metrics = metrics
        self._load = load
        self._engine = engine
        self._every = every
        self._clock = clock
        self._off: str | None = None  # why /load is no longer asked

    @property
    def name(self) -> str:
        return self._metrics.name

    def close(self) -> None:
        self._metrics.close()
        self._load.close()

    def read(self, timeout: float) -> Reading:
        start = self._clock()
        first = self._metrics.read(timeout)
        if not first.counted or engine_shown(first, self._engine) != "vllm":
            return first
        if first.verdict is Verdict.BUSY and not self._every:
            return first  # busy already: the count is the largest signal
        signals = first.signals or Signals(first.scheduler)
        if self._off is not None:
            return with_signals(first, signals.without(SERVER, self._off))
        left = start + timeout - self._clock()
        if left <= 0:
            return with_signals(
                first, signals.without(SERVER, "no time left in the read for /load")
            )
        got = self._load.read_with(left, parse_server_load)
        took = (self._clock() - start) * 1000.0
        first = dataclasses.replace(first, read_ms=took)
        if isinstance(got, Reading):  # no 2xx body
            if got.status in _LOAD_FOR_GOOD:
                self._off = f"/load answered HTTP {got.status} ({_LOAD_FOR_GOOD[got.status]})"
                return with_signals(first, signals.without(SERVER, self._off))
            return with_signals(
                first, signals.without(SERVER, f"/load gave no count ({_kind(got)})")
            )
        if got.absent is not None:
            self._off = f"/load is not vLLM's ({got.absent})"
            return with_signals(first, signals.without(SERVER, self._off))
        if got.value is None:  # doubt: never released on
            why = f"/load: {got.doubt}"
            return dataclasses.replace(
                first, verdict=Verdict.UNKNOWN, in_flight=None, reason=why, signals=signals
            )
        return with_signals(first, dataclasses.replace(signals, server=got.value))
