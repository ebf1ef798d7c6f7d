"""The simulated engine (sim/), over real HTTP on loopback, in this process.

What SIGTERM does to it, path by path, as the demo and the rehearsal rely on.
vLLM with one API server is calibrated to the live vLLM 0.32 (CONTRACT §7):
by default the engine core dies at once and every stream in flight stalls (no
error, no [DONE]), the listener closes within 0.25 s and the process stays
while a connection is open, until SIGKILL (`SimEngine.kill`), or exits in 0.4 s
with none; with `--shutdown-timeout N` requests that end within N complete,
new ones get HTTP 500, /health stays 200, and the engine core exits by itself
once drained and torn down (3.45 s live) or is killed at N, whichever comes
first, so a request left at N stalls. Then vLLM with several API servers
(streams cut, HTTP 500) and SGLang (its watchdog's grid; /v1/loads live while
/metrics lags). Timelines are
shrunk to tenths of a second; each test names the bound it tells a broken
model apart by.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from drainhook.engines.exposition import scan
from drainhook.engines.loads import scan_loads
from drainhook.engines.verdict import Verdict
from sim import EngineConfig, RequestOutcome, SimEngine, SimServer, complete
from sim.model import teardown
from tests.conftest import WAKE_LATE, late
from tests.support.loopback import get
from tests.support.process import ROOT, base_env
from tests.support.waits import until

TOKEN = 0.02  # s per streamed event
EXIT = 0.05  # s the process takes to exit once its work is over (SGLang)
# vLLM's stop as measured live (s from SIGTERM, or from the drain's end).
CORE, LISTENER, VLLM_EXIT = 0.02, 0.25, 0.4


def tokens(seconds: float) -> int:
    return round(seconds / TOKEN)


class Streams:
    """Completions sent on threads; each one's outcome and when it ended."""

    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.port = port
        self.timeout = timeout
        self.done: dict[int, tuple[RequestOutcome, float]] = {}
        self._threads: list[threading.Thread] = []

    def send(self, *seconds: float) -> None:
        for s in seconds:
            index = len(self._threads)

            def run(index: int = index, n: int = tokens(s)) -> None:
                got = complete(self.port, {"max_tokens": n, "stream": True}, self.timeout)
                self.done[index] = (got, time.monotonic())

            thread = threading.Thread(target=run, daemon=True)
            self._threads.append(thread)
            thread.start()

    def join(self, timeout: float = 10.0) -> list[tuple[RequestOutcome, float]]:
        for t in self._threads:
            t.join(timeout=timeout)
        return [self.done[i] for i in range(len(self._threads))]

    def open(self) -> int:
        """Streams that have not ended yet."""
        return sum(t.is_alive() for t in self._threads)


@contextlib.contextmanager
def vllm(**fields: Any) -> Iterator[SimServer]:
    """A vLLM-shaped engine, one DP rank of two slots unless fields say otherwise."""
    config = {
        "dp": 1,
        "max_running": 2,
        "token_seconds": TOKEN,
        "core_seconds": CORE,
        "listener_seconds": LISTENER,
        "exit_seconds": VLLM_EXIT,
        **fields,
    }
    with SimServer(SimEngine(EngineConfig(**config))) as server:
        yield server


def wait_in_flight(engine: SimEngine, n: int) -> None:
    until(lambda: engine.in_flight() >= n)


def sigterm(engine: SimEngine) -> float:
    """SIGTERM the engine; when it took it (what its timeline counts from)."""
    engine.sigterm()
    assert engine.sigterm_at is not None
    return engine.sigterm_at


def refused_at(port: int, by: float) -> float:
    """When a connection to port was first refused (polled; fails at `by`)."""

    def refused() -> float | None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return None
        except (ConnectionRefusedError, ConnectionResetError):  # reset: in the backlog at close
            return time.monotonic()

    at = until(refused, lambda at: at is not None, by - time.monotonic())
    assert at is not None
    return at


def post(port: int, body: dict[str, Any]) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("POST", "/v1/completions", json.dumps(body))
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_default_sigterm_stalls_every_stream_until_the_kill() -> None:
    with vllm(max_running=1) as server:
        engine, streams = server.engine, Streams(server.port)
        streams.send(3.0)
        wait_in_flight(engine, 1)
        until(lambda: sum(s.tokens for s in engine.shown()) > 0)  # the first has tokens
        streams.send(3.0)  # waits for the only slot
        wait_in_flight(engine, 2)
        term = sigterm(engine)
        # Between the engine core's death and the listener's close, /metrics answers
        # with the values it had (1 running, 1 waiting), /health 200.
        until(engine.killed.is_set)
        assert get(server.port, "/health")[0] == 200
        assert scan(get(server.port, "/metrics")[1]).in_flight == 2
        # The listener closes within 0.25 s (not at once, not with the process).
        closed = refused_at(server.port, term + 2)
        assert LISTENER <= closed - term < late(LISTENER, WAKE_LATE)
        # No abort, no error, no [DONE]: both streams are still open well past the
        # 0.4 s an idle engine takes to exit, and so is the process.
        time.sleep(VLLM_EXIT + 0.4 - (time.monotonic() - term))
        assert streams.open() == 2 and not engine.exited.is_set()
        killed = time.monotonic()
        engine.kill()  # the kubelet's SIGKILL at G
        (running, r_end), (waiting, w_end) = streams.join()
        # Truncated at the kill: the running one had tokens, none after SIGTERM
        # (bar the engine core's last ~20 ms); the waiting one never got any.
        assert (running.outcome, running.finish_reason) == ("cut", None) and running.tokens > 0
        assert running.last is not None and running.last - term < late(CORE, WAKE_LATE)
        assert (waiting.outcome, waiting.tokens) == ("cut", 0)
        assert min(r_end, w_end) >= killed
        assert engine.exited.is_set()


def test_default_sigterm_with_nothing_in_flight_exits_in_0_4_s() -> None:
    with vllm() as server:
        term = sigterm(server.engine)
        assert server.engine.exited.wait(VLLM_EXIT + 2)
        assert VLLM_EXIT <= time.monotonic() - term < late(VLLM_EXIT, WAKE_LATE)
        assert complete(server.port, {"max_tokens": 1}, timeout=5).detail == "connection refused"


def test_default_sigterm_the_process_waits_for_its_last_connection() -> None:
    with vllm() as server:
        engine = server.engine
        streams = Streams(server.port, timeout=1.0)  # the client gives up 1 s after its last byte
        streams.send(5.0)
        wait_in_flight(engine, 1)
        term = sigterm(engine)
        ((stream, end),) = streams.join()
        assert stream.outcome == "cut" and end - term >= 1.0  # it stalled, then timed out
        # The API server exits once that connection is gone, not at 0.4 s, not never.
        assert engine.exited.wait(2)
        assert end <= time.monotonic() < late(end, WAKE_LATE)


def test_shutdown_timeout_drains_and_answers_new_requests_with_http_500() -> None:
    n = 1.0
    with vllm(shutdown_timeout=n) as server:
        engine, streams = server.engine, Streams(server.port)
        streams.send(0.3, 0.3, 0.3)  # two run, the third waits for a slot
        wait_in_flight(engine, 3)
        term = sigterm(engine)
        # A new request: HTTP 500 at once with vLLM's error, not queued, not a stream.
        status, body = post(server.port, {"max_tokens": 5, "stream": True})
        error = json.loads(body)["error"]
        assert (status, error["message"]) == (500, "cannot schedule new futures after shutdown")
        assert time.monotonic() - term < late(0.0, WAKE_LATE)
        assert complete(server.port, {"max_tokens": 5}, timeout=5).outcome == "refused"
        # Still serving its pages while it drains: the hook can read it.
        assert get(server.port, "/health")[0] == 200
        status, page = get(server.port, "/metrics")
        assert status == 200 and scan(page).in_flight == 3
        # Running and waiting requests finish (the last by about 0.6 s, within N).
        ends = streams.join()
        assert [o.outcome for o, _ in ends] == ["completed"] * 3
        assert max(end for _, end in ends) - term < late(0.6, WAKE_LATE)
        # Idle now, it goes on while its core tears down (3.39 s or more, past N here):
        # /health 200, the listener open; the core is killed at N and the process
        # exits VLLM_EXIT later, not at once.
        assert get(server.port, "/health")[0] == 200
        assert not engine.exited.is_set()
        assert engine.exited.wait(n + VLLM_EXIT + 2)
        assert n + VLLM_EXIT <= time.monotonic() - term < late(n + VLLM_EXIT, WAKE_LATE)
        assert complete(server.port, {"max_tokens": 1}, timeout=5).detail == "connection refused"


def test_shutdown_timeout_idle_at_sigterm_exits_after_its_teardown_not_at_n() -> None:
    """Idle at SIGTERM, the stop follows the teardown, not N = 3 s and not the
    default's 0.25 s (live: the same at N = 4, 10 and 45, benchmarks/live.md). The
    teardown is the machine's: one value drawn in its range, by the engine's seed."""
    n, low, high = 3.0, 0.4, 1.2
    drawn = {s: teardown(EngineConfig(teardown_seconds=(low, high), teardown_seed=s)) for s in "ab"}
    assert low <= min(drawn.values()) and max(drawn.values()) <= high
    assert drawn["a"] != drawn["b"]  # a range, not one number
    with vllm(shutdown_timeout=n, teardown_seconds=(low, high), teardown_seed="a") as server:
        term = sigterm(server.engine)
        closed = refused_at(server.port, term + n + 2)
        down = drawn["a"]
        assert down + LISTENER <= closed - term < late(down + LISTENER, WAKE_LATE)
        assert server.engine.exited.wait(n + 2)
        after = time.monotonic() - term
        assert down + VLLM_EXIT <= after < late(down + VLLM_EXIT, WAKE_LATE)


def test_shutdown_timeout_teardown_starts_when_the_last_request_ends() -> None:
    n, down = 3.0, 0.5
    with vllm(shutdown_timeout=n, teardown_seconds=(down, down)) as server:
        engine, streams = server.engine, Streams(server.port)
        streams.send(0.6)
        wait_in_flight(engine, 1)
        sigterm(engine)
        ((stream, end),) = streams.join()
        assert stream.outcome == "completed"
        assert engine.exited.wait(n + 2)
        # From the stream's end (its last event, TOKEN before the client saw it close).
        after = time.monotonic() - end
        assert down + VLLM_EXIT - TOKEN <= after < late(down + VLLM_EXIT, WAKE_LATE)


def test_shutdown_timeout_stalls_what_is_left_at_n_until_the_kill() -> None:
    with vllm(shutdown_timeout=0.4) as server:
        engine, streams = server.engine, Streams(server.port)
        streams.send(3.0, 0.1)
        wait_in_flight(engine, 2)
        term = sigterm(engine)
        # The short one completed; the long one stopped getting tokens at N and stays
        # open with the process, which does not exit by itself.
        until(lambda: streams.open() == 1)
        until(engine.killed.is_set)
        assert not engine.exited.wait(VLLM_EXIT + 0.4)
        assert streams.open() == 1
        killed = time.monotonic()
        engine.kill()
        (long, long_end), (short, _) = streams.join()
        assert short.outcome == "completed"
        assert long.outcome == "cut" and long.tokens > 0 and long_end >= killed
        assert long.last is not None
        assert 0.4 - TOKEN <= long.last - term < late(0.4 + CORE, WAKE_LATE)


def test_several_api_servers_cut_streams_and_answer_500_while_the_engine_works_on() -> None:
    with vllm(api_servers=2, shutdown_timeout=2.0, exit_seconds=EXIT) as server:
        engine, streams = server.engine, Streams(server.port)
        streams.send(0.6)
        wait_in_flight(engine, 1)
        term = sigterm(engine)
        ((stream, end),) = streams.join()
        assert stream.outcome == "cut" and end - term < late(0.0, WAKE_LATE)  # dropped at once
        new = complete(server.port, {"max_tokens": 5}, timeout=5)
        assert (new.outcome, new.detail) == ("refused", "HTTP 500")
        assert engine.in_flight() == 1  # the engine core still computes it, for nobody
        assert engine.exited.wait(2)
        # It exits when that work is over (0.6 s), not at once and not at N = 2 s.
        assert 0.5 <= time.monotonic() - term < late(0.6 + EXIT, WAKE_LATE)


def test_sglang_loads_is_live_while_metrics_lags() -> None:
    config = EngineConfig(
        kind="sglang", dp=2, max_running=4, token_seconds=TOKEN, idle_lag=5.0, publish_seconds=0.02
    )
    with SimServer(SimEngine(config)) as server:
        streams = Streams(server.port)
        streams.send(0.2)
        wait_in_flight(server.engine, 1)
        until(lambda: scan(get(server.port, "/metrics")[1]).in_flight == 1)  # published
        busy = scan_loads(get(server.port, "/v1/loads")[1])
        assert (busy.verdict, busy.in_flight) == (Verdict.BUSY, 1)
        assert [o.outcome for o, _ in streams.join()] == ["completed"]
        # The publisher shows the end within its period (0.02 s); a loaded machine
        # may run it late, never 5 s (the gauges' lag) late.
        loads = until(
            lambda: scan_loads(get(server.port, "/v1/loads")[1]),
            lambda read: read.verdict is Verdict.IDLE,
            within=1.0,
        )
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
    with SimServer(SimEngine(config)) as server:
        streams = Streams(server.port)
        streams.send(0.5)
        wait_in_flight(server.engine, 1)
        term = sigterm(server.engine)
        # It goes on serving after SIGTERM: a new request completes.
        assert complete(server.port, {"max_tokens": tokens(0.1)}, timeout=5).outcome == "completed"
        assert [o.outcome for o, _ in streams.join()] == ["completed"]
        assert server.engine.exited.wait(3)
        # A prefill/decode server exits no sooner than exit_after_sigterm (0.8 s),
        # though its work was over at 0.5 s.
        assert 0.8 <= time.monotonic() - term < late(0.8 + EXIT, WAKE_LATE)


def test_demo_drains_every_stream() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sim"],  # scripts/demo's command, in a checkout
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=base_env(),
    )
    assert done.returncode == 0, done.stderr
    assert "requests completed 5/5, cut 0" in done.stderr
    assert "outcome=drained" in done.stderr
