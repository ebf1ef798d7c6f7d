"""The client load generator: `python -m rehearsal.load --out FILE`.

Once started it prints `READY` and reads its work from stdin: a JSON object
`{"port": P, "plan": [{"id": ..., "at": MONOTONIC}, ...]}` (so that a runner
can start it beside the engine and fix the timeline once both are up). One
streaming `POST /v1/completions` per entry, sent at `at` on its own thread and
connection (sim.client: the demo's client). Every request ends in
exactly one outcome, written at once as a JSON line to `--out` (stamped with
time.monotonic(), which the engine and the runner share):

- `completed`: the final `data: [DONE]` event arrived after a normal finish;
- `cut`: the stream ended early, the connection was reset or closed (a
  stream that stalled until the engine was killed ends so), or the engine
  aborted it after tokens;
- `refused`: the connection was refused, the engine answered non-2xx (vLLM
  draining with `--shutdown-timeout` answers HTTP 500), or it answered an
  empty completion with finish_reason "abort".
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any, TextIO

from sim.client import complete

MODEL = "rehearsal/Sim-8B"


def request(port: int, request_id: str, timeout: float) -> dict[str, Any]:
    """One streaming completion; its outcome and when each part happened."""
    sent = time.monotonic()
    body = {"model": MODEL, "prompt": "hi", "stream": True, "user": request_id}
    got = complete(port, body, timeout)
    return {
        "id": request_id,
        "sent": sent,
        "first": got.first,
        "last": got.last,
        "outcome": got.outcome,
        "tokens": got.tokens,
        "finish_reason": got.finish_reason,
        "detail": got.detail,
        "connected": got.connected,
    }


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
    p.add_argument("--out", required=True, help="JSON-lines records, one per request")
    p.add_argument("--timeout", type=float, default=60.0, help="socket timeout per operation")
    args = p.parse_args(argv)
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    work = json.loads(sys.stdin.read())
    port, plan = int(work["port"]), work["plan"]
    lock = threading.Lock()
    with open(args.out, "a", encoding="utf-8") as out:
        threads = [
            threading.Thread(target=_run_one, args=(port, entry, args.timeout, out, lock))
            for entry in plan
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


if __name__ == "__main__":
    main()
