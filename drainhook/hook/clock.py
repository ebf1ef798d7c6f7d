"""t0: when the hook process started, on the monotonic clock (CONTRACT §1): the
kernel's start time of the process (/proc/PID/stat, field 22), since the kubelet's
countdown starts before the exec. Start-up and imports then count against the
settle; the directory build's launcher execs in its own process, so t0 is its start.
"""

from __future__ import annotations

import os
import time

# A start more than this far in the past is not believable for a process that
# is only now reaching main (a time namespace, a /proc that lies): use "now".
_MAX_BELIEVABLE_AGE = 30.0


def process_age(pid: int | str = "self") -> float | None:
    """Seconds since the process started, or None when /proc cannot say."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        # comm (field 2) may hold spaces and parentheses: split after its last ')'.
        fields = stat[stat.rindex(b")") + 2 :].split()
        start_ticks = int(fields[19])  # field 22, starttime, in clock ticks since boot
        ticks = os.sysconf("SC_CLK_TCK")
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / ticks
    except (OSError, ValueError, IndexError):
        return None
    return age if 0.0 <= age <= _MAX_BELIEVABLE_AGE else None


def start_time(pid: int | str = "self") -> float:
    """The start of `pid` (default: this process, the hook) on time.monotonic()'s
    scale (now, when unknown)."""
    now = time.monotonic()
    age = process_age(pid)
    return now if age is None else now - age
