"""The drain loop of CONTRACT §1: reads in, an outcome out. Pure (clock, sleep and
read are handed in); it checks first, then waits, and never waits past D: every
sleep and read timeout is clipped to the time left. Reads come at `Cadence`."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from drainhook.engines.verdict import Reading, Verdict
from drainhook.failsafe import sleep_until
from drainhook.hook.config import Timeline
from drainhook.hook.signals import Interrupted
from drainhook.hook.stall import Stall, StallWatch
from drainhook.reading.failures import is_misconfigured


class Outcome(str, enum.Enum):
    DRAINED = "drained"
    DEADLINE = "deadline"
    UNREACHABLE = "unreachable"
    INTERRUPTED = "interrupted"
    STALLED = "stalled"  # work reported, no progress for --stall-after (CONTRACT §2b)
    MISCONFIGURED = "misconfigured"  # held to D on a wrong target (CONTRACT §2)

    def __str__(self) -> str:
        return self.value


# Reads per interval while the work drains: the first idle read follows the last
# request's end by at most I/4 (what it costs the API server: benchmarks/README.md).
DRAIN_READS_PER_INTERVAL = 4


@dataclass
class Cadence:
    """When the next read is due after each read (CONTRACT §1): every I at first and
    after a read with no count; every I/4 from a busy read whose count fell or is
    at most 1, until a count rises or a read is idle; the confirming read I/4 after
    an idle read the server's own signals answered (`servers_idle`), else I."""

    interval: float
    fast: bool = False
    previous: float | None = None  # the last count read (0 for idle)

    @property
    def quick(self) -> float:
        return self.interval / DRAIN_READS_PER_INTERVAL

    def after(self, reading: Reading) -> float:
        """Seconds from the start of this read to the next one's."""
        count = reading.in_flight
        if reading.verdict is Verdict.IDLE:
            self.fast, self.previous = False, 0.0
            return self.quick if servers_idle(reading) else self.interval
        if reading.verdict is not Verdict.BUSY or count is None:
            return self.interval  # no count: nothing learned, the slow step
        before, self.previous = self.previous, count
        if before is not None and count > before:
            self.fast = False
        elif (before is not None and count < before) or count <= 1:
            self.fast = True
        return self.quick if self.fast else self.interval


def servers_idle(reading: Reading) -> bool:
    """Whether an idle reading's zero is the server's own on every target: its
    HTTP server's count or the connection signal answered there (CONTRACT §2a)."""
    parts = [part for _, part in reading.per_target()]
    return bool(parts) and all(
        part.signals is not None
        and (part.signals.server is not None or part.signals.connections is not None)
        for part in parts
    )


@dataclass(frozen=True)
class Result:
    """What the loop did: the outcome, when it ended (seconds from t0), its reads."""

    outcome: Outcome
    elapsed: float
    reads: int
    last: Reading | None
    signum: int | None = None
    stall: Stall | None = None  # what froze, when the outcome is STALLED


def drain(
    timeline: Timeline,
    read: Callable[[float], Reading],
    *,
    t0: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    on_read: Callable[[float, Reading], None] = lambda _t, _r: None,
    stall: StallWatch | None = None,
) -> Result:
    """Run the timeline from t0 and return what happened. `read(left)` ends within
    `left`, the time to D (each of its reads has its own timeout); `on_read` sees
    each reading; `stall` (CONTRACT §2b) may end the loop, but never while idle is
    being confirmed. Reads come at the `Cadence`."""
    deadline = t0 + timeline.deadline
    reads = 0
    last: Reading | None = None

    def result(outcome: Outcome, signum: int | None = None, stalled: Stall | None = None) -> Result:
        return Result(outcome, clock() - t0, reads, last, signum, stalled)

    def wait_until(when: float) -> None:
        sleep_until(min(when, deadline), clock, sleep)

    try:
        wait_until(t0 + timeline.settle)
        due = t0 + timeline.settle
        cadence = Cadence(timeline.interval)
        idle_run = 0
        while True:
            now = clock()
            if now >= deadline:
                wrong = last is not None and is_misconfigured(last.reason)
                return result(Outcome.MISCONFIGURED if wrong else Outcome.DEADLINE)
            if now < due:
                wait_until(due)
                continue
            got = read(deadline - now)
            reads += 1
            on_read(clock() - t0, got)
            # A read that D cut short says only that D came: the result keeps the
            # read before it (its count and its reason: a wrong target's, say).
            cut = deadline - now < timeline.read_timeout and clock() >= deadline
            if last is None or not (cut and got.verdict is Verdict.UNKNOWN):
                last = got
            if got.verdict is Verdict.UNREACHABLE:
                return result(Outcome.UNREACHABLE)
            idle_run = idle_run + 1 if got.verdict is Verdict.IDLE else 0
            if stall is not None:
                found = stall.observe(now - t0, got)
                if found is not None and idle_run == 0:
                    return result(Outcome.STALLED, stalled=found)
            if idle_run >= timeline.confirm:
                wait_until(clock() + timeline.linger)
                return result(Outcome.DRAINED)
            # Due a step after this read started (Cadence): a long read is followed
            # at once, and a late start still spaces the confirming reads.
            due = now + cadence.after(got)
    except Interrupted as exc:
        return result(Outcome.INTERRUPTED, exc.signum)
