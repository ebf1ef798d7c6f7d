"""What a live SGLang shows, read as a user would, and requests a test sends it."""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
from typing import Any

from tests.live.engine import LiveVllm
from tests.support import conformance

# The path the tier's requests take, and the paths whose scrape is no work.
COMPLETIONS = "/v1/completions"
GENERATE = "/generate"
# A prompt of about 1,800 tokens (the model's context is 2,048): its prefill takes
# 1.2-1.6 s here. A fresh random head each time, so that SGLang's radix cache
# cannot serve it from an earlier one.
PROMPT_REPEATS = 290


def long_prompt() -> str:
    return f"{random.getrandbits(64):x} " + "the engine drains a request " * PROMPT_REPEATS


def gauges(engine: LiveVllm) -> tuple[float, float]:
    """(sglang:num_running_reqs, sglang:num_queue_reqs) on /metrics now."""
    got = engine.metrics().items()
    run = sum(v for k, v in got if k.startswith("sglang:num_running_reqs{"))
    queue = sum(v for k, v in got if k.startswith("sglang:num_queue_reqs{"))
    return run, queue


def loads(engine: LiveVllm) -> int:
    """Running + waiting over the ranks of GET /v1/loads."""
    status, body = engine.get("/v1/loads")
    if status != 200:
        raise AssertionError(f"/v1/loads answered {status}")
    ranks = json.loads(body)["loads"]
    return sum(int(r["num_running_reqs"]) + int(r["num_waiting_reqs"]) for r in ranks)


def completion(tokens: int, prompt: str, user: str) -> dict[str, Any]:
    """A streamed /v1/completions of exactly `tokens` tokens for `prompt`."""
    return {
        "model": "live", "prompt": prompt, "max_tokens": tokens, "min_tokens": tokens,
        "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
        "user": user,
    }  # fmt: skip


class Request:
    """One streamed request on a thread: when its headers and its first and last
    data came (monotonic), and how it ended (conformance.Ended)."""

    def __init__(self, engine: LiveVllm, path: str, tokens: int, prompt: str) -> None:
        self.out = conformance.Ended(asked=tokens)
        self.sent = time.monotonic()
        self.headers: float | None = None
        self.first: float | None = None
        if path == GENERATE:
            body: dict[str, Any] = {
                "text": prompt, "stream": True,
                "sampling_params": {"max_new_tokens": tokens, "min_new_tokens": tokens,
                                    "ignore_eos": True},
            }  # fmt: skip
        else:
            body = completion(tokens, prompt, "request")
        self._thread = threading.Thread(
            target=self._run, args=(engine.port, path, body), daemon=True
        )
        self._thread.start()

    def _run(self, port: int, path: str, body: dict[str, Any]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            response = conn.getresponse()
            self.headers = time.monotonic()
            self.out.status = response.status
            while line := response.readline():
                now = time.monotonic()
                self.out.last_byte = now
                if not line.startswith(b"data: "):
                    continue
                self.first = self.first or now
                data = line[len(b"data: ") :].strip()
                if data == b"[DONE]":
                    self.out.done = True
                    continue
                event = json.loads(data)
                self.out.error = self.out.error or "error" in event
                if event.get("usage"):
                    self.out.tokens = int(event["usage"]["completion_tokens"])
                for choice in event.get("choices") or []:
                    self.out.finish = choice.get("finish_reason") or self.out.finish
                if "meta_info" in event:  # /generate: its own shape
                    self.out.tokens = int(event["meta_info"]["completion_tokens"])
                    finish = event["meta_info"].get("finish_reason") or {}
                    self.out.finish = finish.get("type") or self.out.finish
        except (OSError, http.client.HTTPException, ValueError, LookupError) as exc:
            self.out.detail = f"{type(exc).__name__}: {exc}"
        finally:
            self.out.ended = time.monotonic()
            conn.close()

    def join(self, timeout: float = 120) -> conformance.Ended:
        self._thread.join(timeout)
        return self.out

    def complete(self) -> bool:
        o = self.out
        return o.status == 200 and o.done and o.finish == "length" and o.tokens == o.asked


def reads(stderr: str, spawned: float) -> list[dict[str, Any]]:
    """The hook's read lines (--log-format json), each with `at`: when it ended (monotonic)."""
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    return [{**r, "at": spawned + r["t"]} for r in lines if r.get("event") == "read"]
