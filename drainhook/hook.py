"""The hook's run: one frozen config in, an outcome and an exit code out
(CONTRACT §1, §5).

`cli` turns flags and environment into the config and calls here; `demo`
(drainhook.sim) and the tests call here directly. Nothing here reads a flag,
a variable or the click context. The readers are assembled here too: one
Reader per target with the scanner its source needs (with `--source auto`,
an AutoReader over /metrics and SGLang's /v1/loads), a Round over several,
and listener discovery over them when the config turns it on.
"""

from __future__ import annotations

import dataclasses
import signal
import time
from collections.abc import Callable

from drainhook import exits, signals, termination
from drainhook.config import LOADS_PATH, Reach, WaitConfig
from drainhook.discover import Discovering, Search
from drainhook.drain import Interrupted, Outcome, Result, drain
from drainhook.exposition import MetricsScanner
from drainhook.loads import LoadsScanner
from drainhook.read import Reader
from drainhook.report import Log, probe_both, probe_json, probe_text
from drainhook.rounds import Round, TargetReader
from drainhook.sources import AutoReader
from drainhook.target import Target, parse_url, ssl_context
from drainhook.timeline import timeline_warnings
from drainhook.verdict import Reading, Scanner, Verdict

# The codes by name, as tests and tools have used them; drainhook.exits holds them all.
EXIT_DRAINED = exits.WAIT["drained"]
EXIT_DEADLINE = exits.WAIT["deadline"]
EXIT_UNREACHABLE = exits.WAIT["unreachable"]
PROBE_EXIT = {verdict: exits.PROBE[verdict.value] for verdict in Verdict}


def scanner_for(reach: Reach) -> Scanner:
    """The scanner of reach's source: /v1/loads JSON, or /metrics for its engine."""
    return LoadsScanner() if reach.source == "loads" else MetricsScanner(reach.engine)


def target_reader(reach: Reach, target: Target, *, in_pod: bool = False) -> TargetReader:
    """The reader of one target: a Reader of reach's source; with `auto` (and an
    engine that may be SGLang's), /metrics with /v1/loads beside it.

    `in_pod`: a listener discovery found in the hook's own network namespace,
    read over TLS without verification unless --cacert (as a loopback one is):
    it is in the Pod by construction, whatever its address.
    """

    def reader(scanner: Scanner, where: Target) -> Reader:
        return Reader(
            where,
            scanner=scanner,
            max_body=reach.max_body,
            ssl_context=ssl_context(where, reach.cacert, reach.insecure or in_pod),
            tls_server_name=reach.tls_server_name,
            api_key=reach.api_key,
        )

    if reach.source != "auto" or reach.engine == "vllm":
        return reader(scanner_for(reach), target)
    return AutoReader(
        reader(MetricsScanner(reach.engine), target),
        reader(LoadsScanner(), target.with_path(LOADS_PATH)),
        engine=reach.engine,
    )


def reader_for(reach: Reach) -> TargetReader:
    """A reader for one target; a Round over one per target for several."""
    readers = [target_reader(reach, target) for target in reach.targets]
    return readers[0] if len(readers) == 1 else Round(readers)


def discovering(
    reach: Reach,
    *,
    always: bool = False,
    on_search: Callable[[Search], None] = lambda _s: None,
) -> Discovering:
    """The targets' readers with listener discovery (CONTRACT §2a): on when
    reach.discover says so and every target is in the Pod (loopback: a remote
    target that refuses is a remote engine gone, which the Pod's own listeners
    do not stand in for); `always`: probe --discover."""
    return Discovering(
        [target_reader(reach, target) for target in reach.targets],
        reach.targets,
        lambda url: target_reader(reach, parse_url(url), in_pod=True),
        read_timeout=reach.read_timeout,
        engine=reach.engine,
        on_refused=reach.discover and all(t.is_loopback for t in reach.targets),
        always=always,
        on_search=on_search,
    )


def run_wait(config: WaitConfig, t0: float) -> int:
    """`wait`: drain per config from t0 (the hook's start), log, return the exit code."""
    log = Log(config.log_format, quiet=config.quiet)
    if config.log_file is not None:
        log.open_file(config.log_file)
    count = 0

    def on_read(t: float, reading: Reading) -> None:
        nonlocal count
        count += 1
        log.read(t, count, reading)

    reader: TargetReader | None = None
    try:
        reader = discovering(
            config.reach, on_search=lambda found: log.discovery(time.monotonic() - t0, found)
        )  # (a usage error here comes alone)
        for w in timeline_warnings(config):  # what `plan` says of this timeline, once
            log.warning(w.message, code=w.code, reason=w.reason)
        result = drain(
            config.timeline(),
            reader.read,
            t0=t0,
            clock=time.monotonic,
            sleep=time.sleep,
            on_read=on_read,
        )
    except Interrupted as exc:  # a signal before the loop had started
        result = Result(Outcome.INTERRUPTED, time.monotonic() - t0, 0, None, exc.signum)
    finally:
        signals.disarm()
    code = exit_code(result, config.exit_zero)
    if config.termination_log is not None:
        termination.write(config.termination_log, termination.message(result), log.warning)
    target = reader.name if reader is not None else config.reach.display
    log.summary(result, code, target, config.deadline)
    log.close()
    if reader is not None:
        reader.close()
    return code


def exit_code(result: Result, exit_zero: bool = False) -> int:
    """CONTRACT §5: the exit code of an outcome."""
    if exit_zero:
        return exits.EXIT_ZERO
    if result.outcome is Outcome.INTERRUPTED:
        return exits.interrupted(result.signum or signal.SIGTERM)
    return exits.WAIT[result.outcome.value]


def run_probe(reach: Reach, as_json: bool, list_all: bool = False) -> tuple[str, int]:
    """`probe`: one read now; the text to print and the exit code.

    With `--source both`: /metrics as the flags name it, then /v1/loads on the
    same listeners; the exit code is the /metrics read's. Listener discovery
    as `wait` does it on its first read (the verdict is then the found
    listeners'); `list_all` (`--discover`): search whatever the target gave,
    and list the engine listeners found.
    """
    if reach.source == "both":
        metrics = dataclasses.replace(reach, source="metrics")
        loads = dataclasses.replace(
            reach,
            source="loads",
            target=reach.target.with_path(LOADS_PATH),
            more=tuple(t.with_path(LOADS_PATH) for t in reach.more),
        )
        pair = (read_once(metrics), read_once(loads))
        shown = probe_both(pair, (metrics.display, loads.display), as_json)
        return shown, PROBE_EXIT[pair[0].verdict]
    reader = discovering(reach, always=list_all)
    try:
        reading = reader.read(reach.read_timeout)
    finally:
        reader.close()
    out = probe_json if as_json else probe_text
    return out(reading, reach.display, reader.last_search), PROBE_EXIT[reading.verdict]


def read_once(reach: Reach) -> Reading:
    """One read of reach within its read timeout (no discovery)."""
    reader = reader_for(reach)
    try:
        return reader.read(reach.read_timeout)
    finally:
        reader.close()
