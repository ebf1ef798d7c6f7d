"""The hook (or any command) as a subprocess, measured: exit code, output, the
wall time from spawn to exit, and how long the machine kept it off the CPU.

`Run.starved` is what tests/conftest.py's `late()` forgives in an upper bound
on time; `base_env` is the clean environment every run starts from."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

from tests.support.podns import HookOutput

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Run(HookOutput):
    code: int
    stdout: str
    stderr: str
    elapsed: float
    # Seconds the process (its main thread), and this test waiting for it, sat
    # runnable on a run queue while the machine gave the CPU to others. An upper
    # bound on time is asserted as `bound + starved`: what a loaded machine adds
    # is forgiven, what the hook spends running or sleeping is not. 0 on an idle
    # machine, or where the kernel keeps no such count.
    starved: float = 0.0


Hook = Callable[..., Run]

# `wait` fails safe (CONTRACT §5): a usage error holds until D before it exits. A
# case that checks only the error's line and code caps D at 0 with this (the
# fail-safe reads --max-wait plainly), so that it ends at once.
NO_HOLD = ("--max-wait", "0")


def run_delay(task: str = "thread-self") -> float:
    """Seconds `task` (a /proc entry: a pid, `thread-self`) has waited on a run queue
    while runnable (the second field of its schedstat); 0.0 if the kernel keeps none."""
    try:
        with open(f"/proc/{task}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def measure(
    argv: list[str],
    *,
    env: Mapping[str, str],
    stdin: int | None = subprocess.DEVNULL,
    timeout: float = 60,
    cwd: Path | None = None,
) -> Run:
    """Run argv to its end, as `subprocess.run(..., text=True)` would: exit code,
    output, spawn-to-exit seconds, and how long it and this thread were kept off
    the CPU (`Run.starved`). The child's count is read while it is a zombie
    (waitid with WNOWAIT), before it is reaped."""
    before = run_delay()
    start = time.monotonic()
    proc = subprocess.Popen(
        argv, env=dict(env), stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd
    )
    output: dict[str, bytes] = {}

    def drain(name: str, stream: IO[bytes]) -> None:
        with stream:
            output[name] = stream.read()

    assert proc.stdout is not None and proc.stderr is not None
    readers = [
        threading.Thread(target=drain, args=("out", proc.stdout), daemon=True),
        threading.Thread(target=drain, args=("err", proc.stderr), daemon=True),
    ]
    for reader in readers:
        reader.start()
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        proc.kill()

    killer = threading.Timer(timeout, kill)
    killer.start()
    try:
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    finally:
        killer.cancel()
    elapsed = time.monotonic() - start
    starved = run_delay(str(proc.pid)) + run_delay() - before
    code = proc.wait()
    for reader in readers:
        reader.join()
    if timed_out.is_set():
        raise subprocess.TimeoutExpired(argv, timeout, output.get("out"), output.get("err"))
    text = [
        output[name].decode().replace("\r\n", "\n").replace("\r", "\n") for name in ("out", "err")
    ]
    return Run(code, text[0], text[1], elapsed, starved)


def base_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A clean environment: no DRAINHOOK_* from the caller, a C locale, and not
    inside a Pod (a test that wants one sets KUBERNETES_SERVICE_HOST, in a `pod`).
    The hook logs as it does by default (a read line when something changed,
    CONTRACT §5); a case that counts reads passes `READS`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DRAINHOOK_", "KUBERNETES_"))}
    env.pop("PYTHONWARNINGS", None)
    env.update(extra or {})
    return env


READS = {"DRAINHOOK_LOG_READS": "all"}  # every read logged: for a case that counts them


def container() -> list[str]:
    """The prefix that runs a command as a container of its own runs: a new PID
    namespace, /proc its own (a user namespace too when not root). The hook then
    sees no process of the test's, as in a Pod it sees none of another container's:
    a refused target with the test's listeners around is an engine gone (CONTRACT §2)."""
    prefix = _container()
    if prefix is None:
        pytest.skip("no PID namespace (`unshare -p`) can be made here")
    return prefix


@functools.cache
def _container() -> list[str] | None:
    unshare = shutil.which("unshare")
    flags = ["-pf", "--mount-proc"] if os.geteuid() == 0 else ["-rpf", "--mount-proc"]
    if unshare is None:
        return None
    if subprocess.run([unshare, *flags, "true"], capture_output=True, check=False).returncode:
        return None
    return [unshare, *flags]
