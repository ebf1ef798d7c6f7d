"""t0 is the process's start as the kernel records it.

A child is forked between two readings of the clock, so its start is known to
lie between them; the clock is then moved on by a fake offset (no real wait),
and the age and start the hook computes must land where that start says, to a
clock tick (the kernel keeps starts in ticks, rounded down). A broken clock
(the wrong /proc field, the wrong unit, the wrong clock, `now` for the start)
lands seconds away.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from drainhook.hook.clock import process_age, start_time
from tests.conftest import READ_LATE, SPAWN_LATE, late
from tests.support.process import base_env, measure, run_delay

TICK = 1 / os.sysconf("SC_CLK_TCK")
BOOTTIME = time.CLOCK_BOOTTIME
LATER = 7.5  # seconds the fake clock moves on after the fork


@pytest.fixture
def child() -> Iterator[tuple[subprocess.Popen[bytes], float, float]]:
    """A sleeping child, and the boot-time clock just before and after its fork."""
    before = time.clock_gettime(BOOTTIME)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    after = time.clock_gettime(BOOTTIME)
    try:
        yield proc, before, after
    finally:
        proc.kill()
        proc.wait()


def move_clocks_on(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """time.monotonic and the boot-time clock, both `seconds` ahead of the real ones."""
    real_gettime, real_monotonic = time.clock_gettime, time.monotonic
    monkeypatch.setattr(
        time, "clock_gettime", lambda clk: real_gettime(clk) + (seconds if clk == BOOTTIME else 0)
    )
    monkeypatch.setattr(time, "monotonic", lambda: real_monotonic() + seconds)


def test_age_of_a_child_is_the_time_since_its_fork(
    child: tuple[subprocess.Popen[bytes], float, float], monkeypatch: pytest.MonkeyPatch
) -> None:
    proc, before, after = child
    move_clocks_on(monkeypatch, LATER)
    earliest = time.clock_gettime(BOOTTIME) - after
    age = process_age(proc.pid)
    latest = time.clock_gettime(BOOTTIME) - before + TICK
    assert age is not None
    assert earliest <= age <= latest  # exact: a bracket of two clock readings and a tick


def test_an_age_past_the_believable_bound_is_none(
    child: tuple[subprocess.Popen[bytes], float, float], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over 30 s old (a time namespace, a /proc that lies) is not believed: t0 is now."""
    proc, before, after = child
    real_gettime = time.clock_gettime
    # Moved on so that the child is about 28 s old (more by however long this
    # thread takes to ask): still believed.
    at = real_gettime(BOOTTIME)
    move_clocks_on(monkeypatch, 28.0 - (at - before))
    near = process_age(proc.pid)
    late = real_gettime(BOOTTIME) - at
    assert near is not None and 28.0 - (after - before) <= near <= 28.0 + late + TICK
    monkeypatch.undo()
    move_clocks_on(monkeypatch, 31.0)
    assert process_age(proc.pid) is None
    now = time.monotonic()
    assert now <= start_time(proc.pid) <= time.monotonic()


def test_start_time_of_a_child_is_its_fork_on_the_monotonic_clock(
    child: tuple[subprocess.Popen[bytes], float, float], monkeypatch: pytest.MonkeyPatch
) -> None:
    proc, before, after = child
    waited = run_delay()
    # Where the boot-time bracket lies on time.monotonic()'s scale (the two clocks
    # differ by the time the machine spent suspended, a constant here).
    offset = time.monotonic() - time.clock_gettime(BOOTTIME)
    move_clocks_on(monkeypatch, LATER)
    t0 = start_time(proc.pid)
    # Each scale is read twice, a moment apart: 10 ms, and any time this thread
    # then waited for a CPU, cover those moments.
    starved = run_delay() - waited
    slack = 0.01 + starved
    assert before + offset - TICK - slack <= t0 <= late(after + offset, READ_LATE, starved)
    assert time.monotonic() - t0 >= LATER


def test_a_fresh_process_measures_its_own_start_up() -> None:
    # A child sleeps 0.3 s before asking; its age must include that sleep.
    code = (
        "import time; time.sleep(0.3); "
        "from drainhook.hook.clock import process_age; print(process_age())"
    )
    run = measure([sys.executable, "-c", code], env=base_env())
    assert run.code == 0, run.stderr
    age = float(run.stdout)
    assert 0.3 <= age <= late(run.elapsed, TICK)  # the process start, in whole ticks
    assert age < late(0.3, SPAWN_LATE, run.starved)


def test_unknown_process_falls_back_to_now() -> None:
    before = time.monotonic()
    assert start_time(2**22 + os.getpid()) >= before
