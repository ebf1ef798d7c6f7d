"""The simulated engine's HTTP front: an OpenAI-style completion stream and the read-only pages.

- `POST /v1/completions`: a server-sent event stream, one `data:` event per
  token (every `token_seconds`), a last event with `finish_reason` "length",
  then `data: [DONE]`; or, while vLLM drains, HTTP 500 with vLLM's error body.
  A stream whose engine core is gone stalls: no more bytes, its connection held
  until the client closes it or the process ends.
- `GET /metrics` (vLLM- or SGLang-shaped), `GET /v1/loads` (SGLang only, live
  counts), `GET /load` (vLLM only: `{"server_load": N}`, 0 unless
  `load_tracking`), `GET /health` (200 while the listener lasts).

A completion's windows, in order (model.py): the body's upload, the render
(vLLM's /load counts it from here), the response's head, the scheduler.
Every request, of every path, is counted from before its body is read to
after its last byte (front.py: SGLang's `http_requests_active`).

Every request in progress is tracked (`SimEngine.serving`): vLLM's API server does
not exit while one is.

Every read of /metrics or /v1/loads is logged (`read`: start, end, the total
shown, the page), so a run can draw what a hook saw.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from sim import pages
from sim.model import (
    ENGINE_DEAD_ERROR,
    ENGINE_LOST_ERROR,
    SHUTDOWN_ERROR,
    Answer,
    EngineConfig,
    Fate,
    SimEngine,
)

POLL = 0.02  # s: how soon the listener closes once asked to
JSON = "application/json"


def _event(model: str, index: int, text: str, finish: str | None) -> bytes:
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
    event: dict[str, object] = {"id": f"cmpl-{index}", "object": "text_completion"}
    event.update(model=model, choices=[choice])
    return f"data: {json.dumps(event)}\n\n".encode()


class _Handler(BaseHTTPRequestHandler):
    """One connection's requests; `engine` is set by `_handler` on a subclass."""

    protocol_version = "HTTP/1.1"
    engine: SimEngine

    def log_message(self, format: str, *args: object) -> None:
        pass

    # --- routing: one method per path -------------------------------------------------

    def do_GET(self) -> None:
        config = self.engine.config
        routes = {"/health": self._health, "/metrics": self._metrics}
        if config.kind == "sglang":
            routes["/v1/loads"] = self._loads
        else:
            routes["/load"] = self._load
        self._route("GET", routes)

    def do_POST(self) -> None:
        self._route("POST", {"/v1/completions": self._completion})

    def _route(self, method: str, routes: dict[str, Callable[[], None]]) -> None:
        """Serve one request, counted from before its body is read to after its last
        byte (SGLang's http_requests_active; vLLM's API server waits for it at exit)."""
        path = self.path.split("?")[0]
        server = self.engine.server
        with self.engine.serving(self.connection):
            server.begin(path, method)
            self._streamed = False
            try:
                routes.get(path, self._not_found)()
            finally:
                server.end(path, method, self.engine.config.stream_tail if self._streamed else 0)

    def _not_found(self) -> None:
        self._plain(404, b"not found\n")

    # --- the read-only pages -----------------------------------------------------------

    def _health(self) -> None:
        """200; SGLang answers 503 from SIGTERM on (it drains, still serving)."""
        draining = self.engine.config.kind == "sglang" and self.engine.sigterm_at is not None
        self._plain(503 if draining else 200, b"")

    def _metrics(self) -> None:
        start = time.monotonic()
        if self.engine.config.metrics_hang:
            self.engine.log("read", t0=start, t1=None, total=None, page="metrics")
            self.engine.hold(self.connection)  # until its client gives up or the process ends
            self.close_connection = True
            return
        body, total = self.engine.metrics()
        self._page(body, "text/plain; version=0.0.4; charset=utf-8")
        self.engine.log("read", t0=start, t1=time.monotonic(), total=total, page="metrics")

    def _loads(self) -> None:
        start = time.monotonic()
        answer = self.engine.loads()
        assert answer is not None
        body, total = answer
        self._page(body, JSON)
        self.engine.log("read", t0=start, t1=time.monotonic(), total=total, page="loads")

    def _load(self) -> None:
        """vLLM's `/load`: one API server process's count; 0 unless tracking is on."""
        start = time.monotonic()
        load = self.engine.server.load()
        shown = load if self.engine.config.load_tracking else 0
        self._page(pages.vllm_load(shown).encode(), JSON)
        self.engine.log("read", t0=start, t1=time.monotonic(), total=shown, page="load")

    def _page(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    # --- a completion ------------------------------------------------------------------

    def _completion(self) -> None:
        engine = self.engine
        request = self._body()  # the upload: in the server, in no gauge
        if engine.answer is Answer.ERROR:  # vLLM draining: its renderer is shut down
            self._plain(
                500, SHUTDOWN_ERROR if engine.config.api_servers == 1 else ENGINE_LOST_ERROR
            )
            return
        process = engine.server.load_begin()  # vLLM's handler starts: /load counts it
        try:
            if not engine.rendered(
                request, process
            ):  # the render: /load sees it, the gauges do not
                self._plain(500, ENGINE_DEAD_ERROR)
                return
            if engine.answering() is Answer.ERROR and engine.config.api_servers > 1:
                self._plain(500, ENGINE_LOST_ERROR)
                return
            self._stream_head()
            began = time.monotonic()
            with engine.stream(self.connection):
                self._stream(engine.request_seconds(request))
            engine.latencies.append(time.monotonic() - began)
            self.close_connection = True
        finally:
            engine.server.load_end(process)

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length", "0") or 0)
        try:
            request: Any = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            request = {}
        return request if isinstance(request, dict) else {}

    def _stream(self, duration: float) -> None:
        engine, config = self.engine, self.engine.config
        tick = max(0.005, config.token_seconds)
        rank = engine.admit()
        if rank is None:  # the engine stopped while it waited, or before
            self._stopped()
            return
        sent, alive = 0, True
        try:
            end = time.monotonic() + duration
            first = time.monotonic() + min(config.prefill_seconds, duration)
            while (left := end - time.monotonic()) > 0:
                # A long prefill emits nothing; a frozen engine nothing more.
                pause = max(first - time.monotonic(), tick)
                if engine.frozen.is_set():
                    pause, end = 3600.0, math.inf
                if engine.killed.wait(min(pause, left)):
                    break
                if engine.frozen.is_set():
                    continue
                # A stream whose connection was cut stays in the engine, unseen.
                alive = alive and self._send(_event(config.model, sent, f" t{sent}", None))
                if sent == 0:
                    engine.prefilled(rank)
                engine.emitted(rank, first=sent == 0)
                sent += 1
            else:
                if alive:
                    self._finish(sent, "length")
                return
        finally:
            if sent == 0:
                engine.prefilled(rank)
            engine.finish(rank)
        if alive:
            self._stopped()

    def _stopped(self) -> None:
        """The engine stopped this request: a stall holds the connection open."""
        if self.engine.fate is Fate.STALL:
            self.engine.hold(self.connection)

    def _stream_head(self) -> None:
        self._streamed = True
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self._send(b"")

    def _finish(self, index: int, reason: str) -> None:
        if self._send(_event(self.engine.config.model, index, "", reason)):
            self._send(b"data: [DONE]\n\n")

    def _send(self, data: bytes) -> bool:
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            return False
        return True

    def _plain(self, status: int, body: bytes, kind: str | None = None) -> None:
        kind = kind or (JSON if body.startswith(b"{") else "text/plain")
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True


def _handler(engine: SimEngine) -> type[_Handler]:
    return type("Handler", (_Handler,), {"engine": engine})


class _Listener(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128


class SimServer:
    """The engine listening on 127.0.0.1 (on `port`, or a free one) until closed or the
    engine exits."""

    def __init__(self, engine: SimEngine | None = None, port: int = 0) -> None:
        self.engine = engine or SimEngine(EngineConfig())
        self._server = _Listener(("127.0.0.1", port), _handler(self.engine))
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": POLL}, daemon=True
        )
        self._lock = threading.Lock()
        self._closed = False
        self.engine.on_stop_listening(self.close)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def url(self, path: str = "/metrics") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def __enter__(self) -> SimServer:
        self.engine.start()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop listening (a new connection is refused); open streams go on."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()
