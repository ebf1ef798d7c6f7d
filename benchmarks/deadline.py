"""Deadline: how far past D does `drainhook wait` return? (target: never later than D + 50 ms)

Runs the real CLI as a subprocess RUNS times, round robin against three
loopback servers that never let it drain: one that reads the request and
never answers (hung), one that sends its headers and then its body one byte
every 50 ms (dripping), and one that answers a busy body at once (busy). The
timeline is compressed (by default S=0.1, I=0.1, G=0.8, R=0.2, read timeout
0.3, so D=0.6): a hung or dripping read starts at 0.4 and must be clipped to
the 0.2 s left. Two hooks run at a time at most.

For each server it reports the overshoot past D of the hook's own `elapsed=`
(from its process start), of the summary line reaching the parent, and of
the wall time from spawn to exit, the last also net of the interpreter's
start-up (`python -c pass`, timed in the same run).

    python benchmarks/deadline.py [--runs 100] [--parallel 2] [--json PATH]
"""

from __future__ import annotations

import contextlib
import itertools
import statistics
from concurrent.futures import ThreadPoolExecutor

from _bench import (
    PYTHON_PASS,
    HookRun,
    load_note,
    ms,
    parser,
    run_hook,
    startup,
    stats_ms,
    table,
    write_json,
)

from tests.support.loopback import Loopback, drip, hang, sample, serve

TARGET_MS = 50.0
KINDS = ("hung", "dripping", "busy")


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--settle", type=float, default=0.1)
    p.add_argument("--interval", type=float, default=0.1)
    p.add_argument("--grace", type=float, default=0.8)
    p.add_argument("--exit-reserve", type=float, default=0.2)
    p.add_argument("--read-timeout", type=float, default=0.3)
    p.add_argument("--baseline-runs", type=int, default=20)
    args = p.parse_args()
    timeline = [
        *("--settle", str(args.settle), "--interval", str(args.interval)),
        *("--grace", str(args.grace), "--exit-reserve", str(args.exit_reserve)),
        *("--read-timeout", str(args.read_timeout)),
    ]

    startup(PYTHON_PASS, 2)  # warm the page cache before anything is timed
    python_pass = statistics.median(startup(PYTHON_PASS, args.baseline_runs // 2))
    # The dripped body is an idle one: a hook that waited for all of it would drain.
    idle, busy = sample("vllm-http-plain-idle.txt"), sample("vllm-http-plain.txt")
    servers = {
        "hung": Loopback(hang),
        "dripping": Loopback(drip(idle, every=0.05)),
        "busy": Loopback(serve(busy)),
    }
    plan = list(itertools.islice(itertools.cycle(KINDS), args.runs))

    def one(kind: str) -> tuple[str, HookRun]:
        argv = ["wait", "--url", servers[kind].url, *timeline]
        return kind, run_hook(argv, hard_exit=args.hard_exit)

    with contextlib.ExitStack() as stack:
        for srv in servers.values():
            stack.enter_context(srv)
        with ThreadPoolExecutor(max_workers=args.parallel) as pool:
            done = list(pool.map(one, plan))
    python_pass = statistics.median(
        [python_pass, *startup(PYTHON_PASS, args.baseline_runs - args.baseline_runs // 2)]
    )

    for kind, run in done:
        if run.code != 3 or run.summary.get("outcome") != "deadline":
            raise SystemExit(f"a {kind} run did not end at the deadline:\n{run.stderr}")
    deadline = float(done[0][1].summary["deadline"])

    results: dict[str, dict[str, object]] = {}
    rows = []
    for kind in KINDS:
        runs = [r for k, r in done if k == kind]
        measures = {
            "elapsed - D": stats_ms([r.elapsed - deadline for r in runs]),
            "summary - D": stats_ms([r.summary_at - deadline for r in runs]),
            "wall - D": stats_ms([r.wall - deadline for r in runs]),
            "wall - (D + startup)": stats_ms([r.wall - deadline - python_pass for r in runs]),
            "exit tail": stats_ms([r.exit_tail for r in runs]),
        }
        reads = sorted({len(r.reads) for r in runs})
        late = [r for r in runs if not r.reads]
        results[kind] = {
            "runs": len(runs),
            "reads_per_run": reads,
            "late_starts": len(late),
            "ms": measures,
        }
        for name, s in measures.items():
            rows.append([kind if name == "elapsed - D" else "", name, s["median"], s["max"]])

    worst_elapsed = max(r.elapsed - deadline for _, r in done)
    worst_wall = max(r.wall - deadline for _, r in done)
    # A hook with no read at all reached its loop only after D: its interpreter
    # start-up and imports alone took longer than this compressed D.
    on_time = [r for _, r in done if r.reads]
    worst_elapsed_on_time = max((r.elapsed - deadline for r in on_time), default=0.0)
    worst_wall_on_time = max((r.wall - deadline for r in on_time), default=0.0)
    print(
        f"deadline: {args.runs} runs of `drainhook wait` ({args.parallel} at a time"
        f"{', ended by os._exit' if args.hard_exit else ''}), "
        f"D={deadline:.3f} s; `python -c pass` = {ms(python_pass)} ms; {load_note()}; milliseconds"
    )
    print(table(["server", "overshoot", "median", "max"], rows))
    for kind, r in results.items():
        print(
            f"  {kind}: {r['runs']} runs, reads per run {r['reads_per_run']}, "
            f"{r['late_starts']} late starts (start-up alone past D, no read)"
        )
    met_elapsed = worst_elapsed * 1000.0 <= TARGET_MS
    met_wall = worst_wall * 1000.0 <= TARGET_MS
    print(
        f"target: never later than D + {TARGET_MS:.0f} ms. "
        f"hook's own elapsed: worst {ms(worst_elapsed)} ms, {'met' if met_elapsed else 'NOT met'}; "
        f"spawn to exit: worst {ms(worst_wall)} ms, {'met' if met_wall else 'NOT met'}"
    )
    print(
        f"  without the {len(done) - len(on_time)} late starts: hook's own elapsed worst "
        f"{ms(worst_elapsed_on_time)} ms, spawn to exit worst {ms(worst_wall_on_time)} ms"
    )
    write_json(
        args.json,
        "deadline",
        {
            "params": {**vars(args), "json": None},
            "deadline_s": deadline,
            "python_pass_ms": ms(python_pass),
            "target_ms": TARGET_MS,
            "met_elapsed": met_elapsed,
            "met_wall": met_wall,
            "late_starts": len(done) - len(on_time),
            "worst_ms_without_late_starts": {
                "elapsed": ms(worst_elapsed_on_time),
                "wall": ms(worst_wall_on_time),
            },
            "servers": results,
            "runs": [
                {
                    "server": kind,
                    "elapsed_ms": ms(r.elapsed),
                    "summary_at_ms": ms(r.summary_at),
                    "wall_ms": ms(r.wall),
                    "reads": [
                        {k: x.get(k) for k in ("t", "verdict", "read_ms", "reason")}
                        for x in r.reads
                    ],
                }
                for kind, r in done
            ],
        },
    )


if __name__ == "__main__":
    main()
