"""The live tier's fixtures: a real vLLM (CPU build) and drainhook's packaged binary.

Selected only by `pytest --live` (scripts/live-vllm, which installs vLLM's CPU
build into its own virtual environment, makes the model and names both here):

- DRAINHOOK_LIVE_PYTHON: the python of that environment (it runs the engine);
- DRAINHOOK_LIVE_MODEL: the model directory (scripts/live_model.py);
- DRAINHOOK_BINARY: the packaged hook (scripts/build-binary). Outside CI a
  missing one falls back to `python -m drainhook`; under CI=true it fails.
- DRAINHOOK_LIVE_RESULTS: a JSON-lines file each case appends its numbers to
  (printed at the end of the run too).

Every case runs against an engine started for its module (each start takes
about 20 s on an idle machine): the cases of a module share it, in order, and
its last case sends it SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.live.engine import LiveVllm
from tests.support.process import Run, base_env, measure


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def _required(name: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        pytest.fail(
            f"{name} is not set: the live tiers run through scripts/live-vllm or live-sglang",
            False,
        )
    return value


@pytest.fixture(scope="session")
def live_python() -> str:
    return _required("DRAINHOOK_LIVE_PYTHON")


@pytest.fixture(scope="session")
def live_model() -> Path:
    return Path(_required("DRAINHOOK_LIVE_MODEL"))


@pytest.fixture(scope="session")
def drainhook() -> list[str]:
    """The hook's argv prefix: the packaged binary, as the Pod runs it."""
    binary = os.environ.get("DRAINHOOK_BINARY", "")
    if binary:
        if not os.access(binary, os.X_OK):
            pytest.fail(f"DRAINHOOK_BINARY={binary} is not an executable file", False)
        return [binary]
    if _in_ci():
        pytest.fail(
            "DRAINHOOK_BINARY is not set: under CI=true the live tier runs the build", False
        )
    return [sys.executable, "-m", "drainhook"]


Hook = Callable[..., Run]


@pytest.fixture(scope="session")
def hook(drainhook: list[str]) -> Hook:
    """Run `drainhook ARGS...` to its end (conftest.measure: code, output, wall time)."""

    def run(*args: str, timeout: float = 90) -> Run:
        return measure([*drainhook, *args], env=base_env(), timeout=timeout)

    return run


@pytest.fixture(scope="session")
def spawn_hook(drainhook: list[str]) -> Callable[..., subprocess.Popen[str]]:
    """Start `drainhook ARGS...` and return it running (stderr piped)."""

    def start(*args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*drainhook, *args],
            env=base_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    return start


_RESULTS: list[dict[str, Any]] = []


@pytest.fixture(scope="session")
def record() -> Callable[..., None]:
    """record(case, **numbers): keep a case's measured numbers for the report."""
    path = os.environ.get("DRAINHOOK_LIVE_RESULTS", "")

    def keep(case: str, **numbers: Any) -> None:
        entry = {"case": case, **numbers}
        _RESULTS.append(entry)
        if path:
            with open(path, "a", encoding="utf-8") as out:
                out.write(json.dumps(entry) + "\n")

    return keep


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _RESULTS:
        terminalreporter.section("live engine: measured")
        for entry in _RESULTS:
            terminalreporter.line(json.dumps(entry))


@pytest.fixture(scope="session")
def engine_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = os.environ.get("DRAINHOOK_LIVE_LOGS", "")
    path = Path(where) if where else tmp_path_factory.mktemp("vllm-logs")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def start_engine(
    live_python: str, live_model: Path, engine_logs: Path, record: Callable[..., None]
) -> Callable[..., Any]:
    """start_engine(name, *flags): a context manager over one started, measured engine."""
    import contextlib

    @contextlib.contextmanager
    def started(name: str, *flags: str) -> Iterator[LiveVllm]:
        engine = LiveVllm(live_python, live_model, *flags, log=engine_logs / f"{name}.log")
        try:
            engine.start()
            record(f"{name}: start", startup_s=round(engine.startup or 0, 2), rate=engine.rate)
            yield engine
        finally:
            engine.kill()

    return started


class HookThread:
    """`hook(*args)` run in a thread of the test from now (`start`, monotonic), so
    that the test can act on the engine while the hook waits."""

    def __init__(self, hook: Hook, *args: str) -> None:
        self._done: dict[str, Run] = {}
        self.start = time.monotonic()
        self._thread = threading.Thread(target=lambda: self._done.update(run=hook(*args)))
        self._thread.start()

    def stop_at(self, pid: int, after: float) -> float:
        """SIGSTOP pid `after` s from the hook's start; when it was sent (monotonic)."""
        time.sleep(max(0.0, self.start + after - time.monotonic()))
        os.kill(pid, signal.SIGSTOP)
        return time.monotonic()

    def join(self, timeout: float) -> Run:
        """The hook's run, once it has returned (within timeout s)."""
        self._thread.join(timeout)
        return self._done["run"]


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll check() every 20 ms until it holds; fail naming `what` after timeout s."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.02)
