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

import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

# netns: the one network-namespace helper, kept in tests/podns.py (re-exported).
from tests.podns import PodRun, Server, run_pod
from tests.podns import netns as netns

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str
    elapsed: float

    @property
    def lines(self) -> list[str]:
        return self.stderr.splitlines()

    @property
    def summary(self) -> str:
        found = [line for line in self.lines if "outcome=" in line or '"summary"' in line]
        assert found, f"no summary line in stderr:\n{self.stderr}"
        return found[-1]


def timeline_warning(line: str) -> bool:
    """A warning `wait` logs at its start about its own timeline (`plan`'s rules, with a
    code): the shrunk timelines of the tests get some."""
    if line.startswith("{"):
        return line.startswith('{"event": "warning"') and '"code": ' in line
    return line.startswith("drainhook warning=") and " code=" in line


def hook_lines(lines: list[str]) -> list[str]:
    """The lines of a run but its timeline warnings: reads, summary, other warnings."""
    return [line for line in lines if not timeline_warning(line)]


def entry_points() -> list[tuple[str, list[str]]]:
    points = [("python", [sys.executable, "-m", "drainhook"])]
    binary = os.environ.get("DRAINHOOK_BINARY")
    if binary:
        points.append(("binary", [binary]))
    return points


Hook = Callable[..., Run]
Pod = Callable[..., PodRun]


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
        start = time.monotonic()
        proc = subprocess.run(
            [*command, *args],
            env=full_env,
            stdin=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return Run(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)

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
