"""What the hook's reads cost a stream still running on a live vLLM (issue 27).

One engine (the live tier's: vLLM's CPU build, the random-weight model of
scripts/live_model.py, the engine's session at nice 10), then, interleaved,
--runs times each: one stream of --seconds alone; the same stream with
`drainhook wait --interval 4` beside it (one request: the hook reads every
I/4 = 1 s, what the old cadence did at I = 1 s); and with `drainhook wait
--interval 1` (every 0.25 s, the new cadence's fast reads at the default I).
Per run: the stream's tokens per second, as its client saw them (tokens over
send to last byte), and the hook's reads.

    DRAINHOOK_LIVE_PYTHON=.venv-live/bin/python DRAINHOOK_LIVE_MODEL=.live/model \\
        .venv/bin/python benchmarks/read_cost.py --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _bench  # noqa: F401 (puts the repository root on sys.path)

from tests.live.engine import LiveVllm
from tests.live.streams import Streams, gauges
from tests.support.process import base_env

CASES = {"none": None, "every 1 s": "4", "every 0.25 s": "1"}


def cpu_s(pid: int) -> float:
    """utime + stime of pid, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one(engine: LiveVllm, hook: list[str], interval: str | None, seconds: float) -> dict[str, Any]:
    api_before = cpu_s(engine.pid)
    streams = Streams(engine)
    stream = streams.send(seconds)
    sent = streams.sent[0]
    deadline = time.monotonic() + 10
    while gauges(engine) != (1, 0):  # the hook's first read sees the stream, never idle
        if time.monotonic() > deadline:
            raise RuntimeError("the stream never ran")
        time.sleep(0.02)
    proc = None
    if interval is not None:
        args = ["wait", "--url", engine.url(), "--settle", "0", "--interval", interval]
        args += ["--grace", "120", "--log-format", "json", "--termination-log", ""]
        proc = subprocess.Popen(
            [*hook, *args], env=base_env(), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
            text=True,
        )  # fmt: skip
    streams.join()
    reads = None
    if proc is not None:
        _, err = proc.communicate(timeout=60)
        lines = [json.loads(x) for x in err.splitlines() if x.startswith("{")]
        during = [x for x in lines if x.get("event") == "read" and x.get("verdict") == "busy"]
        reads = len(during)
    if not stream.done or stream.last_byte is None:
        raise RuntimeError(f"stream did not complete: {stream}")
    deadline = time.monotonic() + 10
    while gauges(engine) != (0, 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    elapsed = stream.last_byte - sent
    api = cpu_s(engine.pid) - api_before  # the API server's CPU over the stream and its reads
    return {"tokens": stream.tokens, "elapsed_s": round(elapsed, 3),
            "tokens_per_s": round(stream.tokens / elapsed, 2), "busy_reads": reads,
            "api_server_cpu_s": round(api, 3)}  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5, help="runs of each case, interleaved")
    p.add_argument("--seconds", type=float, default=8.0, help="the stream's length")
    p.add_argument("--json", type=Path, help="write every run here")
    args = p.parse_args()
    python = os.environ["DRAINHOOK_LIVE_PYTHON"]
    model = Path(os.environ["DRAINHOOK_LIVE_MODEL"])
    binary = os.environ.get("DRAINHOOK_BINARY", "")
    hook = [binary] if binary else [sys.executable, "-m", "drainhook"]
    log = Path(os.environ.get("DRAINHOOK_LIVE_LOGS", ".live/logs")) / "read-cost.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    engine = LiveVllm(python, model, log=log)
    results: list[dict[str, Any]] = []
    try:
        engine.start()
        print(f"engine up in {engine.startup:.1f} s, {engine.rate:.1f} tokens/s", flush=True)
        for i in range(args.runs):
            for case, interval in CASES.items():
                run = {"case": case, "run": i, **one(engine, hook, interval, args.seconds)}
                results.append(run)
                print(json.dumps(run), flush=True)
    finally:
        engine.kill()
    base = statistics.median(r["tokens_per_s"] for r in results if r["case"] == "none")
    for case in CASES:
        rates = [r["tokens_per_s"] for r in results if r["case"] == case]
        reads = [r["busy_reads"] for r in results if r["case"] == case and r["busy_reads"]]
        median = statistics.median(rates)
        api = statistics.median(r["api_server_cpu_s"] for r in results if r["case"] == case)
        print(
            f"{case:13} tokens/s median {median:.2f} (min {min(rates):.2f}, "
            f"max {max(rates):.2f}; {100 * (median / base - 1):+.1f} %)"
            + f", API server CPU per stream {api:.2f} s"
            + (f", busy reads per stream {statistics.median(reads):g}" if reads else "")
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
