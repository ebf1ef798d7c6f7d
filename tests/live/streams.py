"""Completions on threads and the engine's own gauges, for the live cases."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from tests.live.conftest import Hook
from tests.live.engine import LiveVllm, body
from tests.support import conformance


class Streams:
    """Completions on threads; each one's record (conformance.Ended) as its client saw it."""

    def __init__(self, engine: LiveVllm) -> None:
        self.engine = engine
        self.ended: list[conformance.Ended] = []
        self.sent: list[float] = []
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()

    def send(self, seconds: float) -> conformance.Ended:
        out = conformance.Ended()
        self.ended.append(out)
        self.sent.append(time.monotonic())
        request = body(self.engine.tokens(seconds), f"stream-{len(self.ended)}")
        thread = threading.Thread(
            target=conformance.send,
            args=(self.engine.port, request, out),
            kwargs={"stop": self._stop},
            daemon=True,
        )
        thread.start()
        self._threads.append(thread)
        return out

    def join(self, timeout: float = 120) -> list[conformance.Ended]:
        for thread in self._threads:
            thread.join(timeout)
        for sent, s in zip(self.sent, self.ended, strict=True):
            self.engine.durations.append((s.last_byte or sent) - sent)
        return self.ended

    def close(self, timeout: float = 30) -> list[conformance.Ended]:
        """Every client closes its connection at its next chunk (the engine aborts
        those requests); returns once they have all gone."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)
        return self.ended


def gauges(engine: LiveVllm) -> tuple[float, float]:
    """(running, waiting) as the engine's own /metrics shows them now."""
    samples = engine.metrics()
    running = sum(v for k, v in samples.items() if k.startswith("vllm:num_requests_running{"))
    waiting = sum(v for k, v in samples.items() if k.startswith("vllm:num_requests_waiting{"))
    return running, waiting


def probe(hook: Hook, engine: LiveVllm) -> tuple[int, dict[str, Any]]:
    run = hook("probe", "--json", "--url", engine.url())
    return run.code, json.loads(run.stdout)


def assert_complete(ended: list[conformance.Ended]) -> None:
    for s in ended:
        assert (s.kind, s.done, s.finish) == ("pending", True, "length"), s
        assert s.tokens == s.asked, s  # every token asked for came
