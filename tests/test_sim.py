"""The simulated engine (drainhook/sim/), over real HTTP on loopback, in this process.

What SIGTERM does to it, path by path, as the demo and the rehearsal rely on:
vLLM with `--shutdown-timeout N` (drains, answers new requests with an empty
`abort` completion, exits as soon as nothing is left, kills what is left at N),
vLLM's default abort, vLLM with several API servers (streams cut, HTTP 500),
and SGLang (its watchdog's grid; /v1/loads live while /metrics lags). Timelines
are shrunk to tenths of a second; each test names the bound it tells a broken
model apart by.
"""

from __future__ import annotations

import contextlib
import http.client
import threading
import time
from collections.abc import Iterator
from typing import Any

from drainhook.exposition import scan
from drainhook.loads import scan_loads
from drainhook.sim import Engine, EngineConfig, Outcome, SimServer, complete
from drainhook.verdict import Verdict
from tests.conftest import base_env

TOKEN = 0.02  # s per streamed event
EXIT = 0.05  # s the process takes to exit once its work is over


def tokens(seconds: float) -> int:
    return round(seconds / TOKEN)


def get(port: int, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


class Streams:
    """Completions sent on threads; each one's outcome and when it ended."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.done: dict[int, tuple[Outcome, float]] = {}
        self._threads: list[threading.Thread] = []

    def send(self, *seconds: float) -> None:
        for s in seconds:
            index = len(self._threads)

            def run(index: int = index, n: int = tokens(s)) -> None:
                got = complete(self.port, {"max_tokens": n, "stream": True}, timeout=10)
                self.done[index] = (got, time.monotonic())

            thread = threading.Thread(target=run, daemon=True)
            self._threads.append(thread)
            thread.start()

    def join(self) -> list[tuple[Outcome, float]]:
        for t in self._threads:
            t.join(timeout=10)
        return [self.done[i] for i in range(len(self._threads))]


@contextlib.contextmanager
def vllm(**fields: Any) -> Iterator[SimServer]:
    """A vLLM-shaped engine, one DP rank of two slots unless fields say otherwise."""
    config = {"dp": 1, "max_running": 2, "token_seconds": TOKEN, "exit_seconds": EXIT, **fields}
    with SimServer(Engine(EngineConfig(**config))) as server:
        yield server


def wait_in_flight(engine: Engine, n: int) -> None:
    until = time.monotonic() + 5
    while engine.in_flight() < n:
        assert time.monotonic() < until, f"{engine.in_flight()} in flight, want {n}"
        time.sleep(0.005)


def test_shutdown_timeout_drains_and_answers_new_requests_with_an_empty_abort() -> None:
    with vllm(shutdown_timeout=3.0) as server:
        engine, streams = server.engine, Streams(server.port)
        streams.send(0.4, 0.4, 0.4)  # two run, the third waits for a slot
        wait_in_flight(engine, 3)
        engine.sigterm()
        term = time.monotonic()
        # A new request: HTTP 200 at once, no tokens, finish_reason abort: refused.
        new = complete(server.port, {"max_tokens": 5}, timeout=5)
        assert (new.outcome, new.tokens, new.finish_reason) == ("refused", 0, "abort")
        assert time.monotonic() - term < 0.3  # answered at once, not queued
        # Still serving its pages while it drains: the hook can read it.
        assert get(server.port, "/health")[0] == 200
        status, body = get(server.port, "/metrics")
        assert status == 200 and scan(body).in_flight == 3
        # Running and waiting requests finish; the engine exits as soon as none is left,
        # far before N = 3 s.
        ends = streams.join()
        assert [o.outcome for o, _ in ends] == ["completed"] * 3
        assert engine.exited.wait(2)
        last = max(end for _, end in ends)
        exit_at = time.monotonic()
        assert last <= exit_at < last + EXIT + 0.5
        assert exit_at - term < 1.5
        assert complete(server.port, {"max_tokens": 1}, timeout=5).detail == "connection refused"


def test_shutdown_timeout_kills_what_is_left_at_n() -> None:
    with vllm(shutdown_timeout=0.4) as server:
        engine, streams = server.engine, Streams(server.port)
        streams.send(3.0, 0.1)
        wait_in_flight(engine, 2)
        engine.sigterm()
        term = time.monotonic()
        (long, long_end), (short, _) = streams.join()
        assert short.outcome == "completed"
        assert long.outcome == "cut" and long.tokens > 0  # cut at N, not at once, not at its end
        assert 0.4 <= long_end - term < 1.2
        assert engine.exited.wait(2)
        assert 0.4 + EXIT <= time.monotonic() - term < 1.5


def test_no_shutdown_timeout_aborts_everything_and_stops_listening() -> None:
    with vllm(shutdown_timeout=0, max_running=1) as server:
        engine, streams = server.engine, Streams(server.port)
        streams.send(2.0)
        wait_in_flight(engine, 1)
        time.sleep(0.1)  # the first one has tokens
        streams.send(2.0)  # waits for the only slot
        wait_in_flight(engine, 2)
        engine.sigterm()
        term = time.monotonic()
        (running, r_end), (waiting, w_end) = streams.join()
        assert (running.outcome, running.finish_reason) == ("cut", "abort") and running.tokens > 0
        assert (waiting.outcome, waiting.tokens, waiting.finish_reason) == ("refused", 0, "abort")
        assert max(r_end, w_end) - term < 0.3  # at once, not at the streams' end (2 s)
        assert engine.exited.wait(2)
        assert complete(server.port, {"max_tokens": 1}, timeout=5).detail == "connection refused"


def test_several_api_servers_cut_streams_and_answer_500_while_the_engine_works_on() -> None:
    with vllm(api_servers=2, shutdown_timeout=2.0) as server:
        engine, streams = server.engine, Streams(server.port)
        streams.send(0.6)
        wait_in_flight(engine, 1)
        engine.sigterm()
        term = time.monotonic()
        ((stream, end),) = streams.join()
        assert stream.outcome == "cut" and end - term < 0.3  # dropped at once
        new = complete(server.port, {"max_tokens": 5}, timeout=5)
        assert (new.outcome, new.detail) == ("refused", "HTTP 500")
        assert engine.in_flight() == 1  # the engine core still computes it, for nobody
        assert engine.exited.wait(2)
        # It exits when that work is over (0.6 s), not at once and not at N = 2 s.
        assert 0.5 <= time.monotonic() - term < 1.5


def test_sglang_loads_is_live_while_metrics_lags() -> None:
    config = EngineConfig(
        kind="sglang", dp=2, max_running=4, token_seconds=TOKEN, idle_lag=5.0, publish_seconds=0.02
    )
    with SimServer(Engine(config)) as server:
        streams = Streams(server.port)
        streams.send(0.2)
        wait_in_flight(server.engine, 1)
        time.sleep(0.1)  # the publisher has shown it busy
        busy = scan_loads(get(server.port, "/v1/loads")[1])
        assert (busy.verdict, busy.in_flight) == (Verdict.BUSY, 1)
        assert [o.outcome for o, _ in streams.join()] == ["completed"]
        loads = scan_loads(get(server.port, "/v1/loads")[1])
        metrics = scan(get(server.port, "/metrics")[1])
        assert (loads.verdict, loads.in_flight) == (Verdict.IDLE, 0)
        assert (metrics.verdict, metrics.engine, metrics.in_flight) == (Verdict.BUSY, "sglang", 1)


def test_vllm_has_no_loads_route() -> None:
    with vllm() as server:
        assert get(server.port, "/v1/loads")[0] == 404
        assert scan(get(server.port, "/metrics")[1]).verdict is Verdict.IDLE


def test_sglang_notices_sigterm_on_its_watchdog_grid_and_drains() -> None:
    origin = time.monotonic()
    config = EngineConfig(
        kind="sglang",
        dp=1,
        max_running=4,
        token_seconds=TOKEN,
        exit_seconds=EXIT,
        notice_seconds=0.3,
        notice_origin=origin,
        exit_after_sigterm=0.8,
    )
    with SimServer(Engine(config)) as server:
        streams = Streams(server.port)
        streams.send(0.5)
        wait_in_flight(server.engine, 1)
        server.engine.sigterm()
        term = time.monotonic()
        # It goes on serving after SIGTERM: a new request completes.
        assert complete(server.port, {"max_tokens": tokens(0.1)}, timeout=5).outcome == "completed"
        assert [o.outcome for o, _ in streams.join()] == ["completed"]
        assert server.engine.exited.wait(3)
        # A prefill/decode server exits no sooner than exit_after_sigterm (0.8 s),
        # though its work was over at 0.5 s.
        assert 0.8 <= time.monotonic() - term < 1.6


def test_demo_drains_every_stream() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "drainhook", "demo"],
        capture_output=True,
        text=True,
        timeout=60,
        env=base_env(),
    )
    assert done.returncode == 0, done.stderr
    assert "requests completed 5/5, cut 0" in done.stderr
    assert "outcome=drained" in done.stderr
