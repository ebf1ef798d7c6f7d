"""benchmarks/rehearsal.md and its pictures: the setup, the tables, drainhook's claims
(claims.py) and where others do better, all computed from one run (run.py).
"""

from __future__ import annotations

from pathlib import Path

from rehearsal import scenarios as scenario_table
from rehearsal import strategies as strategy_table
from rehearsal import svg
from rehearsal.claims import HELD_MARGIN, better, claims
from rehearsal.run import DRAINHOOKS, Run
from rehearsal.strategies import Plan
from rehearsal.timeline import (
    DEADLINE,
    EXIT_RESERVE,
    FLEETS,
    GRACE,
    INTERVAL,
    KILL_AFTER_TERM,
    REPLICA_START,
    ROLLOUT_REPLICAS,
    SETTLE,
    SGLANG_NOTICE,
    VLLM_EXIT,
    WARMUP,
)

PICTURE_SCENARIO = "long"


def _label(key: str) -> str:
    return strategy_table.BY_KEY[key].label


def _s(run: Run, measured: float | None) -> str:
    return "-" if measured is None else f"{run.real(measured):.2f}"


# --- the tables ------------------------------------------------------------------------


def table(run: Run) -> list[str]:
    out = [
        "| scenario | recipe | G (s) | completed | cut | refused | SIGTERM at (s) | held (s) "
        "| engine exit | hook exit |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for sc in scenario_table.SCENARIOS:
        first = True
        for st in strategy_table.STRATEGIES:
            c = run.cell(st.key, sc.key)
            if c is None:
                continue
            name = f"**{sc.key}**" if first else ""
            first = False
            hook = "-" if c.hook_exit is None else str(c.hook_exit)
            if st.kind == "exec" and c.hook_returned_s is None:
                hook = "still running at G"
            st_flag = f" ({c.shutdown_timeout:g})" if c.shutdown_timeout else ""
            out.append(
                f"| {name} | {st.label}{st_flag} | {c.grace:g} | {c.completed} | {c.cut} "
                f"| {c.refused} | {_s(run, c.sigterm_at_s)} | {_s(run, c.held_s)} "
                f"| {'SIGKILL' if c.sigkill else 'clean'} | {hook} |"
            )
    return out


def rollout_table(run: Run) -> list[str]:
    out = [
        "| recipe | G (s) | replicas | hold per replica (s) | held total (accelerator-s) "
        "| rollout (s) | completed | cut | refused |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for st in strategy_table.STRATEGIES:
        r = run.rollout(st.key)
        if r is None:
            continue
        holds = r.holds()
        completed, cut, refused = r.counts()
        spread = f"{min(holds):.1f}-{max(holds):.1f}"
        out.append(
            f"| {st.label} | {r.cells[0].grace:g} | {len(holds)} | {spread} "
            f"| {sum(holds):.1f} | {r.steps()[-1].ready:.0f} | {completed} | {cut} | {refused} |"
        )
    return out


def fleet_table(run: Run) -> list[str]:
    sizes = (ROLLOUT_REPLICAS, *FLEETS)
    head = "| recipe | " + " | ".join(
        f"{n}: held (h) | {n}: rollout (h) | {n}: cut + refused" for n in sizes
    )
    out = [head + " |", "|---|" + "---:|" * (3 * len(sizes))]
    for st in strategy_table.STRATEGIES:
        r = run.rollout(st.key)
        if r is None:
            continue
        parts = []
        for n in sizes:
            p = r.projection(n)
            parts.append(
                f"{p.held_total / 3600:.2f} | {p.rollout / 3600:.2f} | {p.cut + p.refused:.0f}"
            )
        out.append(f"| {st.label} | " + " | ".join(parts) + " |")
    return out


# --- the whole report ------------------------------------------------------------------------


def _setup(run: Run) -> list[str]:
    plan = run.plan
    out = [
        "| recipe | what the kubelet runs | G (s) | vLLM `--shutdown-timeout` |",
        "|---|---|---:|---:|",
    ]
    for s in strategy_table.STRATEGIES:
        if not run.ran(s.key):
            continue
        r = s.resolved(plan) if (plan is not None or not s.from_plan) else s
        st = f"{r.shutdown_timeout:g}" if r.shutdown_timeout else "0 (default)"
        out.append(f"| {s.label} | {s.what} | {r.grace:g} | {st} |")
    deadlines = [(k, t[2]) for k in DRAINHOOKS if run.ran(k) and (t := run.timeline(k))]
    heads = " | ".join(f"work ends before D = {d:g} s ({_label(k)})" for k, d in deadlines)
    out += [
        "",
        f"| scenario | traffic and twist | {heads} |",
        "|---|---|" + "---|" * len(deadlines),
    ]
    for sc in scenario_table.SCENARIOS:
        ran = any(c.scenario == sc.key for c in run.cells) or (sc.replicas > 1 and run.rollouts)
        if not ran:
            continue
        ends = " | ".join(
            "yes" if sc.ends_before_deadline(run.lag(), d) else "no" for _, d in deadlines
        )
        out.append(f"| `{sc.key}` | {sc.what} | {ends} |")
    return out


def _plan_line(plan: Plan | None) -> str:
    if plan is None:
        return ""
    return (
        f" `drainhook plan --grace {plan.grace:g} --engine vllm`, asked at the start of this "
        f"run, gave S = {plan.settle:g}, I = {plan.interval:g}, R = {plan.exit_reserve:g} "
        f"(D = {plan.deadline:g} s) and `--shutdown-timeout {plan.shutdown_timeout:g}`: the "
        "values of `drainhook+st`."
    )


def write(path: Path, run: Run, picture: str) -> None:
    """Write the report to path and its pictures beside it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    picture_cells = [
        c for st in strategy_table.STRATEGIES if (c := run.cell(st.key, picture)) is not None
    ]
    svg_path = path.with_name(path.stem + "-timeline.svg")
    rollout_svg = path.with_name(path.stem + "-rollout.svg")
    if picture_cells:
        scenario = scenario_table.BY_KEY[picture]
        svg_path.write_text(svg.render(scenario, picture_cells, run.scale))
    if run.rollouts:
        rollout_svg.write_text(svg.render_rollout(run.rollouts, REPLICA_START))
    curl = "bash + curl" if strategy_table.CURL else "its urllib equivalent (no curl here)"
    f = run.scale.factor
    count = len(run.cells) + sum(len(r.cells) for r in run.rollouts)
    every = [*run.cells, *(c for r in run.rollouts for c in r.cells)]
    late = max((c.late_s for c in every), default=0.0)
    lag = run.lag()
    lines = [
        "# Rehearsal: drain recipes under live traffic",
        "",
        "<!-- written by scripts/rehearse; rerun it to refresh -->",
        "",
        f"`scripts/rehearse` ran {count} cells at `--scale {f:g}` in {run.wall:.0f} s "
        f"({run.date}, Python {run.python}, {run.cpus} CPUs, "
        f"{run.parallel} cells at a time and {run.rollout_parallel} rollout replicas at a time, "
        f"5-minute load average {run.load:.1f} at the end). Every part is a real "
        "process on loopback: the simulated engine, the load generator, and each recipe's "
        "hook, started by a kubelet emulator; each cell in a network namespace of its own, "
        f"its hook run as inside a Pod. The curl loop ran under {curl}. Times below are real "
        f"seconds: measured / {f:g}. Fixed costs that do not scale (a process's start and "
        f"exit, ~50 ms) are multiplied by {1 / f:g} in them; the claims give those in measured "
        f"milliseconds. The kubelet emulator deleted each Pod at most {late * 1000:.0f} ms "
        "(measured) after the moment its traffic was planned around.",
        "",
        "## The deletion",
        "",
        "At t=0 the Pod is deleted: the recipe's grace clock G starts and the kubelet runs the "
        f"preStop hook; SIGTERM when it returns (or at G), SIGKILL at G but never sooner than "
        f"{KILL_AFTER_TERM:g} s after SIGTERM. Traffic runs from {WARMUP:g} s before the delete "
        f"until the router stops sending, {lag:g} s after it (`router-lag-20`: 20 s). vLLM "
        f"(2 DP engines) without `--shutdown-timeout` ends every running and waiting request "
        f"on SIGTERM with an abort, stops listening and exits {VLLM_EXIT:g} s later; with "
        "`--shutdown-timeout N` it answers each new request at once with an empty completion "
        "(HTTP 200, finish_reason `abort`), lets running and waiting requests finish, exits as "
        "soon as none is left and is killed at N; with several API servers each drops its "
        "engine connection at once (streams cut, new requests HTTP 500; inferred from the "
        f"code). SGLang looks at its SIGTERM flag every {SGLANG_NOTICE:g} s, then drains with "
        f"no bound and keeps serving. drainhook runs with its defaults: S = {SETTLE:g}, "
        f"I = {INTERVAL:g}, R = {EXIT_RESERVE:g}, so D = {DEADLINE:g} s at G = {GRACE:g} s "
        f"(flags times {f:g}).{_plan_line(run.plan)}",
        "",
        *_setup(run),
        "",
        "## Results",
        "",
        "completed: the final `data: [DONE]` arrived after a normal finish; cut: the stream "
        "ended early, the connection was reset, or it was aborted after tokens; refused: "
        "connection refused, a non-2xx answer, or an empty completion with finish_reason "
        "`abort`. The recipe's vLLM `--shutdown-timeout` in brackets; G per recipe. SIGTERM at "
        "and held (delete to the engine's exit) in real seconds. Hook exit: the hook's status, "
        "if it returned before G. vLLM recipes (kserve, llm-d, drainhook+st) are not run on "
        "SGLang.",
        "",
        *table(run),
        "",
    ]
    if run.rollouts:
        n = len(run.rollouts[0].cells)
        lines += [
            f"## The rollout: {n} replicas, and the fleet",
            "",
            f"A rolling update replaces {n} replicas one at a time on a GPU-bound cluster: a "
            "replacement can start only once its predecessor has exited and freed its "
            f"accelerators, and then takes {REPLICA_START:g} s (the same for every recipe, "
            "accounted, not waited) before it serves; the next replica is deleted then. Each "
            "departing replica's hold (delete to exit) is played for real, as a cell of the "
            "`rollout` scenario; the router spreads the traffic over the replicas that are up, "
            "each carrying the same rate, so the requests at stake are the ones sent to a "
            "departing replica. held total: the accelerator-seconds spent holding departing "
            "replicas (per accelerator of a replica); rollout: every hold and every start.",
            "",
            *rollout_table(run),
            "",
            f"The same model for larger fleets, not run: the mean replica of this run, "
            f"{' and '.join(str(x) for x in FLEETS)} times (hours).",
            "",
            *fleet_table(run),
            "",
            f"![the {n}-replica rollout, recipe by recipe]({rollout_svg.name})",
            "",
        ]
    lines += [
        "## drainhook's claims",
        "",
        *claims(run),
        "",
        "## Where another recipe does better",
        "",
        "Every column where another recipe beats a drainhook recipe in this run (held: by "
        f"more than {HELD_MARGIN:g} s), and why; G in brackets where it differs.",
        "",
        *better(run),
        "",
    ]
    if picture_cells:
        lines += [
            "## Timeline",
            "",
            f"`{picture}`, every recipe: requests, the /metrics reads the engine answered, "
            "SIGTERM and the engine's exit.",
            "",
            f"![timeline of the {picture} scenario]({svg_path.name})",
            "",
        ]
    lines += [
        "## How it is modelled",
        "",
        "- The engine is drainhook's own simulated engine (`drainhook/sim/`, the one "
        "`drainhook demo` runs), as a process. Its SIGTERM paths were read in vLLM's code: "
        "0.24's EngineCore (`_handle_shutdown`, `_reject_add_in_shutdown`: a request added "
        "while shutting down gets an abort output at once) and the API server's launcher "
        "(`engine_client.shutdown(timeout)` before uvicorn stops, so /health and /metrics keep "
        "serving); the several-API-server path as the issue reads it in 0.33, not confirmed "
        "against stored code here: inferred.",
        "- Each request's duration is drawn from the scenario's distribution by its id, so "
        "every recipe of a scenario serves the same requests; the load generator records "
        "each one's outcome as it ends.",
        "- Each cell runs under `unshare -rn` with its loopback up: its engine is the only "
        "listener its hook can see. The hooks run with KUBERNETES_SERVICE_HOST set, as in a "
        "Pod.",
        "- The curl loop keeps the first sample of each gauge (`grep -m1`), as written against "
        'one engine: with 2 DP engines it reads `engine="0"` only. `dp-one-busy` puts the '
        "work on engine 1.",
        "- The poll script and the curl loop look for vLLM's gauges only: on SGLang the "
        "script finds none (idle), the loop never matches (holds to G).",
        f"- SGLang's watchdog looks at its SIGTERM flag every {SGLANG_NOTICE:g} s from the "
        "engine's start; the rehearsal pins those looks to 2.5 s after the delete + k x 5 s "
        "(the mean phase), the same for every recipe. `sglang-lag` uses the worst case of "
        "the lag (30 s); its /v1/loads is live.",
        "- The router's lag and the load are the same for every recipe; a request the "
        "router sends to a stopped vLLM is refused (a real router would retry it elsewhere).",
        "",
        f"Rerun: `scripts/rehearse` (add `--scale 1` for real time; `--json` prints one object "
        f"per cell). Command line of this run: `{run.argv or '(defaults)'}`.",
        "",
    ]
    path.write_text("\n".join(lines))
