"""The simulated engine as a process: `python -m rehearsal.engine --kind vllm|sglang ...`.

A thin runner over drainhook's engine model (sim/): it scales the
timeline, serves on 127.0.0.1 and a free port (or `--port`), prints `READY <port> <origin>`
on stdout (origin: the time.monotonic() SGLang's SIGTERM watchdog counts
from), turns SIGTERM into the model's shutdown and ends the process when the
model says it exited (a vLLM engine with a stalled stream never does: the
kubelet's SIGKILL ends it, and its streams with it). Each request's duration
is drawn from `--durations` (uniform) by its `user` id and `--seed`, so every
run of a scenario serves the same requests for the same time.

Every event (ready, each /metrics or /v1/loads read, SIGTERM, notice, stall,
listener closed, exit) goes to `--log` as one JSON line stamped with
time.monotonic(), which all processes of a run share.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any, TextIO

from rehearsal.timeline import (
    SGLANG_EXIT,
    SGLANG_LOG_INTERVAL,
    SGLANG_NOTICE,
    SGLANG_STREAM_TAIL,
    TOKEN_TICK,
    VLLM_CORE_KILL,
    VLLM_EXIT,
    VLLM_LISTENER_CLOSE,
    VLLM_TEARDOWN,
    Scale,
)
from sim import EngineConfig, SimEngine, SimServer
from sim.model import Duration, tokens_duration

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


def drawn(seed: int | str, low: float, high: float, scale: Scale) -> Duration:
    """Each request's duration, uniform in [low, high] real seconds, by its `user` id."""

    def duration(request: Mapping[str, Any]) -> float:
        rid = str(request.get("user", ""))
        return scale(random.Random(f"{seed}:{rid}").uniform(low, high))

    return duration


def durations(args: argparse.Namespace) -> Duration:
    """`--durations`: uniform:LOW:HIGH real seconds drawn by `user` id, or `tokens`: each
    request lasts its `max_tokens` events, one a token tick, as a real engine's does
    (what the conformance episodes ask for, tests/support/conformance.py)."""
    if args.durations == "tokens":
        return tokens_duration(max(0.01, Scale(args.scale)(TOKEN_TICK)))
    kind, low, high = args.durations.split(":")
    if kind != "uniform":
        raise SystemExit(f"unknown distribution {kind!r}")
    return drawn(args.seed, float(low), float(high), Scale(args.scale))


def renders(args: argparse.Namespace) -> Duration | None:
    """`--render`: each request's render (real seconds), uniform:LOW:HIGH by `user` id."""
    if not args.render:
        return None
    kind, low, high = args.render.split(":")
    if kind != "uniform":
        raise SystemExit(f"unknown distribution {kind!r}")
    return drawn(args.seed + ":render", float(low), float(high), Scale(args.scale))


def config(args: argparse.Namespace) -> EngineConfig:
    """The model's configuration, every duration scaled."""
    f = Scale(args.scale)
    return EngineConfig(
        kind=args.kind,
        role=args.role,
        dp=args.dp,
        max_running=args.max_running,
        route=None if args.route == "rr" else int(args.route),
        model=MODEL,
        token_seconds=max(0.01, f(TOKEN_TICK)),
        api_servers=args.api_servers,
        shutdown_timeout=f(args.shutdown_timeout),
        core_seconds=f(VLLM_CORE_KILL),
        listener_seconds=f(VLLM_LISTENER_CLOSE),
        exit_seconds=f(VLLM_EXIT if args.kind == "vllm" else SGLANG_EXIT),
        teardown_seconds=(f(VLLM_TEARDOWN[0]), f(VLLM_TEARDOWN[1])),
        teardown_seed=args.teardown_seed,
        notice_seconds=f(SGLANG_NOTICE),
        stream_tail=f(SGLANG_STREAM_TAIL) if args.kind == "sglang" else 0.0,
        notice_origin=args.watchdog_origin,
        exit_after_sigterm=f(args.exit_after_sigterm),
        idle_lag=f(args.idle_lag),
        publish_seconds=f(SGLANG_LOG_INTERVAL),
        metrics_hang=args.metrics_hang,
        prefill_seconds=f(args.prefill),
        kv_wait_seconds=f(args.kv_wait),
        freeze_after=None if args.freeze_after is None else f(args.freeze_after),
        render_serial=args.render_serial,
        step_gauges=args.step_gauges,
        load_tracking=args.load_tracking,
        refresh_iterations=args.refresh_iterations,
    )


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m rehearsal.engine", description=__doc__)
    p.add_argument("--kind", choices=("vllm", "sglang"), default="vllm")
    p.add_argument("--role", choices=("unified", "prefill", "decode"), default="unified")
    p.add_argument("--dp", type=int, default=2, help="DP engines (vLLM `engine` label)")
    p.add_argument("--max-running", type=int, default=4, help="running requests per DP engine")
    p.add_argument("--route", default="rr", help="rr, or the DP rank every request goes to")
    p.add_argument("--api-servers", type=int, default=1, help="vLLM API server processes")
    p.add_argument(
        "--durations",
        default="uniform:0.5:2",
        help="uniform:LOW:HIGH (real seconds), or tokens",
    )
    p.add_argument("--seed", default="1", help="request durations are drawn from this and the id")
    p.add_argument(
        "--teardown-seed",
        default="1",
        help="vLLM --shutdown-timeout: the core's teardown is drawn in its range from this",
    )
    p.add_argument("--scale", type=float, default=1.0, help="multiply every duration by this")
    p.add_argument("--shutdown-timeout", type=float, default=0.0, help="vLLM, real seconds")
    p.add_argument("--idle-lag", type=float, default=0.0, help="SGLang gauge lag, real seconds")
    p.add_argument("--exit-after-sigterm", type=float, default=0.0, help="SGLang PD exit time")
    p.add_argument("--metrics-hang", action="store_true", help="/metrics never answers")
    p.add_argument("--prefill", type=float, default=0.0, help="each request's prefill, real s")
    p.add_argument("--kv-wait", type=float, default=0.0, help="each request's KV pull, real s")
    p.add_argument("--render", default="", help="each request's render: uniform:LOW:HIGH, real s")
    p.add_argument(
        "--render-serial", action="store_true", help="vLLM: one render at a time per API server"
    )
    p.add_argument("--step-gauges", action="store_true", help="vLLM: gauges set after each step")
    p.add_argument(
        "--load-tracking", action="store_true", help="vLLM --enable-server-load-tracking"
    )
    p.add_argument(
        "--refresh-iterations",
        type=int,
        default=0,
        help="SGLang: gauges set at each prefill and every N decode steps (0: live)",
    )
    p.add_argument(
        "--freeze-after", type=float, help="freeze this long after the first request, real s"
    )
    p.add_argument(
        "--watchdog-origin",
        type=float,
        help="SGLang: time.monotonic() its SIGTERM watchdog's 5 s grid runs from (default: start)",
    )
    p.add_argument("--log", help="JSON-lines event log")
    p.add_argument("--port", type=int, default=0, help="listen here (default: a free port)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    duration = durations(args)
    out = open(args.log, "a", encoding="utf-8") if args.log else None  # noqa: SIM115
    log = EventLog(out)
    engine = SimEngine(config(args), duration=duration, render=renders(args), log=log)
    signal.signal(signal.SIGTERM, lambda _signum, _frame: engine.sigterm())
    with SimServer(engine, args.port) as server:
        log("ready", port=server.port, pid=os.getpid())
        origin = engine.config.notice_origin
        origin = engine.started if origin is None else origin
        sys.stdout.write(f"READY {server.port} {origin!r}\n")
        sys.stdout.flush()
        # Short waits: SIGTERM may land on a server thread, and its Python handler
        # runs only when this thread wakes (a 0.5 s wait delayed it up to 0.5 s).
        while not engine.exited.wait(0.02):
            pass
    os._exit(0)  # streams still open die with the process, as the engine's would


if __name__ == "__main__":
    main()
