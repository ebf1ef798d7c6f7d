"""The client load generator: `python -m rehearsal.load --port P --plan FILE --out FILE`.

The plan is a JSON list of `{"id": ..., "at": MONOTONIC}`: one streaming
`POST /v1/completions` per entry, sent at `at` on its own thread and
connection. Every request ends in exactly one outcome, written at once as a
JSON line to `--out` (stamped with time.monotonic(), which the engine and the
runner share):

- `completed`: the final `data: [DONE]` event arrived;
- `cut`: the stream ended early, or the connection was reset or closed;
- `refused`: the connection was refused, or the engine answered non-2xx
  (vLLM draining answers 503).
"""

from __future__ import annotations

import argparse
import http.client
import json
import threading
import time
from typing import Any, TextIO


def request(port: int, request_id: str, timeout: float) -> dict[str, Any]:
    """One streaming completion; its outcome and when each part happened."""
    record: dict[str, Any] = {"id": request_id, "sent": time.monotonic(), "first": None}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    body = json.dumps(
        {"model": "rehearsal/Sim-8B", "prompt": "hi", "stream": True, "user": request_id}
    )
    try:
        try:
            conn.connect()
        except ConnectionRefusedError:
            return {**record, "outcome": "refused", "detail": "connection refused"}
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        if not 200 <= response.status < 300:
            response.read()
            return {**record, "outcome": "refused", "detail": f"HTTP {response.status}"}
        events = 0
        while line := response.readline():
            if not line.startswith(b"data: "):
                continue
            if record["first"] is None:
                record["first"] = time.monotonic()
            if line.rstrip() == b"data: [DONE]":
                return {**record, "outcome": "completed", "events": events}
            events += 1
        return {**record, "outcome": "cut", "events": events, "detail": "stream ended early"}
    except (OSError, http.client.HTTPException) as exc:
        return {**record, "outcome": "cut", "detail": f"{type(exc).__name__}: {exc}"}
    finally:
        conn.close()


def _run_one(
    port: int, entry: dict[str, Any], timeout: float, out: TextIO, lock: threading.Lock
) -> None:
    time.sleep(max(0.0, float(entry["at"]) - time.monotonic()))
    record = request(port, str(entry["id"]), timeout)
    record["end"] = time.monotonic()
    with lock:
        out.write(json.dumps(record) + "\n")
        out.flush()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m rehearsal.load", description=__doc__)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--plan", required=True, help="JSON list of {id, at}")
    p.add_argument("--out", required=True, help="JSON-lines records, one per request")
    p.add_argument("--timeout", type=float, default=60.0, help="socket timeout per operation")
    args = p.parse_args(argv)
    with open(args.plan, encoding="utf-8") as f:
        plan = json.load(f)
    lock = threading.Lock()
    with open(args.out, "a", encoding="utf-8") as out:
        threads = [
            threading.Thread(target=_run_one, args=(args.port, entry, args.timeout, out, lock))
            for entry in plan
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


if __name__ == "__main__":
    main()
