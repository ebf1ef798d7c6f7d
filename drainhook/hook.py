"""The hook's run: one frozen config in, an outcome and an exit code out
(CONTRACT §1, §5).

`cli` turns flags and environment into the config and calls here; `demo`
(drainhook.sim) and the tests call here directly. Nothing here reads a flag,
a variable or the click context. The readers are assembled here too: one
Reader per target with the scanner its source needs, a Round over several.
"""

from __future__ import annotations

import dataclasses
import time

from drainhook import signals
from drainhook.config import LOADS_PATH, Reach, WaitConfig
from drainhook.drain import Interrupted, Outcome, Result, drain
from drainhook.exposition import MetricsScanner
from drainhook.loads import LoadsScanner
from drainhook.read import Reader
from drainhook.report import Log, probe_both, probe_json, probe_text
from drainhook.rounds import Round
from drainhook.target import ssl_context
from drainhook.verdict import Reading, Scanner, Verdict

EXIT_DRAINED = 0
EXIT_DEADLINE = 3
EXIT_UNREACHABLE = 4

PROBE_EXIT = {
    Verdict.IDLE: 0,
    Verdict.BUSY: 1,
    Verdict.UNKNOWN: 3,
    Verdict.UNREACHABLE: 4,
}


def scanner_for(reach: Reach) -> Scanner:
    """The scanner of reach's source: /v1/loads JSON, or /metrics for its engine."""
    return LoadsScanner() if reach.source == "loads" else MetricsScanner(reach.engine)


def reader_for(reach: Reach) -> Reader | Round:
    """A Reader for one target; a Round over one Reader per target for several."""
    readers = [
        Reader(
            target,
            scanner=scanner_for(reach),
            max_body=reach.max_body,
            ssl_context=ssl_context(target, reach.cacert, reach.insecure),
            tls_server_name=reach.tls_server_name,
            api_key=reach.api_key,
        )
        for target in reach.targets
    ]
    return readers[0] if len(readers) == 1 else Round(readers)


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

    reader = None
    try:
        reader = reader_for(config.reach)
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
    log.summary(result, code, config.reach.display, config.deadline)
    log.close()
    if reader is not None:
        reader.close()
    return code


def exit_code(result: Result, exit_zero: bool = False) -> int:
    """CONTRACT §5: the exit code of an outcome."""
    if exit_zero:
        return 0
    if result.outcome is Outcome.INTERRUPTED:
        return 128 + (result.signum or 15)
    return {
        Outcome.DRAINED: EXIT_DRAINED,
        Outcome.DEADLINE: EXIT_DEADLINE,
        Outcome.UNREACHABLE: EXIT_UNREACHABLE,
    }[result.outcome]


def run_probe(reach: Reach, as_json: bool) -> tuple[str, int]:
    """`probe`: one read now; the text to print and the exit code.

    With `--source both`: /metrics as the flags name it, then /v1/loads on the
    same listeners; the exit code is the /metrics read's.
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
    reading = read_once(reach)
    out = probe_json if as_json else probe_text
    return out(reading, reach.display), PROBE_EXIT[reading.verdict]


def read_once(reach: Reach) -> Reading:
    """One read of reach within its read timeout."""
    reader = reader_for(reach)
    try:
        return reader.read(reach.read_timeout)
    finally:
        reader.close()
