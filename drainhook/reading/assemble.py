"""The one place that turns the reach flags (a ReadConfig) into the reader `wait`,
`probe` and `plan --observe` read through: per target a Reader in an EngineReader
with its side source and connections, a Round over several, discovery when on."""

from __future__ import annotations

import functools
import typing
from collections.abc import Callable

from drainhook.engines.exposition import MetricsScanner
from drainhook.engines.gauges import LOADS, SERVER_LOAD, SideSource
from drainhook.engines.verdict import Scanner
from drainhook.reading import TargetReader
from drainhook.reading.config import ReadConfig
from drainhook.reading.read import Reader
from drainhook.reading.sources import EngineReader
from drainhook.reading.target import Target, parse_url, ssl_context

if typing.TYPE_CHECKING:  # discovery is loaded only when it runs
    from drainhook.reading.discovery.search import SearchRecord


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


def plain_reader(
    reach: ReadConfig, target: Target, scanner: Scanner | None = None, *, in_pod: bool = False
) -> Reader:
    """One GET of target with reach's body cap, TLS and key; `scanner` (reach's source's
    by default) names the Accept header and counts the body. `in_pod`: a listener found
    in the hook's own namespace, read over TLS as a loopback one is (unverified)."""
    return Reader(
        target,
        scanner=scanner or scanner_for(reach),
        max_body=reach.max_body,
        ssl_context=ssl_context(target, reach.cacert, reach.insecure or in_pod),
        tls_server_name=reach.tls_server_name,
        api_key=reach.api_key,
    )


def target_reader(reach: ReadConfig, target: Target, *, in_pod: bool = False) -> TargetReader:
    """The reader of one target: a Reader of reach's source; with `auto`, /metrics
    with SGLang's /v1/loads (an engine that may be SGLang's) and vLLM's /load (one
    that may be vLLM's) beside it; and, for a target in the Pod (loopback, or
    found by discovery), the connection signal on its port (CONTRACT §2a)."""
    metrics = plain_reader(reach, target, in_pod=in_pod)
    sides: dict[str, Callable[[], Reader]] = {}
    if reach.source == "auto":
        engines = {"auto": (LOADS, SERVER_LOAD), "sglang": (LOADS,), "vllm": (SERVER_LOAD,)}
        for side in engines.get(reach.engine, ()):
            where = target.with_path(side.path)
            sides[side.path] = functools.partial(
                lambda s, w: plain_reader(reach, w, side_scanner(s), in_pod=in_pod), side, where
            )
    port = target.port if reach.connections and (in_pod or target.is_loopback) else None
    if not sides and port is None:
        return metrics
    return EngineReader(
        metrics, sides=sides, port=port, engine=reach.engine, every=reach.every_signal
    )


def reader_for(reach: ReadConfig) -> TargetReader:
    """The configured targets' reader, without discovery: one target's, or a
    Round over one per target."""
    readers = [target_reader(reach, target) for target in reach.targets]
    if len(readers) == 1:
        return readers[0]
    from drainhook.reading.rounds import Round  # several targets only

    return Round(readers)


def discovers(reach: ReadConfig) -> bool:
    """Whether a refused first read searches the Pod (CONTRACT §2a): when
    reach.discover says so and every target is in the Pod (loopback: a remote
    target that refuses is a remote engine gone, which the Pod's own listeners
    do not stand in for)."""
    return reach.discover and all(t.is_loopback for t in reach.targets)


def hook_reader(
    reach: ReadConfig,
    *,
    always: bool = False,
    on_search: Callable[[SearchRecord], None] = lambda _s: None,
) -> TargetReader:
    """The reader `wait` and `probe` read through: the configured targets', with
    listener discovery over them when it is on (`discovers`) or `always` (probe
    --discover); without, no discovering reader at all."""
    if not (discovers(reach) or always):
        return reader_for(reach)
    from drainhook.reading.rounds import Discover, Round  # discovery only

    discover = Discover(
        reach.targets,
        lambda url: target_reader(reach, parse_url(url), in_pod=True),
        read_timeout=reach.read_timeout,
        engine=reach.engine,
        on_refused=discovers(reach),
        always=always,
        on_search=on_search,
    )
    return Round([target_reader(reach, target) for target in reach.targets], discover=discover)


def last_search(reader: TargetReader) -> SearchRecord | None:
    """The search a hook reader ran, if it ran one."""
    found: SearchRecord | None = getattr(reader, "last_search", None)
    return found
