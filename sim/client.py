"""One streaming completion against an engine on loopback, and how it ended for the client.

- `completed`: the last event's finish_reason is not "abort", then `[DONE]`;
- `cut`: the stream ended early (reset, closed: a stream that stalled until
  the process was killed ends so, truncated), or was aborted after tokens;
- `refused`: the connection was refused, the answer was not 2xx (vLLM with
  `--shutdown-timeout` answers a new request with HTTP 500 while it drains),
  or it was an empty completion with finish_reason "abort".

`connected` is when its connection was accepted: a refusal on a connection
accepted before SIGTERM is a request the engine had taken (the rehearsal
counts it cut). `first` and `last` are when the first and the last event came: a stream that
stalled shows a gap from `last` to when it ended.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

COMPLETED, CUT, REFUSED = "completed", "cut", "refused"


@dataclass(frozen=True)
class RequestOutcome:
    outcome: str  # completed | cut | refused
    tokens: int = 0  # events that carried text
    finish_reason: str | None = None
    first: float | None = None  # time.monotonic() of the first event
    detail: str = ""
    last: float | None = None  # time.monotonic() of the last event
    connected: float | None = None  # time.monotonic() its connection was accepted


def complete(port: int, body: Mapping[str, Any], timeout: float = 30.0) -> RequestOutcome:
    """POST one streaming completion to 127.0.0.1:port and read it to its end."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        try:
            conn.connect()
        except ConnectionRefusedError:
            return RequestOutcome(REFUSED, detail="connection refused")
        connected = time.monotonic()
        conn.request(
            "POST", "/v1/completions", json.dumps(dict(body)), {"Content-Type": "application/json"}
        )
        response = conn.getresponse()
        if not 200 <= response.status < 300:
            response.read()
            return RequestOutcome(REFUSED, detail=f"HTTP {response.status}", connected=connected)
        return dataclasses.replace(_read_stream(response), connected=connected)
    except (OSError, http.client.HTTPException, ValueError, LookupError, TypeError) as exc:
        return RequestOutcome(CUT, detail=f"{type(exc).__name__}: {exc}")
    finally:
        conn.close()


def _read_stream(response: http.client.HTTPResponse) -> RequestOutcome:
    tokens, finish, first, last = 0, None, None, None
    try:
        while line := response.readline():
            if not line.startswith(b"data: "):
                continue
            last = time.monotonic()
            first = last if first is None else first
            data = line[len(b"data: ") :].strip()
            if data == b"[DONE]":
                if finish != "abort":
                    return RequestOutcome(COMPLETED, tokens, finish, first, last=last)
                if tokens == 0:
                    why = "empty completion, finish_reason abort"
                    return RequestOutcome(REFUSED, 0, finish, first, why, last)
                return RequestOutcome(CUT, tokens, finish, first, "aborted after tokens", last)
            choice = json.loads(data)["choices"][0]
            tokens += 1 if choice.get("text") else 0
            finish = choice.get("finish_reason") or finish
    except (OSError, http.client.HTTPException) as exc:
        return RequestOutcome(CUT, tokens, finish, first, f"{type(exc).__name__}: {exc}", last)
    return RequestOutcome(CUT, tokens, finish, first, "stream ended early", last)
