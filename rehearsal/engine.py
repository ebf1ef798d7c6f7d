"""A simulated LLM engine process: `python -m rehearsal.engine --kind vllm|sglang ...`.

It serves, on 127.0.0.1 and a free port (printed as `READY <port>` on stdout):

- `POST /v1/completions`: an OpenAI-style server-sent event stream, one
  `data:` event per token tick, then `data: [DONE]`. The request's duration is
  drawn from `--durations` (uniform) by its `user` id and `--seed`, so every
  run of a scenario serves the same requests for the same time.
- a scheduler: at most `--max-running` requests run per DP engine, the rest wait.
- `GET /metrics`: vLLM-shaped (`vllm:num_requests_running|waiting` per DP
  engine, `engine` label) or SGLang-shaped (`sglang:num_running_reqs`,
  `sglang:num_queue_reqs` and the other counted queues).

On SIGTERM it behaves as the real engines do (the versions of the contract):

- vLLM, `--shutdown-timeout 0` (its default): abort every running and waiting
  request, stop listening, exit. With N > 0: answer new requests 503, drain up
  to N s, abort what is left, exit.
- SGLang: the tokenizer manager's watchdog looks at the SIGTERM flag every
  5 s (`--watchdog-origin` pins the phase of those looks), then drains with no
  bound (looking again every 5 s) and exits; it keeps serving meanwhile. A
  prefill/decode server takes about 20 s to exit after SIGTERM
  (`--exit-after-sigterm`). With `--idle-lag L` its gauges refresh
  about once a second while busy, and show idle only L s after it went idle.

Every event (ready, each /metrics read, SIGTERM, notice, abort, exit) goes to
`--log` as one JSON line stamped with time.monotonic(), which all processes of
a run share.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TextIO

from rehearsal.timeline import (
    SGLANG_EXIT,
    SGLANG_LOG_INTERVAL,
    SGLANG_NOTICE,
    TOKEN_TICK,
    VLLM_EXIT,
    Scale,
)

MODEL = "rehearsal/Sim-8B"


class EventLog:
    """JSON lines to a file, one per event, flushed at once (the process may be killed)."""

    def __init__(self, out: TextIO | None) -> None:
        self._out = out
        self._lock = threading.Lock()

    def __call__(self, ev: str, **fields: Any) -> None:
        if self._out is None:
            return
        line = json.dumps({"ev": ev, "t": time.monotonic(), **fields})
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()


@dataclass
class Rank:
    running: int = 0
    waiting: int = 0


@dataclass
class Config:
    kind: str
    role: str
    dp: int
    max_running: int
    route: str
    durations: tuple[float, float]
    seed: int
    scale: Scale
    shutdown_timeout: float
    idle_lag: float
    exit_after_sigterm: float
    metrics_hang: bool


@dataclass
class Engine:
    """Request accounting, the published gauges, and the signal behaviour."""

    config: Config
    log: EventLog
    ranks: list[Rank] = field(default_factory=list)
    cond: threading.Condition = field(default_factory=threading.Condition)
    aborted: bool = False  # every request still here is being cut
    refusing: bool = False  # new requests are answered 503
    sigterm_at: float | None = None
    published: list[tuple[int, int]] = field(default_factory=list)
    _next: int = 0
    _connections: set[socket.socket] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.ranks = [Rank() for _ in range(self.config.dp)]
        self.published = [(0, 0)] * self.config.dp

    # --- the scheduler ----------------------------------------------------------

    def duration(self, request_id: str) -> float:
        low, high = self.config.durations
        real = random.Random(f"{self.config.seed}:{request_id}").uniform(low, high)
        return self.config.scale(real)

    def admit(self) -> int | None:
        """Queue a request on its DP engine; block until it runs (None: aborted)."""
        with self.cond:
            if self.config.route == "rr":
                rank = self._next % self.config.dp
                self._next += 1
            else:
                rank = int(self.config.route)
            r = self.ranks[rank]
            r.waiting += 1
            self.cond.wait_for(lambda: self.aborted or r.running < self.config.max_running)
            r.waiting -= 1
            if self.aborted:
                self.cond.notify_all()
                return None
            r.running += 1
            return rank

    def finish(self, rank: int) -> None:
        with self.cond:
            self.ranks[rank].running -= 1
            self.cond.notify_all()

    def counts(self) -> list[tuple[int, int]]:
        with self.cond:
            return [(r.running, r.waiting) for r in self.ranks]

    def in_flight(self) -> int:
        return sum(run + wait for run, wait in self.counts())

    def track(self, conn: socket.socket, add: bool) -> None:
        with self.cond:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def abort_all(self) -> None:
        """Cut every request: close its connection now, release the waiting ones."""
        with self.cond:
            self.aborted = True
            n = sum(r.running + r.waiting for r in self.ranks)
            conns = list(self._connections)
            self.cond.notify_all()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self.log("aborted", requests=n)

    # --- the gauges -------------------------------------------------------------

    def gauges(self) -> list[tuple[int, int]]:
        """What /metrics shows: live counts, or SGLang's lagging snapshot."""
        return self.published if self.config.idle_lag > 0 else self.counts()

    def publisher(self) -> None:
        """SGLang with a lag: refresh while busy; show idle only idle_lag after going idle."""
        interval = self.config.scale(SGLANG_LOG_INTERVAL)
        lag = self.config.scale(self.config.idle_lag)
        idle_since: float | None = None
        while True:
            now = time.monotonic()
            counts = self.counts()
            if any(run + wait for run, wait in counts):
                idle_since = None
                self.published = counts
            else:
                idle_since = now if idle_since is None else idle_since
                if now - idle_since >= lag:
                    self.published = counts
            time.sleep(interval)

    def metrics(self) -> tuple[bytes, int]:
        snapshot = self.gauges()
        total = sum(run + wait for run, wait in snapshot)
        text = _vllm(snapshot) if self.config.kind == "vllm" else _sglang(snapshot, self.config)
        return text.encode(), total

    # --- SIGTERM --------------------------------------------------------------------

    def exit(self, at: float) -> None:
        """Exit the process at monotonic time `at` (the engine's own teardown)."""
        time.sleep(max(0.0, at - time.monotonic()))
        self.log("exit")
        os._exit(0)

    def on_sigterm_vllm(self, stop_listening: Callable[[], None]) -> None:
        scale = self.config.scale
        if self.config.shutdown_timeout > 0:
            self.refusing = True
            until = time.monotonic() + scale(self.config.shutdown_timeout)
            with self.cond:
                self.cond.wait_for(
                    lambda: sum(r.running + r.waiting for r in self.ranks) == 0,
                    timeout=max(0.0, until - time.monotonic()),
                )
            self.log("drained", in_flight=self.in_flight())
        self.abort_all()
        stop_listening()
        self.exit(time.monotonic() + scale(VLLM_EXIT))

    def sglang_watchdog(self, origin: float) -> None:
        """TokenizerManager.sigterm_watchdog: look every 5 s; drain with no bound; exit.

        The looks fall on origin + k * 5 s (scaled): the engine's start in SGLang,
        a moment the runner pins so that every strategy meets the same phase.
        """
        period = self.config.scale(SGLANG_NOTICE)
        while self.sigterm_at is None:
            ahead = math.floor((time.monotonic() - origin) / period) + 1
            time.sleep(max(0.0, origin + ahead * period - time.monotonic()))
        self.log("noticed")
        while (left := self.in_flight()) > 0:
            self.log("draining", in_flight=left)
            time.sleep(period)
        self.log("drained", in_flight=0)
        at = time.monotonic() + self.config.scale(SGLANG_EXIT)
        at = max(at, self.sigterm_at + self.config.scale(self.config.exit_after_sigterm))
        self.exit(at)


def _vllm(snapshot: list[tuple[int, int]]) -> str:
    lines = []
    families = (
        ("vllm:num_requests_running", "Number of requests in model execution batches.", 0),
        ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", 1),
    )
    for name, text, index in families:
        lines += [f"# HELP {name} {text}", f"# TYPE {name} gauge"]
        for rank, counts in enumerate(snapshot):
            lines.append(f'{name}{{engine="{rank}",model_name="{MODEL}"}} {float(counts[index])}')
    name = "vllm:num_requests_waiting_by_reason"
    lines += [f"# HELP {name} Number of waiting requests by reason.", f"# TYPE {name} gauge"]
    for rank, (_, waiting) in enumerate(snapshot):
        for reason, value in (("capacity", waiting), ("deferred", 0)):
            labels = f'engine="{rank}",model_name="{MODEL}",reason="{reason}"'
            lines.append(f"{name}{{{labels}}} {float(value)}")
    name = "vllm:kv_cache_usage_perc"
    lines += [f"# HELP {name} KV-cache usage. 1 means 100 percent usage.", f"# TYPE {name} gauge"]
    for rank, (running, _) in enumerate(snapshot):
        usage = min(1.0, running * 0.1)
        lines.append(f'{name}{{engine="{rank}",model_name="{MODEL}"}} {usage}')
    return "\n".join(lines) + "\n"


def _sglang(snapshot: list[tuple[int, int]], config: Config) -> str:
    running = [c[0] for c in snapshot]
    waiting = [c[1] for c in snapshot]
    zeros = [0] * len(snapshot)
    families = [
        ("sglang:num_running_reqs", "The number of running requests.", running),
        ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", waiting),
        ("sglang:num_grammar_queue_reqs", "The number of requests in the grammar queue.", zeros),
    ]
    if config.role == "prefill":
        families += [
            ("sglang:num_prefill_bootstrap_queue_reqs", "Prefill bootstrap queue.", zeros),
            ("sglang:num_prefill_inflight_queue_reqs", "Prefill inflight queue.", zeros),
        ]
    if config.role == "decode":
        families += [
            ("sglang:num_decode_prealloc_queue_reqs", "Decode prealloc queue.", zeros),
            ("sglang:num_decode_transfer_queue_reqs", "Decode transfer queue.", zeros),
        ]
    lines = []
    for name, text, values in families:
        lines += [f"# HELP {name} {text}", f"# TYPE {name} gauge"]
        for rank, value in enumerate(values):
            labels = (
                f'dp_rank="{rank}",engine_type="{config.role}",model_name="{MODEL}",'
                'moe_ep_rank="0",pp_rank="0",tp_rank="0"'
            )
            lines.append(f"{name}{{{labels}}} {float(value)}")
    return "\n".join(lines) + "\n"


def _handler(engine: Engine) -> type[BaseHTTPRequestHandler]:
    tick = max(0.01, engine.config.scale(TOKEN_TICK))

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            if path == "/health":
                self._plain(200, b"")
                return
            if path != "/metrics":
                self._plain(404, b"not found\n")
                return
            start = time.monotonic()
            if engine.config.metrics_hang:
                engine.log("read", t0=start, t1=None, total=None)
                threading.Event().wait()  # hold the connection until the process ends
            body, total = engine.metrics()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            engine.log("read", t0=start, t1=time.monotonic(), total=total)

        def do_POST(self) -> None:
            if self.path.split("?")[0] != "/v1/completions":
                self._plain(404, b"not found\n")
                return
            length = int(self.headers.get("Content-Length", "0"))
            request = json.loads(self.rfile.read(length) or b"{}")
            if engine.refusing:
                self._plain(503, b'{"error": "server shutting down"}\n')
                return
            duration = engine.duration(str(request.get("user", "")))
            engine.track(self.connection, True)
            try:
                self._stream(duration)
            finally:
                engine.track(self.connection, False)
            self.close_connection = True

        def _stream(self, duration: float) -> None:
            rank = engine.admit()
            if rank is None:  # aborted while waiting: the connection just closes
                return
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.flush()
                end = time.monotonic() + duration
                i = 0
                while (left := end - time.monotonic()) > 0:
                    time.sleep(min(tick, left))
                    if engine.aborted:
                        return
                    event = {"id": f"cmpl-{i}", "choices": [{"index": 0, "text": f" t{i}"}]}
                    self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                    self.wfile.flush()
                    i += 1
                if engine.aborted:
                    return
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
            except OSError:
                pass
            finally:
                engine.finish(rank)

        def _plain(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True

    return Handler


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m rehearsal.engine", description=__doc__)
    p.add_argument("--kind", choices=("vllm", "sglang"), default="vllm")
    p.add_argument("--role", choices=("unified", "prefill", "decode"), default="unified")
    p.add_argument("--dp", type=int, default=2, help="DP engines (vLLM `engine` label)")
    p.add_argument("--max-running", type=int, default=4, help="running requests per DP engine")
    p.add_argument("--route", default="rr", help="rr, or the DP rank every request goes to")
    p.add_argument("--durations", default="uniform:0.5:2", help="uniform:LOW:HIGH, real seconds")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--scale", type=float, default=1.0, help="multiply every duration by this")
    p.add_argument("--shutdown-timeout", type=float, default=0.0, help="vLLM, real seconds")
    p.add_argument("--idle-lag", type=float, default=0.0, help="SGLang gauge lag, real seconds")
    p.add_argument("--exit-after-sigterm", type=float, default=0.0, help="SGLang PD exit time")
    p.add_argument("--metrics-hang", action="store_true", help="/metrics never answers")
    p.add_argument(
        "--watchdog-origin",
        type=float,
        help="SGLang: time.monotonic() its SIGTERM watchdog's 5 s grid runs from (default: start)",
    )
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--log", help="JSON-lines event log")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    kind, low, high = args.durations.split(":")
    if kind != "uniform":
        raise SystemExit(f"unknown distribution {kind!r}")
    config = Config(
        kind=args.kind,
        role=args.role,
        dp=args.dp,
        max_running=args.max_running,
        route=args.route,
        durations=(float(low), float(high)),
        seed=args.seed,
        scale=Scale(args.scale),
        shutdown_timeout=args.shutdown_timeout,
        idle_lag=args.idle_lag,
        exit_after_sigterm=args.exit_after_sigterm,
        metrics_hang=args.metrics_hang,
    )
    out = open(args.log, "a", encoding="utf-8") if args.log else None  # noqa: SIM115
    engine = Engine(config, EventLog(out))
    server = Server(("127.0.0.1", args.port), _handler(engine))
    started = time.monotonic()

    def stop_listening() -> None:
        server.shutdown()
        server.server_close()

    def on_sigterm(_signum: int, _frame: object) -> None:
        if engine.sigterm_at is not None:
            return
        engine.sigterm_at = time.monotonic()
        engine.log("sigterm")
        if config.kind == "vllm":
            threading.Thread(target=engine.on_sigterm_vllm, args=(stop_listening,)).start()

    signal.signal(signal.SIGTERM, on_sigterm)
    if config.kind == "sglang":
        origin = started if args.watchdog_origin is None else args.watchdog_origin
        threading.Thread(target=engine.sglang_watchdog, args=(origin,), daemon=True).start()
        if config.idle_lag > 0:
            threading.Thread(target=engine.publisher, daemon=True).start()
    port = server.server_address[1]
    engine.log("ready", port=port, pid=os.getpid())
    sys.stdout.write(f"READY {port}\n")
    sys.stdout.flush()
    server.serve_forever(poll_interval=0.02)
    threading.Event().wait()  # vLLM stopped listening: the SIGTERM thread ends the process


if __name__ == "__main__":
    main()
