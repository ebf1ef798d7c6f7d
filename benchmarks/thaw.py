"""A live vLLM's EngineCore frozen and thawed: how long after SIGCONT each progress
counter first moves on /metrics (CONTRACT §2b; issue 30).

One engine (the live tier's: vLLM's CPU build, the random-weight model of
scripts/live_model.py, the engine's session at nice 10), then per run: two
streams running, SIGSTOP of `VLLM::EngineCore` for --freeze s, SIGCONT, and
/metrics polled every --poll s until every counter has moved. Per run, from
the SIGCONT: the first read (its start) that saw each progress counter move,
the first byte either stream's client got, and when the EngineCore and its
Worker first used CPU again (/proc/PID/stat). `--load-runs` more runs with
--burners busy loops at nice 0 beside the engine, as the suite's own
processes are (the engine runs at nice 10).

Run with the live tier's environment (scripts/live-vllm makes it):

    DRAINHOOK_LIVE_PYTHON=.venv-live/bin/python DRAINHOOK_LIVE_MODEL=.live/model \\
        .venv/bin/python benchmarks/thaw.py --runs 20 --load-runs 8
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import _bench  # noqa: F401 (puts the repository root on sys.path)

from tests.live.engine import LiveVllm
from tests.live.streams import Streams, gauges

COUNTERS = (
    "vllm:generation_tokens_total",
    "vllm:iteration_tokens_total_count",
    "vllm:iteration_tokens_total_sum",
)


def summed(samples: dict[str, float], name: str) -> float:
    return sum(v for k, v in samples.items() if k.split("{", 1)[0] == name)


def cpu_ticks(pid: int) -> int:
    """utime + stime of pid, in clock ticks."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def burn() -> None:  # pragma: no cover (a child process)
    while True:
        pass


def one_run(engine: LiveVllm, freeze: float, poll: float, limit: float) -> dict[str, Any]:
    streams = Streams(engine)
    seconds = freeze + 12.0
    ends = [streams.send(seconds), streams.send(seconds)]
    deadline = time.monotonic() + 20
    while gauges(engine) not in ((2, 0), (1, 1)):  # (1, 1) with --max-num-seqs 1
        if time.monotonic() > deadline:
            raise RuntimeError("two streams never ran together")
        time.sleep(0.02)
    time.sleep(1.0)  # decoding steadily
    core = engine.engine_core()
    workers = children(core)
    os.kill(core, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        time.sleep(max(0.0, freeze - 0.3))
        frozen = engine.metrics()  # what the API server had taken in before the freeze, all
        time.sleep(max(0.0, freeze - (time.monotonic() - stopped)))
        ticks = {p: cpu_ticks(p) for p in [core, *workers]}
        last_bytes = [e.last_byte or 0.0 for e in ends]
    finally:
        thaw = time.monotonic()
        os.kill(core, signal.SIGCONT)
    first: dict[str, float | None] = dict.fromkeys(COUNTERS)
    cpu_first: dict[int, float | None] = dict.fromkeys(ticks)
    read_ms: list[float] = []
    while time.monotonic() - thaw < limit:
        start = time.monotonic()
        samples = engine.metrics()
        read_ms.append((time.monotonic() - start) * 1000)
        for name in COUNTERS:
            if first[name] is None and summed(samples, name) != summed(frozen, name):
                first[name] = start - thaw
        for pid in ticks:
            if cpu_first[pid] is None and cpu_ticks(pid) > ticks[pid]:
                cpu_first[pid] = time.monotonic() - thaw
        if all(v is not None for v in first.values()):
            break
        time.sleep(max(0.0, start + poll - time.monotonic()))
    byte = [
        (e.last_byte - thaw) if e.last_byte and e.last_byte > max(lb, thaw) else None
        for e, lb in zip(ends, last_bytes, strict=True)
    ]
    streams.close()
    deadline = time.monotonic() + 30
    while gauges(engine) != (0, 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    return {
        "counter_s": {k: None if v is None else round(v, 3) for k, v in first.items()},
        "first_byte_s": min((b for b in byte if b is not None), default=None),
        "core_cpu_s": None if cpu_first[core] is None else round(cpu_first[core], 3),
        "worker_cpu_s": [None if cpu_first[w] is None else round(cpu_first[w], 3) for w in workers],
        "read_ms_max": round(max(read_ms), 1),
        "read_ms_first": round(read_ms[0], 1),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=20, help="runs on an otherwise idle engine")
    p.add_argument("--load-runs", type=int, default=8, help="runs with the burners beside")
    p.add_argument("--burners", type=int, default=2, help="busy loops at nice 0 (load runs)")
    p.add_argument("--freeze", type=float, default=3.0, help="seconds SIGSTOPped")
    p.add_argument("--poll", type=float, default=0.05, help="seconds between /metrics reads")
    p.add_argument("--limit", type=float, default=20.0, help="give up on a run after this")
    p.add_argument("--engine-flags", default="", help="more vLLM flags (--max-num-seqs 1)")
    p.add_argument("--json", type=Path, help="write every run here")
    args = p.parse_args()
    python = os.environ["DRAINHOOK_LIVE_PYTHON"]
    model = Path(os.environ["DRAINHOOK_LIVE_MODEL"])
    log = Path(os.environ.get("DRAINHOOK_LIVE_LOGS", ".live/logs")) / "thaw.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    engine = LiveVllm(python, model, *args.engine_flags.split(), log=log)
    results: list[dict[str, Any]] = []
    try:
        engine.start()
        print(f"engine up in {engine.startup:.1f} s, {engine.rate:.1f} tokens/s", flush=True)
        plan = [("idle", i) for i in range(args.runs)]
        plan += [("load", i) for i in range(args.load_runs)]
        burners: list[multiprocessing.Process] = []
        for kind, i in plan:
            if kind == "load" and not burners:
                for _ in range(args.burners):
                    b = multiprocessing.Process(target=burn, daemon=True)
                    b.start()
                    burners.append(b)
                time.sleep(1.0)
            run = {"kind": kind, "run": i, **one_run(engine, args.freeze, args.poll, args.limit)}
            results.append(run)
            print(json.dumps(run), flush=True)
        for b in burners:
            b.kill()
    finally:
        engine.kill()
    for kind in ("idle", "load"):
        rows = [r for r in results if r["kind"] == kind]
        if not rows:
            continue
        for name in COUNTERS:
            seen = [r["counter_s"][name] for r in rows if r["counter_s"][name] is not None]
            if seen:
                print(
                    f"{kind:5} {name}: n={len(seen)}/{len(rows)} min {min(seen):.3f} "
                    f"median {statistics.median(seen):.3f} max {max(seen):.3f} s"
                )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
