"""Shared fixtures: the hook as a real subprocess, for every entry point built.

`hook` runs `drainhook ARGS...` as a subprocess and returns a `Run` with the
exit code, stdout, stderr and the wall time from spawn to exit. It is
parametrized over the entry points: the installed package (`python -m
drainhook`) always, and the PyInstaller directory build when
DRAINHOOK_BINARY names it (scripts/test sets it after scripts/build-binary).

`pod` runs the same entry point inside a new, empty network namespace beside
scripted listeners (tests/podns.py): what a test of listener discovery needs,
so that the hook never sees this machine's own listening ports.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

# netns: the one network-namespace helper, kept in tests/podns.py (re-exported).
from tests.podns import HookOutput, PodRun, Server, run_pod
from tests.podns import netns as netns

ROOT = Path(__file__).resolve().parents[1]


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


# ---- one timing tolerance ---------------------------------------------------------
#
# Every upper bound on time in the suite is `late(bound, LEVEL, starved)`: what the
# contract or the timeline fixes, plus what a busy machine may add to that kind of
# measure, plus the time the process (and the test waiting on it) is measured to
# have sat runnable off the CPU (`Run.starved`: forgiven, since the hook could not
# run; what it spends running or sleeping is not). Lower bounds get nothing: a
# machine can delay an instant, never bring it forward. The levels, by where the
# time is measured:
READ_LATE = 0.15  # one read, timed in this process less this thread's starvation
HOOK_LATE = 0.3  # an instant the hook measures itself (the summary's elapsed, from t0)
SPAWN_LATE = 0.5  # spawn to exit from outside: interpreter start-up, imports and the exit too
# A run in a new network namespace (tests/podns.py) measures no starvation: its
# bounds take this level instead, whatever they measure.
POD_LATE = 1.0


def late(bound: float, level: float, starved: float = 0.0) -> float:
    """The upper bound a timing assertion checks (see the levels above)."""
    return bound + level + starved


def timeline_warning(line: str) -> bool:
    """A warning `wait` logs at its start about its own timeline (`plan`'s rules, with a
    code): the shrunk timelines of the tests get some."""
    if line.startswith("{"):
        return line.startswith('{"event": "warning"') and '"code": ' in line
    return line.startswith("drainhook warning=") and " code=" in line


def signal_line(line: str) -> bool:
    """A line saying that one of a target's signals is missing (CONTRACT §2a, said
    once per reason): the test listeners answer vLLM's /load 404 (tests/loopback.py),
    so a vLLM run gets one."""
    if line.startswith("{"):
        return line.startswith('{"event": "signal"')
    return line.startswith("drainhook signal=")


def hook_lines(lines: list[str]) -> list[str]:
    """The lines of a run but its timeline warnings and missing-signal notes: reads,
    summary, other warnings."""
    return [line for line in lines if not timeline_warning(line) and not signal_line(line)]


def fields(line: str) -> dict[str, str]:
    """The key=value pairs of a text log line (a quoted value unquoted)."""
    try:
        words = shlex.split(line)
    except ValueError:  # an unbalanced quote in a hostile server's reason
        words = line.split()
    return dict(word.split("=", 1) for word in words if "=" in word)


def timed_out(read: Mapping[str, object]) -> bool:
    """A read that ran out of time: `unknown`, with `timed out` in its reason (a text
    log line's fields, or a JSON line's object, where the reason may be null)."""
    return read.get("verdict") == "unknown" and "timed out" in str(read.get("reason") or "")


def connections_fit(connections: int, reads: Sequence[Mapping[str, object]]) -> bool:
    """One connection a read: none left open behind a read, no redirect followed. A
    read that ran out of time may have done so before it could connect: one started
    a millisecond before D (the grid follows the first read, so where its last slot
    falls is chance), or one a loaded machine kept off the CPU."""
    late = sum(1 for read in reads if timed_out(read))
    return len(reads) - late <= connections <= len(reads)


def entry_points() -> list[tuple[str, list[str]]]:
    points = [("python", [sys.executable, "-m", "drainhook"])]
    binary = os.environ.get("DRAINHOOK_BINARY")
    if binary:
        points.append(("binary", [binary]))
    return points


Hook = Callable[..., Run]
Pod = Callable[..., PodRun]


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
    inside a Pod: a CI job that runs in one has KUBERNETES_SERVICE_HOST set,
    which turns listener discovery on, and the hook must never read the CI
    machine's own listeners (a test that wants it sets it, in a `pod`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DRAINHOOK_", "KUBERNETES_"))}
    env.pop("PYTHONWARNINGS", None)
    env.update(extra or {})
    return env


@pytest.fixture(params=[p[1] for p in entry_points()], ids=[p[0] for p in entry_points()])
def entry(request: pytest.FixtureRequest) -> list[str]:
    """The argv prefix of one entry point, for tests that manage the process."""
    return list(request.param)


@pytest.fixture
def hook(entry: list[str]) -> Hook:
    """Run the hook with args; env adds to a clean environment."""
    command = entry

    def run(
        *args: str,
        env: Mapping[str, str] | None = None,
        replace_env: Mapping[str, str] | None = None,
        timeout: float = 60,
        stdin: int | None = subprocess.DEVNULL,
    ) -> Run:
        full_env = dict(replace_env) if replace_env is not None else base_env(env)
        return measure([*command, *args], env=full_env, stdin=stdin, timeout=timeout)

    return run


def _pod_prefix() -> list[str]:
    prefix = netns()
    if prefix is None:
        pytest.skip("no empty network namespace (`unshare -n`) can be made here")
    return prefix


@pytest.fixture
def pod(entry: list[str]) -> Pod:
    """Run the hook (each entry point) with args in a new network namespace beside
    the servers given (tests/podns.py): pod(servers, *args, env=, timeout=, addresses=)."""
    prefix = _pod_prefix()

    def run(
        servers: Sequence[Server],
        *args: str,
        env: Mapping[str, str] | None = None,
        timeout: float = 60,
        addresses: Sequence[str] = (),
    ) -> PodRun:
        return run_pod(
            servers,
            [*entry, *args],
            prefix=prefix,
            env=base_env(env),
            timeout=timeout,
            addresses=addresses,
        )

    return run


@pytest.fixture
def pod_command() -> Pod:
    """Run any command in a new network namespace beside the servers given:
    pod_command(servers, argv, env=, timeout=)."""
    prefix = _pod_prefix()

    def run(
        servers: Sequence[Server],
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        timeout: float = 60,
    ) -> PodRun:
        return run_pod(servers, command, prefix=prefix, env=base_env(env), timeout=timeout)

    return run


# ---- the `slow` and `live` markers -------------------------------------------------
#
# One rule, applied here rather than by hand: a case that runs the hook as a real
# process (it uses one of these fixtures) is `slow`; `pytest -m "not slow"` runs the
# rest, the in-process cases, in seconds.
#
# tests/live/ runs drainhook against a live vLLM that scripts/live-vllm installs
# and starts; its cases carry the `live` marker. They are deselected (not
# skipped) unless `--live` is given, and `--live` runs nothing else.
PROCESS_FIXTURES = frozenset({"entry", "hook", "pod", "pod_command"})


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--live", action="store_true", help="run only the live tier (tests/live/)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    live = bool(config.getoption("--live"))
    keep = [item for item in items if (item.get_closest_marker("live") is not None) == live]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in keep])
        items[:] = keep


# ---- no silent skips -------------------------------------------------------------
#
# Every skip prints its reason (`-rs` in pyproject.toml). Under CI=true no skip is
# expected: CI runs as root with unshare, strace, objdump and setpriv, and builds
# the binary, so every case can run there; a skip means a case did not run, and
# the run fails with the list of what skipped and why.


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


_SKIPPED: list[str] = []


def _record_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        _SKIPPED.append(f"{report.nodeid}: {reason}")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _record_skip(report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    _record_skip(report)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _in_ci() and _SKIPPED:
        terminalreporter.section("unexpected skips (CI=true allows none)", red=True)
        for line in _SKIPPED:
            terminalreporter.line(line)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _in_ci() and _SKIPPED and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# ---- scheduling priority -----------------------------------------------------------
#
# The integration cases run hooks on timelines of a second or two, against loopback
# servers that are threads of this process: both must get the CPU within a fraction
# of that. On a machine busy with other work a process at the default priority can
# wait seconds for it (the hook's start alone took 2 s at a load of 9 on 2 cores), and
# the case then shows the scheduler, not the hook. So, where it may (root), the suite
# raises its priority and its children inherit it; the other work still runs beside
# it. Time bounds also forgive what the machine still withholds (`Run.starved`).
# DRAINHOOK_TEST_NICE sets the niceness asked for (0: the default priority).

NICE = int(os.environ.get("DRAINHOOK_TEST_NICE", "-10"))


def pytest_configure(config: pytest.Config) -> None:
    if os.getpriority(os.PRIO_PROCESS, 0) > NICE:
        with contextlib.suppress(OSError):  # not permitted: stay as it is
            os.setpriority(os.PRIO_PROCESS, 0, NICE)


def pytest_report_header(config: pytest.Config) -> str:
    return f"niceness: {os.getpriority(os.PRIO_PROCESS, 0)} (DRAINHOOK_TEST_NICE={NICE})"
