"""Idle engine: how soon after S + I/4 does `drainhook wait` exit? (target: S + I/4 + 60 ms)

Runs the real CLI as a subprocess, RUNS times, against an idle loopback
server on a compressed timeline. For each run it takes the hook's own
`elapsed=` (counted from the process start the kernel records) and the
wall time from spawn to exit as the parent sees it, and reports how far each
lands past S + I/4. The floor is the second read itself: it starts at S + I/4
and the hook cannot return before it ends. `python -c pass` and the hook's
imports are timed in the same run as a baseline for this machine.

    python benchmarks/idle_exit.py [--runs 20] [--settle 0.3] [--interval 0.2] [--json PATH]
"""

from __future__ import annotations

import statistics

from _bench import (
    HOOK_IMPORTS,
    IMPORTS,
    PYTHON_PASS,
    exit_tail,
    load_note,
    ms,
    parser,
    run_hook,
    startup,
    stats_ms,
    table,
    write_json,
)

from tests.support.loopback import Loopback, sample, serve

TARGET_MS = 60.0


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--settle", type=float, default=0.3)
    p.add_argument("--interval", type=float, default=0.2)
    p.add_argument("--sample", default="vllm-single-dp2-idle.txt", help="idle body served")
    p.add_argument("--baseline-runs", type=int, default=20)
    args = p.parse_args()
    s_plus_i = args.settle + args.interval / 4  # the confirming read: the server's zero

    startup(PYTHON_PASS, 2)  # warm the page cache before anything is timed
    runs = []
    body = sample(args.sample)
    with Loopback(serve(body)) as srv:
        for _ in range(args.runs):
            timeline = ["--settle", str(args.settle), "--interval", str(args.interval)]
            run = run_hook(["wait", "--url", srv.url, *timeline], hard_exit=args.hard_exit)
            if run.code != 0 or run.summary.get("outcome") != "drained" or len(run.reads) != 2:
                raise SystemExit(f"an idle run did not drain after two reads:\n{run.stderr}")
            runs.append(run)
        connections = srv.connections
    if connections != 2 * args.runs:
        raise SystemExit(f"the server answered {connections} reads, not {2 * args.runs}")
    python_pass = startup(PYTHON_PASS, args.baseline_runs)
    hook_imports = startup(HOOK_IMPORTS, args.baseline_runs)
    teardown = exit_tail(IMPORTS, args.baseline_runs)
    teardown_hard = exit_tail(IMPORTS, args.baseline_runs, hard=True)

    elapsed_over = [r.elapsed - s_plus_i for r in runs]
    wall_over = [r.wall - s_plus_i for r in runs]
    read2 = [float(r.reads[1]["read_ms"]) / 1000.0 for r in runs]
    both = [sum(float(x["read_ms"]) for x in r.reads) / 1000.0 for r in runs]
    rows = {
        "hook elapsed - (S+I)": stats_ms(elapsed_over),
        "spawn-to-summary - (S+I)": stats_ms([r.summary_at - s_plus_i for r in runs]),
        "spawn-to-exit - (S+I)": stats_ms(wall_over),
        "exit tail: summary to exit": stats_ms([r.exit_tail for r in runs]),
        "t0 lead: tick rounding": stats_ms([r.t0_lead or 0.0 for r in runs]),
        "floor: 2nd read": stats_ms(read2),
        "two reads together": stats_ms(both),
        "python -c pass": stats_ms(python_pass),
        "python + hook imports": stats_ms(hook_imports),
        "exit after hook imports": stats_ms(teardown),
        "same, by os._exit": stats_ms(teardown_hard),
    }
    pass_median = statistics.median(python_pass)
    worst = max(max(elapsed_over), max(wall_over))

    print(
        f"idle exit: {args.runs} runs of `drainhook wait`"
        f"{' (ended by os._exit)' if args.hard_exit else ''}, S={args.settle} I={args.interval}, "
        f"idle body {args.sample} ({len(body)} bytes); {load_note()}; milliseconds"
    )
    print(table(["", "min", "median", "p90", "max"], [[k, *v.values()] for k, v in rows.items()]))
    print(
        f"\nmedian spawn-to-exit overshoot = {statistics.median(wall_over) / pass_median:.2f}x "
        f"`python -c pass` ({ms(pass_median)} ms)"
    )
    print(
        f"target: exit within S + I/4 + {TARGET_MS:.0f} ms; worst {ms(worst)} ms: "
        + ("met" if worst * 1000.0 <= TARGET_MS else "NOT met")
    )
    write_json(
        args.json,
        "idle_exit",
        {
            "params": {**vars(args), "json": None, "body_bytes": len(body)},
            "target_ms": TARGET_MS,
            "met": worst * 1000.0 <= TARGET_MS,
            "ms": rows,
            "overshoot_in_python_startups": statistics.median(wall_over) / pass_median,
            "runs": [
                {
                    "wall_ms": ms(r.wall),
                    "elapsed_ms": ms(r.elapsed),
                    "summary_at_ms": ms(r.summary_at),
                    "t0_lead_ms": None if r.t0_lead is None else ms(r.t0_lead),
                    "read_ms": [float(x["read_ms"]) for x in r.reads],
                }
                for r in runs
            ],
        },
    )


if __name__ == "__main__":
    main()
