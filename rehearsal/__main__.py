"""`python -m rehearsal`: run the matrix of recipes x scenarios, print it, write the report.

    python -m rehearsal                          the whole matrix at the default scale
    python -m rehearsal --scale 1                real time (about 15 minutes)
    python -m rehearsal --strategies drainhook,none --scenarios idle,short --json

`--json` prints one object per cell as it ends (times as measured: real
seconds x scale); a rollout is one object per recipe, with `replicas`,
`held_total_s` and `rollout_s` besides. The report (benchmarks/rehearsal.md and
its pictures) is written when the whole matrix ran, or wherever `--report` says.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from rehearsal import report, run, scenarios, strategies
from rehearsal.matrix import ROOT, Cell, run_matrix
from rehearsal.rollout import Rollout
from rehearsal.timeline import DEFAULT_SCALE, ROUTER_LAG, Scale


def _pick(value: str | None, table: dict[str, object], what: str) -> list[str]:
    if value is None:
        return list(table)
    keys = [k.strip() for k in value.split(",") if k.strip()]
    unknown = [k for k in keys if k not in table]
    if unknown:
        raise SystemExit(f"unknown {what}: {', '.join(unknown)} (known: {', '.join(table)})")
    return keys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scripts/rehearse", description=__doc__.split("\n")[0])
    p.add_argument(
        "--scale",
        type=float,
        default=DEFAULT_SCALE,
        help=f"multiply every duration by F (default {DEFAULT_SCALE}; 1 is real time)",
    )
    p.add_argument("--strategies", help=f"comma list of {', '.join(strategies.BY_KEY)}")
    p.add_argument("--scenarios", help=f"comma list of {', '.join(scenarios.BY_KEY)}")
    p.add_argument(
        "--router-lag",
        type=float,
        default=ROUTER_LAG,
        help=f"real seconds the router keeps sending after the delete (default {ROUTER_LAG:g})",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per cell on stdout")
    p.add_argument("--parallel", type=int, default=3, help="cells run at once (default 3)")
    p.add_argument(
        "--rollout-parallel",
        type=int,
        default=8,
        help="rollout replicas run at once (default 8: one recipe's rollout together)",
    )
    p.add_argument("--report", type=Path, help="write the report here (default: full matrix only)")
    p.add_argument(
        "--picture", default=report.PICTURE_SCENARIO, help="scenario drawn in the timeline"
    )
    p.add_argument("--data", type=Path, help="also keep every cell of the run here (JSON lines)")
    p.add_argument(
        "--from-data",
        type=Path,
        help="run nothing: write the report again from what --data kept",
    )
    args = p.parse_args(argv)
    if args.from_data is not None:
        out = args.report or ROOT / "benchmarks" / "rehearsal.md"
        report.write(out, run.load(args.from_data), args.picture)
        print(f"rehearsal: wrote {out} from {args.from_data}", file=sys.stderr)
        return 0
    if not args.scale > 0:
        raise SystemExit("--scale must be > 0")
    if not args.router_lag >= 0:
        raise SystemExit("--router-lag must be >= 0")
    chosen_strategies = [
        strategies.BY_KEY[k] for k in _pick(args.strategies, dict(strategies.BY_KEY), "strategy")
    ]
    chosen_scenarios = [
        scenarios.BY_KEY[k] for k in _pick(args.scenarios, dict(scenarios.BY_KEY), "scenario")
    ]
    full = args.strategies is None and args.scenarios is None
    scale = Scale(args.scale)
    plan = (
        strategies.ask_plan()
        if any(st.from_plan for st in chosen_strategies)
        or (full and any(st.from_plan for st in strategies.STRATEGIES))
        else None
    )

    def on_cell(cell: Cell) -> None:
        if args.json:
            print(json.dumps(cell.row()), flush=True)
        else:
            row = cell.row()
            print(
                f"{row['scenario']:>14} {row['strategy']:>12}  completed={row['completed']:<3} "
                f"cut={row['cut']:<3} refused={row['refused']:<3} "
                f"sigterm_at={scale.real(cell.sigterm_at_s):6.2f}s "
                f"held={scale.real(cell.held_s):6.2f}s {row['engine_exit']}  (real-time s)",
                file=sys.stderr,
                flush=True,
            )

    def on_rollout(rollout: Rollout) -> None:
        row = rollout.row()
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            print(
                f"{'rollout':>14} {row['strategy']:>12}  completed={row['completed']:<3} "
                f"cut={row['cut']:<3} refused={row['refused']:<3} replicas={row['replicas']} "
                f"held_total={scale.real(row['held_total_s']):7.2f}s "
                f"rollout={scale.real(row['rollout_s']):7.1f}s  (real-time s)",
                file=sys.stderr,
                flush=True,
            )

    started, load_start = time.monotonic(), os.getloadavg()[1]
    cells, rollouts = run_matrix(
        chosen_strategies,
        chosen_scenarios,
        scale,
        args.parallel,
        on_cell,
        args.router_lag,
        plan,
        args.rollout_parallel,
        on_rollout,
    )
    wall = time.monotonic() - started
    count = len(cells) + sum(len(r.cells) for r in rollouts)
    done = f"rehearsal: {count} cells in {wall:.0f} s at --scale {args.scale:g}"
    print(done, file=sys.stderr)
    played = run.Run(cells, rollouts, scale, wall, plan, args.parallel, args.rollout_parallel)
    played.load_start = load_start
    if args.data is not None:
        run.save(args.data, played)
    out = args.report or (ROOT / "benchmarks" / "rehearsal.md" if full else None)
    if out is not None:
        report.write(out, played, args.picture)
        print(f"rehearsal: wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
