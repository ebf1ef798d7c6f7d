"""A hostile case's hook process, measured through a small launcher: exit code,
output, spawn-to-exit seconds, starvation (as `Run.starved`) and peak RSS, read
from the launcher's wait4 of it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.logs import fields
from tests.support.process import ROOT, base_env

PEAK_RSS_LIMIT = 60_000_000  # bytes


# Spawns argv[2:] and reaps it with wait4, reporting its exit status, its own
# peak RSS (KiB), spawn-to-exit seconds and the seconds it and this launcher
# waited runnable for a CPU (schedstat's run_delay, the hook's read while it is a
# zombie) on the file descriptor argv[1]. This launcher is small, so the hook's
# high-water mark is its own.
LAUNCHER = """
import os, sys, time
def run_delay(task):
    try:
        with open(f"/proc/{task}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0
fd = int(sys.argv[1])
os.set_inheritable(fd, False)
before = run_delay("thread-self")
start = time.monotonic()
pid = os.posix_spawnp(sys.argv[2], sys.argv[2:], os.environ)
os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
wall = time.monotonic() - start
starved = run_delay(pid) + run_delay("thread-self") - before
_, status, usage = os.wait4(pid, 0)
code = os.waitstatus_to_exitcode(status)
os.write(fd, f"{code} {usage.ru_maxrss} {wall:.6f} {starved:.6f}".encode())
"""


@dataclass(frozen=True)
class Measured:
    """One hook process: exit code, output, spawn-to-exit seconds, peak RSS in
    bytes, and the seconds the machine kept it runnable but off the CPU (see
    `tests.support.process.Run.starved`: upper bounds on time add it)."""

    code: int
    stdout: str
    stderr: str
    wall: float
    peak_rss: int
    starved: float = 0.0

    @property
    def lines(self) -> list[str]:
        return self.stderr.splitlines()

    @property
    def summary(self) -> dict[str, str]:
        found = [line for line in self.lines if " outcome=" in line]
        assert found, f"no summary line (exit {self.code}) in stderr:\n{self.stderr}"
        return fields(found[-1])

    @property
    def reads(self) -> list[dict[str, str]]:
        return [fields(line) for line in self.lines if " read=" in line and " verdict=" in line]

    @property
    def elapsed(self) -> float:
        """The hook's own elapsed seconds, from its process start (the summary line)."""
        return float(self.summary["elapsed"])


def spawn_measured(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 30,
    cwd: Path | None = None,
) -> Measured:
    """Run argv through the launcher; its output captured, its peak RSS measured."""
    r, w = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", LAUNCHER, str(w), *argv],
            pass_fds=(w,),
            env=dict(env) if env is not None else base_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd or ROOT,
        )
    finally:
        os.close(w)
    with os.fdopen(r, "rb") as report:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()  # the launcher; the hook, orphaned, ends at its deadline
            out, err = proc.communicate()
            pytest.fail(f"the hook ran past {timeout} s:\n{err}")
        code, rss_kib, wall, starved = report.read().split()
    return Measured(int(code), out, err, float(wall), int(rss_kib) * 1024, float(starved))
