"""drainhook against a live vLLM while a request's body is still uploading.

The conformance episode `run_upload` (tests/conformance.py): a client uploads a
4 KB completion request over 4 s, then reads a 2 s stream; `drainhook wait
--settle 0.5 --interval 0.5` starts 0.2 s into the upload. The engine is held
to the window table (mid-upload: gauges 0, `/load` 0, the connection with bytes
in and none out), and the hook must hold until the stream's last byte and
release within 2I + 0.3 s of it. Three engines, one per module parameter: the
default, `--enable-server-load-tracking`, and `--api-server-count 2` with it
(two API-server processes on one port: one GET of /load reaches one). Each
engine gets one SIGTERM at its end (the fixture's kill).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.conftest import SPAWN_LATE, late
from tests.live.engine import LiveVllm
from tests.support import conformance
from tests.support.process import base_env

pytestmark = pytest.mark.live

ENGINES = {
    "upload-default": ((), False, 1),
    "upload-load-tracking": (("--enable-server-load-tracking",), True, 1),
    "upload-api-servers-2": (
        ("--enable-server-load-tracking", "--api-server-count", "2"),
        True,
        2,
    ),
}
INTERVAL = 0.5


@pytest.fixture(scope="module", params=list(ENGINES))
def engine(
    request: pytest.FixtureRequest, start_engine: Callable[..., Any]
) -> Iterator[tuple[str, LiveVllm]]:
    name = request.param
    with start_engine(name, *ENGINES[name][0]) as live:
        yield name, live


@pytest.mark.timeout(300)
def test_an_uploading_request_is_held_until_its_stream_ends(
    drainhook: list[str], engine: tuple[str, LiveVllm], record: Any
) -> None:
    name, live = engine
    _, tracking, servers = ENGINES[name]
    seen = conformance.run_upload(live, drainhook, base_env())
    numbers = conformance.upload_numbers(seen)
    record(f"{name}: upload while the hook starts", **numbers)
    assert conformance.upload_differences(seen, tracking, servers) == [], numbers
    assert seen.hook_code == 0 and '"outcome": "drained"' in seen.hook_stderr, seen.hook_stderr
    assert seen.last_byte is not None and seen.hook_returned is not None
    release = seen.hook_returned - seen.last_byte
    assert 0 < release <= late(2 * INTERVAL + 0.3, SPAWN_LATE, seen.starved), numbers
