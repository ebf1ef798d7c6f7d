"""The suite's fixtures, its hooks and its one timing tolerance; what the tests
share besides is in tests/support/.

`hook` runs `drainhook ARGS...` as a subprocess and returns a `Run`
(tests/support/process.py) with the exit code, stdout, stderr and the wall time
from spawn to exit. It is parametrized over the entry points: the installed
package (`python -m drainhook`) always, and the PyInstaller directory build when
DRAINHOOK_BINARY names it (scripts/test sets it to the build it made).

`pod` runs the same entry point inside a new, empty network namespace beside
scripted listeners (tests/support/podns.py): what a test of listener discovery
needs, so that the hook never sees this machine's own listening ports.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence

import pytest

from tests.support.podns import Pod, PodRun, Server, netns, run_pod
from tests.support.process import READS, Hook, Run, base_env, container, measure

# ---- one timing tolerance ---------------------------------------------------------
#
# Every upper bound on time in the suite is `late(bound, LEVEL, starved)`: what the
# contract or the timeline fixes, plus what a busy machine may add to that kind of
# measure, plus the time the process (and the test waiting on it) is measured to
# have sat runnable off the CPU (`Run.starved`: forgiven, since the hook could not
# run; what it spends running or sleeping is not). Lower bounds get nothing: a
# machine can delay an instant, never bring it forward, so "never before S" is
# asserted as the contract fixes it (less one clock tick where the clock is that
# coarse); it is not a tolerance. tests/test_timing_rule.py fails on an upper bound
# that does not come from late(). The levels, by where the time is measured:
READ_LATE = 0.15  # one read, timed in this process less this thread's starvation
HOOK_LATE = 0.3  # an instant the hook measures itself (the summary's elapsed, from t0)
SPAWN_LATE = 0.5  # spawn to exit from outside: interpreter start-up, imports and the exit too
# A thread of this process woken from a sleep (the simulated engine's, a loopback
# server's), timed from this process: what the scheduler may add to its wake-up.
WAKE_LATE = 0.25
# A run in a new network namespace (tests/support/podns.py) measures no starvation: its
# bounds take this level instead, whatever they measure.
POD_LATE = 1.0


def late(bound: float, level: float, starved: float = 0.0) -> float:
    """The upper bound a timing assertion checks (see the levels above)."""
    return bound + level + starved


def _entry_points() -> list[tuple[str, list[str]]]:
    points = [("python", [sys.executable, "-m", "drainhook"])]
    binary = os.environ.get("DRAINHOOK_BINARY")
    if binary:
        points.append(("binary", [binary]))
    return points


@pytest.fixture(params=[p[1] for p in _entry_points()], ids=[p[0] for p in _entry_points()])
def entry(request: pytest.FixtureRequest) -> list[str]:
    """The argv prefix of one entry point, for tests that manage the process."""
    return list(request.param)


@pytest.fixture
def hook(entry: list[str], request: pytest.FixtureRequest) -> Hook:
    """Run the hook with args, as a container of its own (`container`); env adds to a
    clean environment (every read logged in a case marked `reads`)."""
    command = [*container(), *entry]
    reads = _reads(request)

    def run(
        *args: str,
        env: Mapping[str, str] | None = None,
        replace_env: Mapping[str, str] | None = None,
        timeout: float = 60,
        stdin: int | None = subprocess.DEVNULL,
    ) -> Run:
        full_env = (
            dict(replace_env) if replace_env is not None else base_env({**reads, **(env or {})})
        )
        return measure([*command, *args], env=full_env, stdin=stdin, timeout=timeout)

    return run


def _reads(request: pytest.FixtureRequest) -> dict[str, str]:
    """The case counts reads (`@pytest.mark.reads`): the hook logs every one."""
    return READS if request.node.get_closest_marker("reads") else {}


def _pod_prefix() -> list[str]:
    prefix = netns()
    if prefix is None:
        pytest.skip("no empty network namespace (`unshare -n`) can be made here")
    return prefix


@pytest.fixture
def pod(entry: list[str], request: pytest.FixtureRequest) -> Pod:
    """Run the hook (each entry point) with args in a new network namespace beside
    the servers given (tests/support/podns.py), in a PID namespace of its own, as a
    container beside the servers' (theirs: the harness's): pod(servers, *args, env=,
    timeout=, addresses=)."""
    prefix = _pod_prefix()
    reads = _reads(request)

    def run(
        servers: Sequence[Server],
        *args: str,
        env: Mapping[str, str] | None = None,
        timeout: float = 60,
        addresses: Sequence[str] = (),
    ) -> PodRun:
        return run_pod(
            servers,
            [*container(), *entry, *args],
            prefix=prefix,
            env=base_env({**reads, **(env or {})}),
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


@pytest.fixture
def no_drainhook_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No DRAINHOOK_* variable from the caller: for the cases that run the CLI in this
    process (`pytestmark = pytest.mark.usefixtures("no_drainhook_env")`)."""
    for name in list(os.environ):
        if name.startswith("DRAINHOOK_"):
            monkeypatch.delenv(name)


# ---- the `slow` and `live` markers -------------------------------------------------
#
# One rule, applied here rather than by hand: a case that runs the hook as a real
# process (it uses one of these fixtures) is `slow`; `pytest -m "not slow"` runs the
# rest, the in-process cases, in seconds.
#
# tests/live/ and tests/live_sglang/ run drainhook against a live vLLM and a live
# SGLang that scripts/live-vllm and scripts/live-sglang install and start; their
# cases carry the `live` marker. They are deselected (not
# skipped) unless `--live` is given, and `--live` runs nothing else.
PROCESS_FIXTURES = frozenset({"entry", "hook", "pod", "pod_command"})
# The lab: the simulated engine, its conformance to the live ones and the rehearsal
# run on it (`lab`): every full run, never a contributor's `scripts/test --fast`.
LAB = frozenset(
    {"test_sim", "test_sim_windows", "test_conformance", "test_rehearsal", "test_stall_rehearsal"}
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--live", action="store_true", help="run only the live tier (tests/live/)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        if item.path.stem in LAB:
            item.add_marker(pytest.mark.lab)
    live = bool(config.getoption("--live"))
    keep = [item for item in items if (item.get_closest_marker("live") is not None) == live]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in keep])
        items[:] = keep


# ---- no silent skips -------------------------------------------------------------
#
# Every skip prints its reason (`-rs` in pyproject.toml). Under CI=true as root no
# skip is expected: CI runs as root with unshare, strace, objdump and setpriv, and
# builds the binary, so every case can run there; a skip means a case did not run,
# and the run fails with the list of what skipped and why. Not root (a pull
# request's tiers), the root cases skip, each saying why.


def _in_ci() -> bool:
    ci = os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")
    return ci and os.geteuid() == 0


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
