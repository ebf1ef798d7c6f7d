"""A live vLLM's release after its last stream: `wait` with two streams running, from
the last stream's last byte to the hook's exit (issue 27).

One engine (the live tier's: vLLM's CPU build, the random-weight model of
scripts/live_model.py, the engine's session at nice 10), then --runs times
the live tier's release case: two streams (5 s and 6 s), `drainhook wait
--grace 30 --settle 2` (I = 1 s), and the release: the hook's exit less the
last stream's last byte, and how long the test process and the hook sat
runnable off the CPU. With `--old DIR` (a checkout of an older drainhook,
whose package is DIR/drainhook) each run is done by both hooks, alternating.

    DRAINHOOK_LIVE_PYTHON=.venv-live/bin/python DRAINHOOK_LIVE_MODEL=.live/model \\
        .venv/bin/python benchmarks/release.py --runs 10 [--old DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import _bench  # noqa: F401 (puts the repository root on sys.path)

from tests.live.engine import LiveVllm
from tests.live.streams import Streams, gauges
from tests.support.process import base_env, measure, run_delay


def one(engine: LiveVllm, root: Path) -> dict[str, Any]:
    """One release by the drainhook whose package is root/drainhook (run from root, so
    that nothing else on the path is imported first)."""
    streams = Streams(engine)
    streams.send(5.0)
    streams.send(6.0)
    deadline = time.monotonic() + 20
    while gauges(engine) != (2, 0):
        if time.monotonic() > deadline:
            raise RuntimeError("two streams never ran together")
        time.sleep(0.02)
    before = run_delay()
    argv = [sys.executable, "-m", "drainhook", "wait", "--url", engine.url()]
    argv += ["--grace", "30", "--settle", "2", "--log-format", "json", "--termination-log", ""]
    run = measure(argv, env=base_env({"PYTHONPATH": str(root)}), timeout=60, cwd=root)
    returned = time.monotonic()
    starved = run_delay() - before + run.starved
    ended = streams.join()
    if run.code != 0 or not all(s.done for s in ended):
        raise RuntimeError(f"run went wrong: exit {run.code}\n{run.stderr}")
    last = max(s.last_byte or 0.0 for s in ended)
    reads = [json.loads(x) for x in run.stderr.splitlines() if x.startswith("{")]
    reads = [r for r in reads if r.get("event") == "read"]
    while gauges(engine) != (0, 0):
        time.sleep(0.05)
    return {"release_s": round(returned - last, 3), "starved_s": round(starved, 3),
            "reads": len(reads)}  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=10, help="runs of each hook")
    p.add_argument("--old", type=Path, help="an older checkout's root, run alternately")
    p.add_argument("--json", type=Path, help="write every run here")
    args = p.parse_args()
    python = os.environ["DRAINHOOK_LIVE_PYTHON"]
    model = Path(os.environ["DRAINHOOK_LIVE_MODEL"])
    log = Path(os.environ.get("DRAINHOOK_LIVE_LOGS", ".live/logs")) / "release.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    root = Path(__file__).resolve().parent.parent
    hooks = {"new": root}
    if args.old is not None:
        hooks["old"] = args.old.resolve()
    engine = LiveVllm(python, model, log=log)
    results: list[dict[str, Any]] = []
    try:
        engine.start()
        print(f"engine up in {engine.startup:.1f} s, {engine.rate:.1f} tokens/s", flush=True)
        for i in range(args.runs):
            for name, where in hooks.items():
                run = {"hook": name, "run": i, **one(engine, where)}
                results.append(run)
                print(json.dumps(run), flush=True)
    finally:
        engine.kill()
    for name in hooks:
        rel = [r["release_s"] for r in results if r["hook"] == name]
        print(
            f"{name}: release min {min(rel):.3f} median {statistics.median(rel):.3f} "
            f"mean {statistics.fmean(rel):.3f} max {max(rel):.3f} s ({len(rel)} runs)"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
