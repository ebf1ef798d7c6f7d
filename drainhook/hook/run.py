"""The hook's run: one frozen config in, an outcome and an exit code out (CONTRACT §1,
§5). The CLI, the demo and the tests call here; nothing here reads a flag or a variable."""

from __future__ import annotations

import dataclasses
import signal
import time

from drainhook import exits, failsafe
from drainhook.errors import DrainhookError
from drainhook.hook import signals, termination
from drainhook.hook.config import WaitConfig
from drainhook.hook.drain import Outcome, Result, drain
from drainhook.hook.log import Log
from drainhook.hook.signals import Interrupted
from drainhook.hook.stall import StallWatch
from drainhook.hook.timeline import instants, timeline_warnings
from drainhook.reading import TargetReader
from drainhook.reading.assemble import hook_reader
from drainhook.reading.pid1 import unsignalled


def run_wait(config: WaitConfig, t0: float) -> int:
    """`wait`: drain per config from t0, log, return the exit code. Fails safe (CONTRACT
    §5): a failure it did not plan for holds until the config's D, then exits 70 (2 usage)."""
    try:
        return _run_wait(config, t0)
    except Interrupted:
        raise
    except Exception as exc:
        code = exc.exit_code if isinstance(exc, DrainhookError) else exits.INTERNAL
        word = "" if isinstance(exc, DrainhookError) else "internal error: "
        signals.disarm(hold=True)
        termination = config.termination_log
        failsafe.hold(
            f"drainhook: {word}{exc if word == '' else failsafe.describe(exc)}",
            t0=t0,
            deadline=config.deadline,
            termination=None if termination is None else (termination.path, termination.create),
            log_file=config.log_file,
        )
        return code


def _run_wait(config: WaitConfig, t0: float) -> int:
    log = Log(config.log_format, quiet=config.quiet, reads=config.log_reads)
    if config.log_file is not None:
        log.open_file(config.log_file)
    reader: TargetReader | None = None
    # A stall window that cannot close before D (`plan` shows it off) is no
    # watch: nothing to say of a target without counters, no counter to read.
    can_stall = instants(config).stall_earliest is not None
    watch = StallWatch(config.stall_window, on_note=log.warning) if can_stall else None
    reach = dataclasses.replace(config.reach, progress=can_stall)
    try:
        reader = hook_reader(reach)
        log.start(config, reader.name, time.monotonic() - t0)
        for w in timeline_warnings(config):  # what `plan` says of this timeline, once
            log.warning(w.message, code=w.code, reason=w.reason)
        if (said := unsignalled(reach.target)) is not None:  # SIGTERM stops short
            log.warning(said, code="shell-pid1")
        result = drain(
            config.timeline(),
            reader.read,
            t0=t0,
            clock=time.monotonic,
            sleep=time.sleep,
            on_read=log.read,
            stall=watch,
        )
    except Interrupted as exc:  # a signal before the loop had started
        result = Result(Outcome.INTERRUPTED, time.monotonic() - t0, 0, None, exc.signum)
    finally:
        signals.disarm()
    code = exit_code(result, config.exit_zero)
    line = termination.message(result)
    if config.termination_log is not None:
        termination.write(config.termination_log, line, log.warning)
    log.end(line)
    target = reader.name if reader is not None else config.reach.display
    log.summary(result, code, target, config.deadline)
    log.close()
    # Not after a signal, which may have left the pool's lock held (raised between its
    # acquire and its `with`): closing would wait for ever. The process ends next.
    if reader is not None and result.outcome is not Outcome.INTERRUPTED:
        reader.close()
    return code


def exit_code(result: Result, exit_zero: bool = False) -> int:
    """CONTRACT §5: the exit code of an outcome."""
    if exit_zero:
        return exits.EXIT_ZERO
    if result.outcome is Outcome.INTERRUPTED:
        return exits.interrupted(result.signum or signal.SIGTERM)
    return exits.WAIT[result.outcome.value]
