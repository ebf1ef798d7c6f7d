"""scripts/demo (`python -m sim`): the simulated engine with live streams, drained."""

from __future__ import annotations

import threading
import time

import click

from sim.client import COMPLETED, CUT, RequestOutcome, complete
from sim.model import EngineConfig, SimEngine
from sim.server import SimServer

TOKENS = (20, 30, 45, 50, 60)  # streams of 50 ms tokens: 1.0 .. 3.0 s


def run_demo() -> int:
    """Start the engine, send streams, drain it with the hook; return the hook's exit code."""
    from drainhook.hook.config import WaitConfig
    from drainhook.reading.config import ReadConfig
    from drainhook.reading.target import parse_url

    def say(line: str) -> None:
        click.echo(line, err=True)

    engine = SimEngine(EngineConfig(dp=2, max_running=2, token_seconds=0.05))
    with SimServer(engine) as server:
        url = server.url("/metrics")
        say(f"demo: simulated vLLM engine (2 DP engines, 2 slots each) at {url}")
        outcomes: list[RequestOutcome] = []
        body = {"model": engine.config.model, "prompt": "hi", "stream": True}
        clients = [
            threading.Thread(
                target=lambda n=n: outcomes.append(complete(server.port, {**body, "max_tokens": n}))
            )
            for n in TOKENS
        ]
        for c in clients:
            c.start()
        while engine.in_flight() < len(TOKENS):
            time.sleep(0.01)
        say(f"demo: {len(TOKENS)} streaming requests in flight; the Pod is deleted now")
        config = WaitConfig(
            reach=ReadConfig(target=parse_url(url)),
            grace=10.0,
            settle=1.0,
            exit_reserve=2.0,
            interval=0.5,
        )
        say(
            f"demo: drainhook wait --url {url} --grace 10 --settle 1 --exit-reserve 2 "
            "--interval 0.5   (deadline D = 8 s; shrunk for the demo, so the hook's first "
            "lines warn that a Pod needs more)"
        )
        from drainhook.hook.run import run_wait

        code = run_wait(config, time.monotonic())
        for c in clients:
            c.join(timeout=5)
        done = sum(o.outcome == COMPLETED for o in outcomes)
        cut = sum(o.outcome == CUT for o in outcomes)
        say(f"demo: requests completed {done}/{len(TOKENS)}, cut {cut}")
        say(
            "demo: SIGTERM may be sent now: no request is left to stall until the kill"
            if code == 0
            else f"demo: the hook ended without confirming idle (exit {code})"
        )
        return code
