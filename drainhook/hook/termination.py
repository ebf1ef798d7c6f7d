"""The drain's outcome in the Pod's status: one line in the termination message file
(CONTRACT §5, at most 4096 bytes), written without ever blocking (O_NONBLOCK); a
failure loses the line, said once on stderr."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

from drainhook import failsafe
from drainhook.engines.verdict import Verdict
from drainhook.hook.config import TerminationLog
from drainhook.hook.drain import Outcome, Result
from drainhook.numfmt import number

DEFAULT_PATH = Path(failsafe.TERMINATION_PATH)


def choose(
    value: str | None, exists: Callable[[Path], bool] = os.path.exists
) -> TerminationLog | None:
    """From `--termination-log`: None (not given) is the default path when it
    exists; `''` turns the line off; any other value is that path."""
    if value is None:
        return TerminationLog(DEFAULT_PATH, create=False) if exists(DEFAULT_PATH) else None
    if value == "":
        return None
    return TerminationLog(Path(value), create=True)


def message(result: Result) -> str:
    """The outcome, when, how many reads and the work still in flight, in one line
    (`deadline at 25.0 s after 20 reads; 3 requests still in flight at SIGTERM; ...`),
    with what becomes of vLLM work (`hang_note`) and, at the deadline with work in
    flight, what to change; or why the engine is gone."""
    reads = f"{result.reads} read" + ("" if result.reads == 1 else "s")
    last = result.last
    elapsed = f"{result.elapsed:.1f} s"
    if result.outcome is Outcome.DRAINED:
        return f"drained in {elapsed} after {reads}; nothing in flight"
    if result.outcome is Outcome.UNREACHABLE:
        why = f": {last.reason}" if last is not None and last.reason else ""
        return f"unreachable at {elapsed} after {reads}; no work could be measured{why}"
    if result.outcome is Outcome.STALLED and result.stall is not None:
        line = f"stalled at {elapsed} after {reads}; {result.stall.describe()}"
        return line if hang_note(result) is None else f"{line}; {HANG_SAID}"
    if result.outcome is Outcome.INTERRUPTED:
        name = signal.Signals(result.signum or signal.SIGTERM).name
        return (
            f"interrupted by {name} at {elapsed} after {reads}; {_work(result, 'at the last read')}"
        )
    if result.outcome is Outcome.MISCONFIGURED:
        why = (last.reason if last is not None else None) or "-"
        return f"misconfigured: held to D at {elapsed} after {reads}; {why}"
    line = f"deadline at {elapsed} after {reads}; {_work(result, 'still in flight at SIGTERM')}"
    note = hang_note(result)
    line = line if note is None else f"{line}; {HANG_SAID}"
    busy = last is not None and last.verdict is Verdict.BUSY and bool(last.in_flight)
    return f"{line}; {RAISE_G}" if busy else line


# What becomes of vLLM work left at SIGTERM (CONTRACT §7 has what was measured): a
# short code and where the docs say why, for the summary; a short clause for the line.
HANG_UNTIL_KILL = "hang-until-kill"
HANG_WHY = "docs/contract.md#7-what-the-engine-does-after-the-hook"
HANG_SAID = "SIGTERM cuts them (most hang until the kill at G: docs/contract.md §7)"
RAISE_G = "raise G past the longest request (drainhook plan --observe measures it)"


def hang_note(result: Result) -> tuple[str, str] | None:
    """(HANG_UNTIL_KILL, why) when `wait` returns at its deadline, or stalled, with vLLM
    requests still in flight at the last read; None otherwise. A stalled engine's
    requests never end, and vLLM's API server stays while their clients are connected
    (measured live: tests/live/test_live_wedged.py)."""
    last = result.last
    if result.outcome not in (Outcome.DEADLINE, Outcome.STALLED):
        return None
    if last is None or last.engine != "vllm":
        return None
    if last.verdict is not Verdict.BUSY or not last.in_flight:
        return None
    return HANG_UNTIL_KILL, HANG_WHY


def _work(result: Result, when: str) -> str:
    last = result.last
    if last is None:
        return "no read before it, work in flight unknown"
    if last.verdict in (Verdict.IDLE, Verdict.BUSY) and last.in_flight is not None:
        n = last.in_flight
        if n == 0:
            return "nothing in flight at the last read"
        work = f"{number(n)} request{'' if n == 1 else 's'} {when}"
        # Which signals saw them, when not the scheduler's alone (CONTRACT §2a).
        holding = last.signals.holding() if last.signals is not None else ()
        if holding and holding != ("scheduler",):
            work += f" (seen by: {', '.join(holding)})"
        return work
    return f"work in flight unknown (last read {last.verdict.value}: {last.reason or '-'})"


def write(target: TerminationLog, text: str, say: Callable[[str], None]) -> None:
    """Write the line (drainhook.failsafe.write_termination); on a failure, say so
    and go on."""
    why = failsafe.write_termination(target.path, target.create, text)
    if why is not None:
        say(f"cannot write --termination-log {target.path}: {why}; going on")
