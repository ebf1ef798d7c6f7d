"""t0 is the process's start as the kernel records it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from drainhook.clock import process_age, start_time


def test_age_of_this_process_is_its_runtime() -> None:
    age = process_age()
    assert age is None or age >= 0  # None past the believable bound (a long test run)


def test_a_fresh_process_measures_its_own_start_up() -> None:
    # A child sleeps 0.3 s before asking; its age must include that sleep.
    code = (
        "import time; time.sleep(0.3); "
        "from drainhook.clock import process_age; print(process_age())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    age = float(out.stdout)
    assert 0.3 <= age < 3.0


def test_start_time_of_a_child_is_before_now() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        time.sleep(0.3)
        t0 = start_time(proc.pid)
        assert 0.25 <= time.monotonic() - t0 < 3.0
    finally:
        proc.kill()
        proc.wait()


def test_unknown_process_falls_back_to_now() -> None:
    before = time.monotonic()
    assert start_time(2**22 + os.getpid()) >= before
