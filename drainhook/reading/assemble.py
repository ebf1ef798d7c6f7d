"""The one place that turns the reach flags (a ReadConfig) into the reader `wait`,
`probe` and `plan --observe` read through: per target a Reader in an EngineReader
with its side source and connections, a Round over several, and for the hook a
refusal shown to be the engine gone, or else a wrong target (`ShownGone`)."""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable

from drainhook.engines.exposition import MetricsScanner
from drainhook.engines.gauges import LOADS, SERVER_LOAD, SideSource
from drainhook.engines.verdict import Reading, Scanner, Verdict
from drainhook.reading import TargetReader
from drainhook.reading.config import ReadConfig
from drainhook.reading.failures import MISCONFIGURED
from drainhook.reading.read import Reader
from drainhook.reading.sources import EngineReader
from drainhook.reading.target import Target, ssl_context


def scanner_for(reach: ReadConfig) -> Scanner:
    """The scanner of reach's source: /v1/loads JSON, or /metrics for its engine."""
    if reach.source == "loads":
        return side_scanner(LOADS)
    return MetricsScanner(reach.engine, progress=reach.progress)


def side_scanner(side: SideSource) -> Scanner:
    """A side source's scanner, imported when first needed: a vLLM's hook never
    loads SGLang's /v1/loads scanner, nor an SGLang's vLLM's /load."""
    if side is LOADS:
        from drainhook.engines.loads import LoadsScanner

        return LoadsScanner()
    from drainhook.engines.server_load import ServerLoadScanner

    return ServerLoadScanner()


def plain_reader(reach: ReadConfig, target: Target, scanner: Scanner | None = None) -> Reader:
    """One GET of target with reach's timeout, body cap, TLS and key; `scanner` (reach's
    source's by default) names the Accept header and counts the body."""
    return Reader(
        target,
        scanner=scanner or scanner_for(reach),
        max_body=reach.max_body,
        read_timeout=reach.read_timeout,
        ssl_context=ssl_context(target, reach.cacert, reach.insecure),
        tls_server_name=reach.tls_server_name,
        api_key=reach.api_key,
    )


def target_reader(reach: ReadConfig, target: Target) -> TargetReader:
    """The reader of one target: a Reader of reach's source; with `auto`, /metrics
    with SGLang's /v1/loads (an engine that may be SGLang's) and vLLM's /load (one
    that may be vLLM's) beside it; and, for a target in the Pod (loopback, or an
    address of its own), the
    connection signal on its port (CONTRACT §2a)."""
    metrics = plain_reader(reach, target)
    sides: dict[str, Callable[[], Reader]] = {}
    if reach.source == "auto":
        engines = {"auto": (LOADS, SERVER_LOAD), "sglang": (LOADS,), "vllm": (SERVER_LOAD,)}
        for side in engines.get(reach.engine, ()):
            where = target.with_path(side.path)
            sides[side.path] = functools.partial(
                lambda s, w: plain_reader(reach, w, side_scanner(s)), side, where
            )
    port = target.port if reach.connections and target.in_pod else None
    if not sides and port is None:
        return metrics
    return EngineReader(
        metrics,
        sides=sides,
        port=port,
        engine=reach.engine,
        every=reach.every_signal,
        read_timeout=reach.read_timeout,
    )


def reader_for(reach: ReadConfig) -> TargetReader:
    """The configured targets' reader: one target's, or a Round over one per target."""
    readers = [target_reader(reach, target) for target in reach.targets]
    if len(readers) == 1:
        return readers[0]
    from drainhook.reading.rounds import Round  # several targets only

    return Round(readers)


class ShownGone:
    """The hook's reader (CONTRACT §2): a read that every target refused stays
    `unreachable` only when /proc shows the engine gone (drainhook.reading.gone);
    otherwise the engine is elsewhere and the target wrong: `unknown`, misconfigured,
    which holds to D and names what listens. The check has its own read timeout."""

    def __init__(
        self,
        inner: TargetReader,
        read_timeout: float,
        clock: Callable[[], float] = time.monotonic,
        target: Target | None = None,
    ) -> None:
        self._inner = inner
        self._read_timeout = read_timeout
        self._clock = clock
        self._target = target  # the one target, whose address family a fix may name

    @property
    def name(self) -> str:
        return self._inner.name

    def close(self) -> None:
        self._inner.close()

    def read(self, left: float) -> Reading:
        until = self._clock() + left
        got = self._inner.read(left)
        if got.verdict is not Verdict.UNREACHABLE:
            return got
        return shown_gone(got, min(until, self._clock() + self._read_timeout), self._target)


def shown_gone(got: Reading, until: float, target: Target | None = None) -> Reading:
    """A refused read as the hook takes it (CONTRACT §2): `unreachable` with why the
    engine is gone, or `unknown`, misconfigured, naming the ports that listen here
    (and, for `target`'s port listening in the other address family only, that)."""
    from drainhook.reading import gone  # a refused read only

    found = gone.engine_gone(until)
    if found.gone:
        return dataclasses.replace(got, reason=f"{got.reason}; the engine is gone: {found.said}")
    fix = "point --port or --url at the engine"
    if target is not None:
        fix = gone.family_fix(target.host, target.port) or fix
    why = f"{MISCONFIGURED}: {got.reason}; {found.said}: {fix}"
    return dataclasses.replace(got, verdict=Verdict.UNKNOWN, reason=why)


def hook_reader(reach: ReadConfig) -> TargetReader:
    """The reader `wait` and `probe` read through: the configured targets', whose
    refusal ends the hook only once the engine is shown gone."""
    one = reach.target if not reach.more else None
    return ShownGone(reader_for(reach), reach.read_timeout, target=one)
