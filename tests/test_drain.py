"""The drain loop under a fake clock: outcomes, confirmation, and the deadline.

The clock's `sleep` advances `now`; a scripted read advances it by the read's
duration (never more than the timeout it was given, as the real reader).
Each test asserts the outcome, the number of reads, and the time it ended.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest

from drainhook.engines.verdict import Reading, Signals, Verdict
from drainhook.hook.config import Timeline
from drainhook.hook.drain import Interrupted, Outcome, Result, drain

IDLE, BUSY, UNKNOWN, UNREACHABLE = Verdict.IDLE, Verdict.BUSY, Verdict.UNKNOWN, Verdict.UNREACHABLE
T0 = 1000.0


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now
        self.start = now
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0, f"slept {seconds}"
        self.sleeps.append(seconds)
        self.now += seconds


class Script:
    """Reads that return the given verdicts in order (the last repeats), each taking
    `took` seconds, or the whole of its timeout when that is shorter (a timed-out
    read): its own read timeout, clipped to the time left to D, which the loop gives
    (`lefts`), as the hook's readers do."""

    def __init__(
        self,
        clock: FakeClock,
        verdicts: Sequence[Verdict],
        took: float = 0.002,
        read_timeout: float = 1.0,
    ) -> None:
        self.clock = clock
        self.verdicts = list(verdicts)
        self.took = took
        self.read_timeout = read_timeout
        self.starts: list[float] = []
        self.lefts: list[float] = []

    def __call__(self, left: float) -> Reading:
        assert left > 0
        n = len(self.starts)
        self.starts.append(self.clock.now - T0)
        self.lefts.append(left)
        timeout = min(left, self.read_timeout)
        verdict = self.verdicts[min(n, len(self.verdicts) - 1)]
        if self.took >= timeout:
            self.clock.now += timeout
            return Reading.failed(UNKNOWN, "read timed out", timeout * 1000)
        self.clock.now += self.took
        if verdict in (IDLE, BUSY):
            total = 0.0 if verdict is IDLE else 3.0
            return Reading(verdict, "vllm", total, (), None, self.took * 1000)
        return Reading.failed(verdict, "scripted", self.took * 1000)


def run(
    verdicts: Sequence[Verdict],
    *,
    settle: float = 5.0,
    deadline: float = 25.0,
    interval: float = 1.0,
    read_timeout: float = 1.0,
    confirm: int = 2,
    linger: float = 0.0,
    took: float = 0.002,
    start: float = T0,
) -> tuple[Result, Script, FakeClock]:
    clock = FakeClock(start)
    script = Script(clock, verdicts, took, read_timeout)
    timeline = Timeline(settle, deadline, interval, read_timeout, confirm, linger)
    result = drain(timeline, script, t0=T0, clock=clock, sleep=clock.sleep)
    return result, script, clock


def test_idle_engine_returns_on_second_read_one_interval_after_settle() -> None:
    result, script, _ = run([IDLE])
    assert result.outcome is Outcome.DRAINED
    assert result.reads == 2
    assert script.starts == pytest.approx([5.0, 6.0])
    assert result.elapsed == pytest.approx(6.002)


def test_busy_reads_reset_confirmation() -> None:
    result, script, _ = run([BUSY, IDLE, BUSY, IDLE, IDLE])
    assert result.outcome is Outcome.DRAINED
    assert result.reads == 5
    assert script.starts[-1] == pytest.approx(9.0)
    assert result.last is not None and result.last.verdict is IDLE


def test_unknown_counts_as_busy() -> None:
    result, _, _ = run([IDLE, UNKNOWN, IDLE, UNKNOWN, IDLE, IDLE])
    assert result.outcome is Outcome.DRAINED
    assert result.reads == 6


def test_confirm_three() -> None:
    result, script, _ = run([IDLE, IDLE, BUSY, IDLE, IDLE, IDLE], confirm=3)
    assert result.outcome is Outcome.DRAINED
    assert result.reads == 6
    assert script.starts[-1] == pytest.approx(10.0)


def test_confirm_one_returns_on_first_idle() -> None:
    result, _, _ = run([IDLE], confirm=1)
    assert (result.outcome, result.reads) == (Outcome.DRAINED, 1)


def test_always_busy_ends_exactly_at_the_deadline() -> None:
    result, script, clock = run([BUSY])
    assert result.outcome is Outcome.DEADLINE
    assert result.elapsed == pytest.approx(25.0)
    assert clock.now - T0 == pytest.approx(25.0)
    # reads at 5, 6, ..., 24; the one that would start at 25 is not made
    assert result.reads == 20
    assert script.starts[-1] == pytest.approx(24.0)


def test_sleep_is_clipped_at_the_deadline() -> None:
    # D falls between two reads: the last sleep stops at D, not at the next slot.
    result, script, _ = run([BUSY], deadline=7.5)
    assert result.outcome is Outcome.DEADLINE
    assert result.elapsed == pytest.approx(7.5)
    assert script.starts == pytest.approx([5.0, 6.0, 7.0])


def test_each_read_is_given_the_time_left_to_d() -> None:
    _, script, _ = run([BUSY], deadline=7.3, read_timeout=1.0)
    assert script.lefts == pytest.approx([2.3, 1.3, 0.3])


def test_a_read_still_in_flight_at_the_deadline_ends_there() -> None:
    # Every read hangs: each is given at most the time left and the hook ends at D.
    result, script, _ = run([BUSY], deadline=6.5, read_timeout=1.0, took=60.0)
    assert result.outcome is Outcome.DEADLINE
    assert result.elapsed == pytest.approx(6.5)
    assert script.lefts == pytest.approx([1.5, 0.5])  # each took its read timeout, or less
    assert result.last is not None and result.last.verdict is UNKNOWN


def test_slow_reads_follow_each_other_without_a_burst() -> None:
    # Reads that time out after 1.0 s with I = 0.5: the next starts at once,
    # one at a time, not a catch-up burst for the missed slots.
    result, script, _ = run([BUSY], deadline=9.0, interval=0.5, read_timeout=1.0, took=5.0)
    assert result.outcome is Outcome.DEADLINE
    assert script.starts == pytest.approx([5.0, 6.0, 7.0, 8.0])


def test_linger_holds_after_confirmation() -> None:
    result, _, _ = run([IDLE], linger=3.0)
    assert result.outcome is Outcome.DRAINED
    assert result.elapsed == pytest.approx(9.002)


def test_linger_is_clipped_at_the_deadline() -> None:
    result, _, _ = run([IDLE], deadline=8.0, linger=30.0)
    assert result.outcome is Outcome.DRAINED
    assert result.elapsed == pytest.approx(8.0)


def test_unreachable_ends_at_once() -> None:
    result, script, _ = run([BUSY, UNREACHABLE, IDLE])
    assert result.outcome is Outcome.UNREACHABLE
    assert result.reads == 2
    assert len(script.starts) == 2  # the idle read after it is never made
    assert result.elapsed == pytest.approx(6.002)


def test_deadline_before_settle_end_makes_no_read() -> None:
    result, script, _ = run([IDLE], settle=5.0, deadline=3.0)
    assert result.outcome is Outcome.DEADLINE
    assert result.reads == 0
    assert script.starts == []
    assert result.elapsed == pytest.approx(3.0)


def test_zero_deadline_returns_at_once() -> None:
    result, _, clock = run([IDLE], deadline=0.0)
    assert (result.outcome, result.reads) == (Outcome.DEADLINE, 0)
    assert clock.sleeps == []


def test_time_before_main_counts_toward_the_settle() -> None:
    # The process started 0.4 s before the loop: the first read is still at t0 + S.
    result, script, clock = run([IDLE], start=T0 + 0.4)
    assert script.starts[0] == pytest.approx(5.0)
    assert sum(clock.sleeps) == pytest.approx(6.0 - 0.4 - 0.002)
    assert result.elapsed == pytest.approx(6.002)


def test_start_after_the_settle_still_spaces_the_confirming_reads() -> None:
    # Start-up outlasted the settle (3 s late): the first read is at once, the
    # confirming one an interval later, not back to back.
    result, script, _ = run([IDLE], start=T0 + 8.0)
    assert result.outcome is Outcome.DRAINED
    assert script.starts == pytest.approx([8.0, 9.0])


def test_late_start_past_the_deadline_returns_at_once() -> None:
    result, script, clock = run([IDLE], deadline=2.0, start=T0 + 2.5)
    assert (result.outcome, result.reads) == (Outcome.DEADLINE, 0)
    assert script.starts == []
    assert clock.sleeps == []


def test_idle_confirmed_just_before_the_deadline_is_drained() -> None:
    result, _, _ = run([BUSY, IDLE, IDLE], deadline=7.01)
    assert result.outcome is Outcome.DRAINED
    assert result.reads == 3


def test_signal_during_a_sleep_interrupts() -> None:
    clock = FakeClock()
    script = Script(clock, [BUSY])

    def sleep(seconds: float) -> None:
        if clock.now - T0 >= 7.0:
            raise Interrupted(15)
        clock.sleep(seconds)

    result = drain(Timeline(5.0, 25.0, 1.0, 1.0), script, t0=T0, clock=clock, sleep=sleep)
    assert result.outcome is Outcome.INTERRUPTED
    assert result.signum == 15
    assert result.reads == 3


def test_signal_during_a_read_interrupts() -> None:
    clock = FakeClock()

    def read(timeout: float) -> Reading:
        raise Interrupted(2)

    result = drain(Timeline(5.0, 25.0, 1.0, 1.0), read, t0=T0, clock=clock, sleep=clock.sleep)
    assert (result.outcome, result.signum, result.reads) == (Outcome.INTERRUPTED, 2, 0)
    assert result.elapsed == pytest.approx(5.0)


def test_signal_during_settle_interrupts_before_any_read() -> None:
    clock = FakeClock()

    def sleep(seconds: float) -> None:
        raise Interrupted(15)

    script = Script(clock, [IDLE])
    result = drain(Timeline(5.0, 25.0, 1.0, 1.0), script, t0=T0, clock=clock, sleep=sleep)
    assert (result.outcome, result.reads) == (Outcome.INTERRUPTED, 0)
    assert script.starts == []


def test_on_read_sees_time_since_t0_and_each_reading() -> None:
    clock = FakeClock()
    seen: list[tuple[float, Verdict]] = []
    drain(
        Timeline(5.0, 25.0, 1.0, 1.0),
        Script(clock, [BUSY, IDLE, IDLE]),
        t0=T0,
        clock=clock,
        sleep=clock.sleep,
        on_read=lambda t, r: seen.append((round(t, 3), r.verdict)),
    )
    assert seen == [(5.002, BUSY), (6.002, IDLE), (7.002, IDLE)]


@pytest.mark.parametrize(
    ("deadline", "reads", "outcome"),
    [
        (5.999, 1, Outcome.DEADLINE),  # the confirming read's slot is past D
        (6.0, 1, Outcome.DEADLINE),  # a read due exactly at D is not started
        (6.001, 2, Outcome.DEADLINE),  # started with 1 ms left; takes 2 ms: clipped, unknown
        (6.003, 2, Outcome.DRAINED),  # ends before D
    ],
)
def test_boundaries_around_the_confirming_read(
    deadline: float, reads: int, outcome: Outcome
) -> None:
    result, _, _ = run([IDLE], deadline=deadline)
    assert (result.outcome, result.reads) == (outcome, reads)
    assert result.elapsed <= deadline + 1e-9  # exact: a fake clock, to the float's rounding


# -- the cadence: every I, every I/4 while the work drains (Cadence) -------------------


class Draining:
    """An engine whose requests end at the given times (seconds from t0): a read
    starting at t counts those still running; each read takes `took`. `server`:
    the reading carries the server's own count (CONTRACT §2a) beside the gauges'."""

    def __init__(
        self, clock: FakeClock, ends: Sequence[float], took: float = 0.002, server: bool = False
    ) -> None:
        self.clock = clock
        self.ends = list(ends)
        self.took = took
        self.server = server
        self.starts: list[float] = []
        self.counts: list[float] = []

    def __call__(self, timeout: float) -> Reading:
        t = self.clock.now - T0
        self.starts.append(t)
        count = float(sum(1 for end in self.ends if end > t))
        self.counts.append(count)
        self.clock.now += min(self.took, timeout)
        verdict = IDLE if count == 0 else BUSY
        signals = Signals(count, count if self.server else None)
        return Reading(verdict, "vllm", count, (), None, self.took * 1000, signals=signals)


def drain_ends(
    ends: Sequence[float],
    *,
    interval: float = 1.0,
    deadline: float = 60.0,
    took: float = 0.002,
    server: bool = False,
) -> tuple[Result, Draining]:
    clock = FakeClock()
    engine = Draining(clock, ends, took, server)
    timeline = Timeline(5.0, deadline, interval, 1.0)
    return drain(timeline, engine, t0=T0, clock=clock, sleep=clock.sleep), engine


def test_reads_quicken_when_a_request_ends_and_confirm_one_interval_later() -> None:
    # Two requests, ending at 7.3 and 8.6 s: every I while both run, every I/4 from the
    # read that saw one fewer (8.0), the first idle read at 8.75, the confirming one at
    # 9.75: released 1.15 s after the engine went idle.
    result, engine = drain_ends([7.3, 8.6])
    assert engine.starts == pytest.approx([5.0, 6.0, 7.0, 8.0, 8.25, 8.5, 8.75, 9.75])
    assert engine.counts == [2, 2, 2, 1, 1, 1, 0, 0]
    assert (result.outcome, result.reads) == (Outcome.DRAINED, 8)
    assert result.elapsed == pytest.approx(9.752)


@pytest.mark.parametrize("phase", [i / 20 for i in range(20)])
@pytest.mark.parametrize("interval", [1.0, 0.5])
def test_release_within_i_and_a_quarter_of_the_idle_moment_at_every_phase(
    phase: float, interval: float
) -> None:
    # Three requests ending more than I apart, the grid's phase swept over one I: the
    # release is never before I after the idle moment nor later than I + I/4 (+ the
    # read's own 2 ms), and the reads are never closer than I/4 (at most 4 an interval).
    idle = 9.0 + phase * interval
    result, engine = drain_ends(
        [idle - 2.6 * interval, idle - 1.3 * interval, idle], interval=interval
    )
    assert result.outcome is Outcome.DRAINED
    release = result.elapsed - idle
    assert interval <= release <= interval + interval / 4 + 0.002 + 1e-9, (release, engine.starts)
    gaps = [b - a for a, b in itertools.pairwise(engine.starts)]
    assert min(gaps) >= interval / 4 - 1e-9, gaps
    assert engine.starts[-1] - engine.starts[-2] == pytest.approx(interval)  # the confirming read


@pytest.mark.parametrize("phase", [i / 10 for i in range(10)])
def test_the_last_request_alone_is_read_every_quarter_interval(phase: float) -> None:
    # One request from the start (count 1: the last one): I/4 from the first read.
    idle = 12.0 + phase
    result, engine = drain_ends([idle])
    assert engine.starts[:3] == pytest.approx([5.0, 5.25, 5.5])
    assert 1.0 <= result.elapsed - idle <= 1.252 + 1e-9  # exact: a fake clock


def test_quick_reads_are_bounded_to_four_an_interval_up_to_the_deadline() -> None:
    # The last request never ends: reads every I/4 from S to D, 4 an interval, no more.
    result, engine = drain_ends([1e9], deadline=25.0)
    assert result.outcome is Outcome.DEADLINE
    assert result.reads == 4 * 20
    assert engine.starts[-1] == pytest.approx(24.75)


def test_a_steady_count_is_read_every_interval() -> None:
    # Three requests that outlast D: the count never falls, the reads stay every I.
    result, engine = drain_ends([1e9, 1e9, 1e9], deadline=10.0)
    assert engine.starts == pytest.approx([5.0, 6.0, 7.0, 8.0, 9.0])
    assert result.reads == 5


def test_a_rising_count_slows_the_reads_again() -> None:
    # 3, 2 (fast), 4 (arrivals: slow), 4 (steady: slow), 3 (fast), then idle.
    clock = FakeClock()
    counts = iter([3.0, 2.0, 4.0, 4.0, 3.0, 0.0, 0.0])
    starts: list[float] = []

    def read(timeout: float) -> Reading:
        starts.append(clock.now - T0)
        n = next(counts)
        return Reading(IDLE if n == 0 else BUSY, "vllm", n, (), None, 0.0)

    result = drain(Timeline(5.0, 25.0, 1.0, 1.0), read, t0=T0, clock=clock, sleep=clock.sleep)
    assert starts == pytest.approx([5.0, 6.0, 6.25, 7.25, 8.25, 8.5, 9.5])
    assert (result.outcome, result.reads) == (Outcome.DRAINED, 7)


def test_a_read_without_a_count_takes_the_slow_step() -> None:
    # busy 1 (fast), unknown (no count: I), busy 1 (fast again), idle, idle.
    clock = FakeClock()
    seq = iter([BUSY, UNKNOWN, BUSY, IDLE, IDLE])
    starts: list[float] = []

    def read(timeout: float) -> Reading:
        starts.append(clock.now - T0)
        v = next(seq)
        if v is UNKNOWN:
            return Reading.failed(UNKNOWN, "scripted", 1.0)
        return Reading(v, "vllm", 1.0 if v is BUSY else 0.0, (), None, 0.0)

    result = drain(Timeline(5.0, 25.0, 1.0, 1.0), read, t0=T0, clock=clock, sleep=clock.sleep)
    assert starts == pytest.approx([5.0, 5.25, 6.25, 6.5, 7.5])
    assert result.outcome is Outcome.DRAINED


def test_requests_ending_together_before_any_fall_is_seen_cost_up_to_two_intervals() -> None:
    # What the cadence cannot see: two requests that end inside one interval, with no
    # read between the ends, go from 2 to 0 at the slow step: first idle read up to I
    # after the end, the confirming one I later.
    result, engine = drain_ends([7.05, 7.1])
    assert engine.starts == pytest.approx([5.0, 6.0, 7.0, 8.0, 9.0])
    assert result.elapsed - 7.1 == pytest.approx(1.902)


# -- release at the floor: the server's zero is confirmed I/4 later (CONTRACT §1) -------


@pytest.mark.parametrize("phase", [i / 20 for i in range(20)])
@pytest.mark.parametrize("interval", [1.0, 0.5])
def test_with_the_servers_count_release_within_half_an_interval_at_every_phase(
    phase: float, interval: float
) -> None:
    # As above, with the server's own count answering: the first idle read within
    # I/4 of the idle moment, the confirming read I/4 after it: never later than
    # I/2 (+ the reads' 2 ms each), never before two idle reads.
    idle = 9.0 + phase * interval
    ends = [idle - 2.6 * interval, idle - 1.3 * interval, idle]
    result, engine = drain_ends(ends, interval=interval, server=True)
    assert result.outcome is Outcome.DRAINED
    release = result.elapsed - idle
    assert interval / 4 <= release <= interval / 2 + 0.004 + 1e-9, (release, engine.starts)
    assert engine.counts[-2:] == [0, 0] and engine.counts[-3] > 0  # two idle reads, no more
    assert engine.starts[-1] - engine.starts[-2] == pytest.approx(interval / 4)


def test_an_idle_engine_with_the_servers_count_is_released_a_quarter_interval_after_s() -> None:
    result, engine = drain_ends([], server=True)
    assert engine.starts == pytest.approx([5.0, 5.25])
    assert result.elapsed == pytest.approx(5.252)


def test_a_zero_from_the_gauges_alone_is_confirmed_one_interval_later() -> None:
    # The same engine without the server's count: the confirming read one I later.
    result, engine = drain_ends([], server=False)
    assert engine.starts == pytest.approx([5.0, 6.0])
    assert (result.outcome, result.reads) == (Outcome.DRAINED, 2)


def test_several_targets_confirm_fast_only_when_every_one_answers_the_server() -> None:
    """A round whose one target answered only the gauges: the slow confirmation."""
    clock = FakeClock()
    starts: list[float] = []
    server = Reading(IDLE, "vllm", 0.0, (), None, 0.0, signals=Signals(0.0, 0.0))
    gauges = Reading(IDLE, "vllm", 0.0, (), None, 0.0, signals=Signals(0.0))
    connections = Reading(IDLE, "vllm", 0.0, (), None, 0.0, signals=Signals(0.0, None, 0.0))

    def round_of(*parts: Reading) -> Reading:
        named = tuple((f"t{i}", p) for i, p in enumerate(parts))
        return Reading(IDLE, "vllm", 0.0, (), None, 0.0, parts=named)

    for parts, step in (((server, gauges), 1.0), ((server, connections), 0.25)):
        starts.clear()

        def read(timeout: float, parts: tuple[Reading, ...] = parts) -> Reading:
            starts.append(clock.now - clock.start)
            return round_of(*parts)

        clock.start = clock.now
        drain(Timeline(5.0, 25.0, 1.0, 1.0), read, t0=clock.now, clock=clock, sleep=clock.sleep)
        assert starts == pytest.approx([5.0, 5.0 + step])


def test_a_read_d_cut_short_leaves_the_result_the_read_before_it() -> None:
    """The read at 7.0 s has 0.3 s to D and times out there: it says only that D came.
    The result keeps the busy read before it (its count, its reason), as the summary
    and the termination message say it; the read is still counted."""
    result, script, _ = run([BUSY], deadline=7.3, read_timeout=1.0, took=0.5)
    assert script.starts == pytest.approx([5.0, 6.0, 7.0])
    assert (result.outcome, result.reads) == (Outcome.DEADLINE, 3)
    assert result.last is not None
    assert (result.last.verdict, result.last.in_flight) == (BUSY, 3.0)


def test_a_wrong_target_held_to_d_ends_misconfigured_not_deadline() -> None:
    """Issue 59 (CONTRACT §2, §5): held to D like the sleep, then its own outcome, so that
    "fix the flags" is told from "raise G"; a wrong target that started answering and
    is busy at D ends `deadline`, as any busy engine."""
    from drainhook.reading.failures import MISCONFIGURED

    wrong = Reading.failed(UNKNOWN, f"{MISCONFIGURED}: HTTP 404: no metrics here", 1.0)
    several = Reading.failed(UNKNOWN, f"http://a/metrics: {MISCONFIGURED}: HTTP 404", 1.0)
    doubt = Reading.failed(UNKNOWN, "HTTP 503", 1.0)
    busy = Reading(BUSY, "vllm", 2.0, (), None, 1.0)
    for readings, outcome in (
        ([wrong], Outcome.MISCONFIGURED),
        ([several], Outcome.MISCONFIGURED),
        ([wrong, busy], Outcome.DEADLINE),
        ([busy, wrong], Outcome.MISCONFIGURED),
        ([wrong, doubt], Outcome.DEADLINE),
    ):
        clock = FakeClock()
        timeline = Timeline(5.0, 25.0, 1.0, 1.0)
        got = drain(timeline, Replay(clock, readings), t0=T0, clock=clock, sleep=clock.sleep)
        assert (got.outcome, got.elapsed) == (outcome, pytest.approx(25.0)), readings


class Replay:
    """Readings in turn (the last repeats), each taking 2 ms on the clock."""

    def __init__(self, clock: FakeClock, readings: Sequence[Reading]) -> None:
        self.clock, self.readings = clock, list(readings)

    def __call__(self, _left: float) -> Reading:
        self.clock.now += 0.002
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]
