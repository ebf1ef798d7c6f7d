"""A simulated vLLM engine on loopback, and `drainhook demo` on top of it.

Not on the hook's import path: only `drainhook demo` (and tests) import it.

The engine serves `/metrics` shaped like vLLM V1 with two DP engines
(`engine="0"`, `engine="1"`), and `POST /v1/completions` as a server-sent
event stream: one `data:` event per token, then `data: [DONE]`. A scheduler
runs at most `max_running` requests per DP engine; the rest wait.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN_SECONDS = 0.05


@dataclass
class _Engine:
    running: int = 0
    waiting: int = 0


@dataclass
class SimEngine:
    """Request accounting for the simulated engine, shared with the HTTP handler."""

    dp_size: int = 2
    max_running: int = 2
    model: str = "demo/Sim-7B"
    engines: list[_Engine] = field(default_factory=list)
    lock: threading.Condition = field(default_factory=threading.Condition)
    _next: int = 0

    def __post_init__(self) -> None:
        self.engines = [_Engine() for _ in range(self.dp_size)]

    def admit(self) -> int:
        """Queue a request on the next engine (round robin); block until it runs."""
        with self.lock:
            rank = self._next % self.dp_size
            self._next += 1
            eng = self.engines[rank]
            eng.waiting += 1
            self.lock.wait_for(lambda: eng.running < self.max_running)
            eng.waiting -= 1
            eng.running += 1
            return rank

    def finish(self, rank: int) -> None:
        with self.lock:
            self.engines[rank].running -= 1
            self.lock.notify_all()

    def in_flight(self) -> int:
        with self.lock:
            return sum(e.running + e.waiting for e in self.engines)

    def metrics(self) -> bytes:
        with self.lock:
            snapshot = [(e.running, e.waiting) for e in self.engines]
        lines = []
        families = (
            ("vllm:num_requests_running", "Number of requests in model execution batches.", 0),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", 1),
        )
        for name, text, index in families:
            lines.append(f"# HELP {name} {text}")
            lines.append(f"# TYPE {name} gauge")
            for rank, counts in enumerate(snapshot):
                labels = f'engine="{rank}",model_name="{self.model}"'
                lines.append(f"{name}{{{labels}}} {float(counts[index])}")
        lines.append("# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.")
        lines.append("# TYPE vllm:kv_cache_usage_perc gauge")
        for rank, (running, _) in enumerate(snapshot):
            usage = min(1.0, running * 0.2)
            lines.append(
                f'vllm:kv_cache_usage_perc{{engine="{rank}",model_name="{self.model}"}} {usage}'
            )
        return ("\n".join(lines) + "\n").encode()


def _handler(engine: SimEngine) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            body = engine.metrics()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            if self.path != "/v1/completions":
                self.send_error(404)
                return
            length = int(self.headers.get("Content-Length", "0"))
            request = json.loads(self.rfile.read(length) or b"{}")
            tokens = int(request.get("max_tokens", 16))
            rank = engine.admit()
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                for i in range(tokens):
                    time.sleep(TOKEN_SECONDS)
                    event = {"choices": [{"index": 0, "text": f" t{i}"}]}
                    self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
            finally:
                engine.finish(rank)
            self.close_connection = True

    return Handler


class SimServer:
    """The simulated engine listening on 127.0.0.1 (a free port by default)."""

    def __init__(self, engine: SimEngine | None = None, port: int = 0) -> None:
        self.engine = engine or SimEngine()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _handler(self.engine))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def __enter__(self) -> SimServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def stream_completion(port: int, tokens: int) -> str:
    """One streaming request; 'completed' when [DONE] arrived, else 'cut'."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        body = json.dumps({"model": "demo/Sim-7B", "prompt": "hi", "max_tokens": tokens})
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        data = conn.getresponse().read()
    except (OSError, http.client.HTTPException):
        return "cut"
    finally:
        conn.close()
    return "completed" if data.rstrip().endswith(b"data: [DONE]") else "cut"


def run_demo(echo: Callable[[str], None] | None = None) -> int:
    """Start the engine, send streams, drain it on a 10 s timeline; return the exit code."""
    import click

    from drainhook.config import Reach, WaitConfig
    from drainhook.target import parse_url

    say = echo or (lambda line: click.echo(line, err=True))
    with SimServer() as server:
        url = f"http://127.0.0.1:{server.port}/metrics"
        say(f"demo: simulated vLLM engine (2 DP engines, 2 slots each) at {url}")
        durations = [20, 30, 45, 50, 60]  # tokens of 50 ms: 1.0 .. 3.0 s
        outcomes: list[str] = []
        clients = [
            threading.Thread(target=lambda n=n: outcomes.append(stream_completion(server.port, n)))
            for n in durations
        ]
        for c in clients:
            c.start()
        while server.engine.in_flight() < len(durations):
            time.sleep(0.01)
        say(f"demo: {len(durations)} streaming requests in flight; the Pod is deleted now")
        config = WaitConfig(
            reach=Reach(target=parse_url(url)),
            grace=10.0,
            settle=1.0,
            exit_reserve=2.0,
            interval=0.5,
        )
        say(
            f"demo: drainhook wait --url {url} --grace 10 --settle 1 --exit-reserve 2 "
            "--interval 0.5   (deadline D = 8 s)"
        )
        from drainhook.hook import run_wait

        code = run_wait(config, time.monotonic())
        for c in clients:
            c.join(timeout=5)
        done = outcomes.count("completed")
        say(f"demo: requests completed {done}/{len(durations)}, cut {outcomes.count('cut')}")
        say(
            "demo: SIGTERM may be sent now: nothing is left to abort"
            if code == 0
            else f"demo: the hook ended without confirming idle (exit {code})"
        )
        return code
