"""drainhook against SGLang 0.5.23's opt-in Rust HTTP server (SGLANG_RUST_SERVER=1).

One engine, the cases in order: two streams drained (its /metrics has no
server count, so /v1/loads and the connections decide, and there is no 2 s
tail); what each signal shows of a request being prefilled (nothing: the
server sends the response's headers at once and counts nothing itself); last,
SIGTERM with two streams in flight (the conformance episode
`sglang-rust-sigterm`): it cuts them at once and exits. Ends the engine.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.conftest import READ_LATE, late
from tests.live.conftest import Hook, wait_for
from tests.live.streams import Streams
from tests.live_sglang.engine import LiveSglang
from tests.live_sglang.looks import COMPLETIONS, Request, loads, long_prompt
from tests.support import conformance
from tests.support.process import run_delay

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def engine(start_engine: Callable[..., Any]) -> Iterator[LiveSglang]:
    with start_engine("rust", rust=True) as live:
        yield live


def test_its_metrics_carry_no_server_count(engine: LiveSglang) -> None:
    """/metrics and /metrics/native: the same scheduler series, no http_requests_*."""
    names = {k.split("{", 1)[0] for k in engine.metrics()}
    assert "sglang:num_running_reqs" in names
    assert not {n for n in names if n.startswith("sglang:http_requests")}, names
    status, native = engine.get("/metrics/native")
    assert status == 200 and b"sglang:http_requests_active" not in native


def test_streams_drained(hook: Hook, engine: LiveSglang, record: Any) -> None:
    """`wait --grace 30 --settle 2` (I = 1 s) with two streams: both complete, and
    the hook returns within I + 0.05 s of the last byte (gauges and connections).
    This server takes no `ignore_eos` or `min_tokens`: a stream may end on the
    model's end-of-sequence token before its length."""
    streams = Streams(engine)
    streams.send(4.0)
    streams.send(6.0)
    wait_for(lambda: loads(engine) == 2, 15, "two running requests")
    before = run_delay()
    run = hook("wait", "--url", engine.url(), "--grace", "30", "--settle", "2")
    returned = time.monotonic()
    starved = run_delay() - before + run.starved
    for s in streams.join():
        ended = (s.kind, s.done, s.error, s.finish in ("length", "stop"))
        assert ended == ("pending", True, False, True), s
    assert run.code == 0 and "outcome=drained" in run.stderr, run.stderr
    release = returned - max(s.last_byte or 0.0 for s in streams.ended)
    assert 0 < release <= late(1.0 + 0.05, READ_LATE, starved), (release, run.stderr)
    record("sglang rust: streams drained", release_s=round(release, 3))


def test_a_request_being_prefilled_is_seen_by_no_signal(
    hook: Hook, engine: LiveSglang, record: Any
) -> None:
    """What the Rust server shows while a 1,800-token prompt is prefilled: its
    headers went out at once, the scheduler counts nothing yet and no server count
    exists, so probe reads idle (docs/engines.md says what this means for a drain)."""
    request = Request(engine, COMPLETIONS, 40, long_prompt())
    wait_for(lambda: request.headers is not None, 10, "the response's headers")
    run = hook("probe", "--json", "--url", engine.url())
    in_prefill = request.first is None
    request.join()
    out = request.out  # this server may end it with "stop" before its length
    assert (out.status, out.done, out.finish in ("length", "stop")) == (200, True, True), out
    assert request.first is not None and request.headers is not None
    seen = json.loads(run.stdout)
    record(
        "sglang rust: prefill",
        headers_s=round(request.headers - request.sent, 3),
        prefill_s=round(request.first - request.sent, 3),
        probe_in_prefill=in_prefill,
        probe={k: v for k, v in seen.items() if k not in conformance.PROBE_LEFT_OUT},
    )
    assert request.first - request.headers > 0.5, "headers sent with the first token"
    assert in_prefill, "the prefill ended before probe read"
    assert (run.code, seen["verdict"], seen["in_flight"]) == (0, "idle", 0), seen


def test_sigterm_with_streams_in_flight(engine: LiveSglang, record: Any) -> None:
    episode = conformance.EPISODES["sglang-rust-sigterm"]
    seen = conformance.run(engine, episode)
    record("sglang rust: SIGTERM with streams in flight", **conformance.numbers(seen))
    assert conformance.mismatch(seen, episode) == [], conformance.summary(seen)
    for kind, end in zip(seen.kinds(), seen.stream_ends, strict=True):
        if kind == "complete":  # over (on its own "stop") before SIGTERM, never after
            assert end is not None and end <= late(0.0, READ_LATE), conformance.summary(seen)
