"""What the simulated engine's HTTP server counts itself, apart from its scheduler.

Read in the engines' code (CONTRACT §2a):

- vLLM 0.32's `GET /load` (`load_aware_call`, `entrypoints/serve/utils/
  api_utils.py`): `{"server_load": N}`, N one process's count of inference
  requests, +1 when the handler starts (after the body is parsed), -1 after
  the response's last byte, on an error or a disconnect. The route is always
  there: without `--enable-server-load-tracking` it answers 0. With several
  API servers each process counts its own and one GET reaches one of them.
- SGLang 0.5.23's `sglang:http_requests_active{endpoint,method}` (pure-ASGI
  middleware, `observability/http_request_metrics.py`): +1 before the body is
  read, -1 after the whole response, stream included, and after the response's
  background task: a streamed response's abort task sleeps 2 s, so the count
  stays up about 2 s after its last byte (measured live: 2.0 s). Every path
  counts, the `/metrics` scrape itself too. A series appears once its path was
  first used.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter

COMPLETIONS = ("/v1/completions", "POST")


class ServerCounts:
    """The server's own counts: vLLM's per-process load, SGLang's active requests."""

    def __init__(self, api_servers: int = 1) -> None:
        self._lock = threading.Lock()
        self._load = [0] * max(1, api_servers)
        self._next_request = itertools.count()
        self._next_read = itertools.count()
        self._active: Counter[tuple[str, str]] = Counter()
        self._tail: Counter[tuple[str, str]] = Counter()  # responses done, not yet counted off

    def begin(self, endpoint: str, method: str) -> None:
        with self._lock:
            self._active[(endpoint, method)] += 1

    def end(self, endpoint: str, method: str, tail: float = 0.0) -> None:
        """The response is done; it stays in `active()` `tail` s more (SGLang's stream)."""
        with self._lock:
            self._active[(endpoint, method)] -= 1
            if tail > 0:
                self._tail[(endpoint, method)] += 1
        if tail > 0:
            timer = threading.Timer(tail, self._tail_end, (endpoint, method))
            timer.daemon = True
            timer.start()

    def _tail_end(self, endpoint: str, method: str) -> None:
        with self._lock:
            self._tail[(endpoint, method)] -= 1

    def active(self) -> dict[tuple[str, str], int]:
        """SGLang's `http_requests_active`, by (endpoint, method) ever used."""
        with self._lock:
            return {key: n + self._tail[key] for key, n in self._active.items()}

    def completions(self) -> int:
        """Completion requests the server holds, from their first byte to their last."""
        with self._lock:
            return self._active[COMPLETIONS]

    def load_begin(self) -> int:
        """An inference handler starts; the API server process it landed on."""
        with self._lock:
            process = next(self._next_request) % len(self._load)
            self._load[process] += 1
            return process

    def load_end(self, process: int) -> None:
        with self._lock:
            self._load[process] -= 1

    def handlers(self) -> int:
        """Inference handlers running, over every API server process."""
        with self._lock:
            return sum(self._load)

    def load(self) -> int:
        """What one `GET /load` reads: the count of the process it reaches."""
        with self._lock:
            return self._load[next(self._next_read) % len(self._load)]
