"""The simulated engine's windows: where a request is in the server and in no gauge.

Read in vLLM 0.32's and SGLang 0.5.23's code (sim/model.py,
front.py): the body's upload; vLLM's render (after the body is parsed, before
the scheduler: `/load` counts it with load tracking, 0 without, one count per
API-server process); a request whose render ends after the engine core went
gets HTTP 500; vLLM's gauges as of the last engine step; SGLang's
`http_requests_active` from before the body is read (the scrape counting
itself), a prefill in neither of its gauges nor /v1/loads, its running count
refreshed every N decode steps, and its SIGTERM drain waiting for what the
server holds. Over real HTTP on loopback, timelines in tenths of a second.
"""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sim import EngineConfig, SimEngine, SimServer, complete
from sim.client import COMPLETED
from tests.support.loopback import get
from tests.support.waits import until

TOKEN = 0.02


def sample(body: bytes, name: str, **labels: str) -> float:
    """The sum of a family's samples whose labels include `labels`."""
    total = 0.0
    for line in body.decode().splitlines():
        m = re.match(r"([a-z_:]+)\{(.*)\} (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
    return total


def gauges(port: int, kind: str = "vllm") -> float:
    body = get(port, "/metrics")[1]
    if kind == "vllm":
        names = ("vllm:num_requests_running", "vllm:num_requests_waiting")
    else:
        names = ("sglang:num_running_reqs", "sglang:num_queue_reqs")
    return sum(sample(body, n) for n in names)


def server_load(port: int) -> int:
    status, body = get(port, "/load")
    assert status == 200
    return int(json.loads(body)["server_load"])


class SlowUpload:
    """A completion whose body is sent in two halves, `rest()` sending the second."""

    def __init__(self, port: int, tokens: int = 10) -> None:
        body = json.dumps({"max_tokens": tokens, "stream": True, "user": "slow"}).encode()
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        head = (
            "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        half = len(body) // 2
        self.sock.sendall(head + body[:half])
        self._rest = body[half:]

    def rest(self) -> None:
        self.sock.sendall(self._rest)

    def response(self) -> bytes:
        out = b""
        while chunk := self.sock.recv(65536):
            out += chunk
        self.sock.close()
        return out


@contextmanager
def engine(**fields: Any) -> Iterator[SimServer]:
    config = {"dp": 1, "max_running": 4, "token_seconds": TOKEN, **fields}
    with SimServer(SimEngine(EngineConfig(**config))) as server:
        yield server


def test_vllm_upload_and_render_are_in_no_gauge_and_load_counts_from_the_parse() -> None:
    """Uploading: gauges 0, /load 0. Rendering (0.4 s): gauges 0, /load 1. Streaming:
    both 1. After the last byte: both 0."""
    with engine(render_seconds=0.4, load_tracking=True) as server:
        port = server.port
        upload = SlowUpload(port, tokens=10)
        until(lambda: server.engine.server.completions() == 1)
        assert (gauges(port), server_load(port)) == (0, 0)
        upload.rest()
        until(lambda: server_load(port) == 1)
        assert gauges(port) == 0  # rendering: the scheduler has not seen it
        until(lambda: gauges(port) == 1)
        assert server_load(port) == 1
        reply = upload.response()
        assert reply.startswith(b"HTTP/1.1 200") and b"data: [DONE]" in reply
        assert (gauges(port), server_load(port)) == (0, 0)


def test_vllm_load_reads_0_without_load_tracking() -> None:
    with engine(render_seconds=0.3) as server:
        upload = SlowUpload(server.port)
        upload.rest()
        until(lambda: server.engine.server.handlers() == 1)  # rendering
        assert (server_load(server.port), gauges(server.port)) == (0, 0)
        assert b"200" in upload.response().split(b"\r\n", 1)[0]


def test_vllm_load_is_one_api_server_process_s_count() -> None:
    """Two API servers, one request rendering: two GETs read 1 and 0, in some order."""
    with engine(render_seconds=0.5, load_tracking=True, api_servers=2) as server:
        upload = SlowUpload(server.port)
        upload.rest()
        until(lambda: server.engine.server.handlers() == 1)  # rendering
        assert sorted(server_load(server.port) for _ in range(2)) == [0, 1]
        upload.response()


def test_a_render_that_ends_after_the_engine_core_went_gets_http_500() -> None:
    """vLLM's default stop kills the engine core at once: the request still rendering
    is answered 500 when its render ends, as the live vLLM answered an upload."""
    with engine(render_seconds=0.4, core_seconds=0.02) as server:
        upload = SlowUpload(server.port)
        upload.rest()
        until(lambda: server.engine.server.completions() == 1)
        server.engine.sigterm()
        reply = upload.response()
        assert reply.startswith(b"HTTP/1.1 500") and b"EngineCore" in reply


def test_vllm_renders_one_at_a_time_with_render_serial() -> None:
    """Two requests, 0.3 s renders on one worker: the second starts streaming about
    0.3 s after the first (a broken model: both at once)."""
    with engine(render_seconds=0.3, render_serial=True) as server:
        firsts: list[float] = []

        def one() -> None:
            got = complete(server.port, {"max_tokens": 3, "stream": True})
            assert got.outcome == COMPLETED and got.first is not None
            firsts.append(got.first)

        threads = [threading.Thread(target=one) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert len(firsts) == 2 and abs(firsts[1] - firsts[0]) >= 0.25


def test_vllm_step_gauges_show_a_request_only_after_a_step() -> None:
    """Gauges set after each 0.3 s step: a request that lives 0.1 s between two steps
    is never shown (live counts would show it)."""
    with engine(token_seconds=0.3, step_gauges=True) as server:
        e = server.engine

        def shown() -> int:
            return sum(r + w for r, w in e.gauges())

        rank = e.admit()  # in until a step shows it, out until a step shows that
        assert rank is not None
        until(lambda: shown() == 1, within=1.0)
        e.finish(rank)
        until(lambda: shown() == 0, within=1.0)  # a step just ran: 0.3 s to the next
        rank = e.admit()  # a request in and out between two steps
        assert rank is not None
        between = shown()
        e.finish(rank)
        assert between == 0
        rank = e.admit()
        assert rank is not None
        until(lambda: shown() == 1, within=1.0)
        e.finish(rank)


def test_sglang_http_requests_active_counts_from_before_the_body_and_the_scrape() -> None:
    with engine(kind="sglang") as server:
        port = server.port
        upload = SlowUpload(port)
        until(lambda: server.engine.server.completions() == 1)
        body = get(port, "/metrics")[1]
        name = "sglang:http_requests_active"
        assert sample(body, name, endpoint="/v1/completions", method="POST") == 1
        assert sample(body, name, endpoint="/metrics", method="GET") == 1  # the scrape itself
        assert sample(body, "sglang:num_running_reqs") + sample(body, "sglang:num_queue_reqs") == 0
        upload.rest()
        upload.response()
        body = get(port, "/metrics")[1]
        assert sample(body, name, endpoint="/v1/completions", method="POST") == 0


def test_sglang_prefill_is_in_neither_gauge_nor_loads() -> None:
    """A 0.5 s prefill: running 0 and queue 0 on /metrics and /v1/loads while the server
    holds it; running 1 once its first token is out."""
    with engine(kind="sglang", prefill_seconds=0.5) as server:
        port, e = server.port, server.engine
        t = threading.Thread(target=complete, args=(port, {"max_tokens": 40, "stream": True}))
        t.start()
        until(lambda: e.in_flight() == 1)
        loads = json.loads(get(port, "/v1/loads")[1])["aggregate"]["total_reqs"]
        assert (gauges(port, "sglang"), loads) == (0, 0)
        until(lambda: gauges(port, "sglang") == 1, within=2.0)
        t.join(10)


def test_sglang_running_is_refreshed_every_40_decode_steps() -> None:
    """With refresh every 40 steps: a 20-token request never shows on running; a
    120-token one does, from its 40th step on."""
    with engine(kind="sglang", refresh_iterations=40, token_seconds=0.01) as server:
        port = server.port
        seen: list[float] = []
        t = threading.Thread(target=complete, args=(port, {"max_tokens": 20, "stream": True}))
        t.start()
        while t.is_alive():
            seen.append(gauges(port, "sglang"))
        assert seen and max(seen) == 0
        t = threading.Thread(target=complete, args=(port, {"max_tokens": 120, "stream": True}))
        t.start()
        until(lambda: gauges(port, "sglang") == 1, within=3.0)
        t.join(10)


def test_sglang_sigterm_drains_what_the_server_holds() -> None:
    """SGLang's tokenizer manager drains every request it holds: one still uploading at
    its watchdog's look keeps it from exiting until the request completes."""
    with engine(kind="sglang", notice_seconds=0.1, exit_seconds=0.05) as server:
        e = server.engine
        upload = SlowUpload(server.port, tokens=5)
        until(lambda: e.server.completions() == 1)
        e.sigterm()
        assert not e.exited.wait(0.4)  # three looks of the watchdog
        upload.rest()
        reply = upload.response()
        assert b"data: [DONE]" in reply
        until(lambda: e.exited.is_set(), within=2.0)
