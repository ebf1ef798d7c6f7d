"""The SGLang tier's fixtures: a live SGLang 0.5.23 (its CPU engine) and the packaged hook.

Selected only by `pytest --live` (scripts/live-sglang, which installs SGLang into
its own virtual environment, makes the model and names both here):

- DRAINHOOK_SGLANG_PYTHON: the python of that environment (it runs the engine);
- DRAINHOOK_LIVE_MODEL, DRAINHOOK_BINARY, DRAINHOOK_LIVE_RESULTS: as for the
  vLLM tier (tests/live/conftest.py, whose fixtures these are).

Every module starts its engine (26-35 s on an idle machine) and ends it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.live.conftest import (  # noqa: F401 (fixtures and the report, shared)
    _required,
    drainhook,
    hook,
    pytest_terminal_summary,
    spawn_hook,
)
from tests.live.conftest import engine_logs as engine_logs
from tests.live.conftest import live_model as live_model
from tests.live.conftest import record as record
from tests.live_sglang.engine import LiveSglang
from tests.live_sglang.standin.sgl_kernel import CALLED


@pytest.fixture(scope="session")
def sglang_python() -> str:
    return _required("DRAINHOOK_SGLANG_PYTHON")


@pytest.fixture(scope="session")
def start_engine(
    sglang_python: str, live_model: Path, engine_logs: Path, record: Callable[..., None]
) -> Callable[..., Any]:
    """start_engine(name, *flags, rust=False): a context manager over one started SGLang;
    on leaving, the log must not show the sgl_kernel stand-in called."""

    @contextlib.contextmanager
    def started(name: str, *flags: str, rust: bool = False) -> Iterator[LiveSglang]:
        log = engine_logs / f"sglang-{name}.log"
        engine = LiveSglang(sglang_python, live_model, *flags, log=log, rust=rust)
        try:
            engine.start()
            record(
                f"sglang {name}: start", startup_s=round(engine.startup or 0, 2), rate=engine.rate
            )
            yield engine
        finally:
            engine.kill()
            assert CALLED not in log.read_text(errors="replace"), engine.tail()

    return started
