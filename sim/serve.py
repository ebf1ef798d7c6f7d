"""`scripts/demo --serve`: the simulated engine served until interrupted, driven by
hand (lines typed at its terminal, or appended to a control file), so that
`probe`, `probe --watch`, a wrong port and `plan --observe` can be tried without a
GPU. Commands: `run N [SECONDS]` (N streaming requests of SECONDS each; past the
engine's four slots they wait), `freeze` (the engine stops as a SIGSTOPped one:
no token more, /metrics as it was), `quit`."""

from __future__ import annotations

import select
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from sim.client import complete
from sim.model import EngineConfig, SimEngine
from sim.server import SimServer

HELP = (
    "run N [SECONDS] (N streaming requests, 3 s each by default; past 4 they wait), "
    "freeze (the engine stops: its progress counters stay flat), quit"
)


def commands(control: Path | None, typed: bool) -> Iterator[str]:
    """Each command line, as it comes: typed at the terminal, or appended to control."""
    offset = 0
    while True:
        if typed and select.select([sys.stdin], [], [], 0.2)[0]:
            line = sys.stdin.readline()
            typed = bool(line)  # end of input: the control file alone
            yield line
        else:
            time.sleep(0 if typed else 0.2)
        if control is not None and control.exists():
            text = control.read_text()
            yield from text[offset:].splitlines()
            offset = len(text)


def act(engine: SimEngine, port: int, words: list[str]) -> str:
    """What one command did, in words."""
    if words[:1] == ["run"]:
        n = int(words[1]) if len(words) > 1 else 1
        seconds = float(words[2]) if len(words) > 2 else 3.0
        tokens = max(1, round(seconds / engine.config.token_seconds))
        body = {"model": engine.config.model, "prompt": "hi", "stream": True, "max_tokens": tokens}
        for _ in range(n):
            threading.Thread(target=complete, args=(port, body, seconds + 30), daemon=True).start()
        return f"{n} streaming request{'s' if n != 1 else ''} of {seconds:g} s sent"
    if words[:1] == ["freeze"]:
        engine.freeze()
        return "the engine is frozen: requests stay in flight, no token more"
    return f"not a command: {' '.join(words)!r}; {HELP}"


def serve(port: int, control: Path | None, say: Callable[[str], None]) -> int:
    """Serve until `quit` or Ctrl-C."""
    engine = SimEngine(EngineConfig(dp=2, max_running=2, token_seconds=0.05, load_tracking=True))
    with SimServer(engine, port=port) as server:
        url = server.url("/metrics")
        say(f"demo: a simulated vLLM at {url}, until Ctrl-C; in another shell, try:")
        for line in (f"--url {url}", f"--watch --url {url}", f"--port {server.port + 1}"):
            say(f"  drainhook probe {line}")
        say(f"  drainhook plan --observe --url {url}")
        say(f"demo: commands ({'typed here, or ' if sys.stdin.isatty() else ''}"
            f"appended to {control or 'a --control file'}): {HELP}")  # fmt: skip
        try:
            for line in commands(control, sys.stdin.isatty()):
                words = line.split()
                if words == ["quit"]:
                    break
                if words:
                    say(f"demo: {act(engine, server.port, words)}")
        except KeyboardInterrupt:
            pass
    say("demo: stopped")
    return 0
