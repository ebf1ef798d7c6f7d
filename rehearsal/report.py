"""benchmarks/rehearsal.md and its pictures: the setup, the tables, drainhook's claims
(claims.py) and where others do better, all computed from one run (run.py).
"""

from __future__ import annotations

from pathlib import Path

from rehearsal import scenarios as scenario_table
from rehearsal import strategies as strategy_table
from rehearsal import svg
from rehearsal.claims import BASELINE, HELD_MARGIN, better, claims
from rehearsal.record import Cell
from rehearsal.run import DRAINHOOKS, ORACLE, Run
from rehearsal.strategies import Plan
from rehearsal.timeline import (
    DEADLINE,
    EXIT_RESERVE,
    FLEETS,
    GRACE,
    INTERVAL,
    KILL_AFTER_TERM,
    MEASURED_SHUTDOWN_TIMEOUT,
    REPLICA_START,
    ROLLOUT_REPLICAS,
    SETTLE,
    SGLANG_NOTICE,
    VLLM_CORE_KILL,
    VLLM_EXIT,
    VLLM_LISTENER_CLOSE,
    VLLM_TEARDOWN,
    WARMUP,
    span,
)

PICTURE_SCENARIO = "long"


def _label(key: str) -> str:
    return strategy_table.BY_KEY[key].label


def _s(run: Run, measured: float | None) -> str:
    return "-" if measured is None else f"{run.real(measured):.2f}"


# --- the tables ------------------------------------------------------------------------


def table(run: Run) -> list[str]:
    out = [
        "| scenario | recipe | G (s) | completed | cut | of them stalled | refused "
        "| SIGTERM at (s) | held (s) | engine exit | hook exit |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|",
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
                f"| {c.stalled} | {c.refused} | {_s(run, c.sigterm_at_s)} | {_s(run, c.held_s)} "
                f"| {'SIGKILL' if c.sigkill else 'clean'} | {hook} |"
            )
    return out


def rollout_table(run: Run) -> list[str]:
    floor, base = run.rollout(ORACLE), run.rollout(BASELINE)
    out = [
        "| recipe | G (s) | replicas | hold per replica (s) | mean hold (s) | over the oracle "
        "(s per replica) | held total (accelerator-s) | over the oracle (accelerator-s) "
        f"| / oracle | / {_label(BASELINE)} | rollout (s) | completed | cut | refused |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for st in strategy_table.STRATEGIES:
        r = run.rollout(st.key)
        if r is None:
            continue
        holds = r.holds()
        completed, cut, refused = r.counts()
        spread = f"{min(holds):.1f}-{max(holds):.1f}"
        total = sum(holds)
        if floor is not None:
            floor_total = sum(floor.holds())
            per, over = f"{(total - floor_total) / len(holds):+.2f}", f"{total - floor_total:+.1f}"
            ratio = f"{total / floor_total:.2f}"
        else:
            per, over, ratio = "-", "-", "-"
        to_base = f"{total / sum(base.holds()):.2f}" if base is not None else "-"
        out.append(
            f"| {st.label} | {r.cells[0].grace:g} | {len(holds)} | {spread} "
            f"| {total / len(holds):.2f} | {per} | {total:.1f} | {over} | {ratio} | {to_base} "
            f"| {r.steps()[-1].ready:.0f} | {completed} | {cut} | {refused} |"
        )
    return out


ADVICE_SCENARIOS = ("idle", "short", "router-lag-20", "outlive")
ADVICE_RECIPES = ("drainhook", "drainhook-st", "drainhook+plan")


def advice_table(run: Run) -> list[str]:
    """drainhook with and without vLLM's --shutdown-timeout: the exit it costs, the
    requests it saves, and the requests that slipped in after the last idle read."""
    out = [
        "| scenario | recipe | G (s) | `--shutdown-timeout` | completed | cut | of them stalled "
        "| refused | slipped in after the last idle read (their outcome) | SIGTERM at (s) "
        "| SIGTERM to exit (s) | held (s) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for scenario in (*ADVICE_SCENARIOS, "rollout"):
        for key in ADVICE_RECIPES:
            cells = _cells(run, key, scenario)
            if not cells:
                continue
            n = len(cells)
            slipped = [q for c in cells for q in c.slipped()]
            outcomes = ", ".join(sorted({q.outcome for q in slipped}))
            slip = f"{len(slipped)}" + (f" ({outcomes})" if slipped else "")
            exit_s = sum(run.real(c.held_s - c.sigterm_at_s) for c in cells) / n
            term = sum(run.real(c.sigterm_at_s) for c in cells) / n
            held = sum(run.real(c.held_s) for c in cells) / n
            mean = " (mean per replica)" if n > 1 else ""
            c0 = cells[0]
            out.append(
                f"| `{scenario}` | {_label(key)} | {c0.grace:g} | {c0.shutdown_timeout:g} "
                f"| {sum(c.completed for c in cells)} | {sum(c.cut for c in cells)} "
                f"| {sum(c.stalled for c in cells)} | {sum(c.refused for c in cells)} | {slip} "
                f"| {term:.2f}{mean} | {exit_s:.2f} | {held:.2f} |"
            )
    return out


def _cells(run: Run, key: str, scenario: str) -> list[Cell]:
    """A recipe's cells in a scenario: the one cell, or the rollout's replicas."""
    if scenario == "rollout":
        r = run.rollout(key)
        return list(r.cells) if r is not None else []
    c = run.cell(key, scenario)
    return [c] if c is not None else []


def _mean_exit(run: Run, key: str, scenario: str) -> float | None:
    """Mean SIGTERM-to-exit of a recipe's cells in a scenario (rollout: its replicas)."""
    cells = _cells(run, key, scenario)
    clean = [run.real(c.held_s - c.sigterm_at_s) for c in cells if not c.sigkill]
    return sum(clean) / len(clean) if clean else None


def advice_text(run: Run) -> list[str]:
    """The numbers behind `drainhook plan`'s `--shutdown-timeout` advice, from this run."""
    out = []
    costs = []
    for scenario in ("idle", "short", "rollout"):
        with_st = _mean_exit(run, "drainhook-st", scenario)
        without = _mean_exit(run, "drainhook", scenario)
        if with_st is not None and without is not None:
            costs.append(f"`{scenario}` {with_st:.2f} s against {without:.2f} s")
    if costs:
        out.append(
            "- **Cost.** SIGTERM to exit after a drained hook, with the flag against without: "
            + "; ".join(costs)
            + ". Every replica pays it, on every rollout."
        )
    mine, other = run.rollout("drainhook-st"), run.rollout("drainhook")
    if mine is not None and other is not None:
        extra = sum(mine.holds()) - sum(other.holds())
        n = len(mine.cells)
        out.append(
            f"- Over the {n}-replica rollout: {extra:+.1f} accelerator-seconds "
            f"({extra / n:+.2f} s per replica), {extra / n * 512 / 3600:+.2f} accelerator-hours "
            "for 512 replicas, for the same requests completed "
            f"({mine.counts()[0]} against {other.counts()[0]})."
        )
    slips = []
    for scenario in ("short", "router-lag-20", "rollout"):
        for key in ("drainhook", "drainhook-st"):
            cells = _cells(run, key, scenario)
            if cells:
                slips.append(f"`{scenario}` {_label(key)} {sum(len(c.slipped()) for c in cells)}")
    if slips:
        out.append(
            "- **What it buys after a drained hook:** a clean end for a request that slips in "
            "after the last idle read. Slipped requests in this run: "
            + ", ".join(slips)
            + f". With S = {SETTLE:g} s and a router that stops sending within S, none can: "
            "the hook reads only from S, so its last idle read comes after the router's last "
            f"request (here the router stops {run.lag():g} s after the delete, and in "
            "`router-lag-20` the work keeps the engine busy until after the router stops at "
            "20 s)."
        )
    plain, flagged = run.cell("drainhook", "outlive"), run.cell("drainhook-st", "outlive")
    if plain is not None and flagged is not None:
        out.append(
            "- **What it buys when the hook returns at D with work in flight** (`outlive`): "
            f"completed {flagged.completed} with the flag against {plain.completed} without; "
            f"cut {flagged.cut} ({flagged.stalled} stalled until G) against {plain.cut} "
            f"({plain.stalled} stalled). Without it every request running at D stalls until "
            "the kill at G; with it, those that end within N complete."
        )
    if run.plan is not None:
        advised = (
            f"`--shutdown-timeout {run.plan.shutdown_timeout:g}`"
            if run.plan.shutdown_timeout
            else "no `--shutdown-timeout`"
        )
        out.append(
            f"- `drainhook plan --grace {run.plan.grace:g} --engine vllm` advised {advised}: "
            f"with S = {run.plan.settle:g} s nothing slips in after the release, and a request "
            "still running at D is better served by N more seconds of G (the engine still "
            "serves it; an idle replica pays nothing for G, and pays N for the flag). plan "
            "advises the flag only for a settle under 5 s (docs/design.md, §7)."
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


def _load(run: Run) -> str:
    start = "" if run.load_start is None else f"{run.load_start:.1f} at the start, "
    return f"{start}{run.load:.1f} at the end"


def _loaded(run: Run) -> str:
    """A warning when the machine had more runnable work than CPUs."""
    peak = max(run.load, run.load_start or 0.0)
    if peak <= run.cpus:
        return ""
    return (
        f" The machine was shared and loaded (load average {peak:.1f} on {run.cpus} CPUs): "
        "processes waited for a CPU, which lengthens reads, hook returns and exits by up "
        "to tens of milliseconds, times the inverse scale in real seconds; differences in "
        f"held below {HELD_MARGIN:g} s are not read as better or worse, and counts of "
        "requests shift only where a request ends within milliseconds of a read or a signal."
    )


def _plan_line(plan: Plan | None) -> str:
    if plan is None:
        return ""
    return (
        f" `drainhook plan --grace {plan.grace:g} --engine vllm`, asked at the start of this "
        f"run, gave S = {plan.settle:g}, I = {plan.interval:g}, R = {plan.exit_reserve:g} "
        f"(D = {plan.deadline:g} s) and `--shutdown-timeout {plan.shutdown_timeout:g}`: the "
        "values of `drainhook+plan`."
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
        f"5-minute load average {_load(run)}). Every part is a real "
        "process on loopback: the simulated engine, the load generator, and each recipe's "
        "hook, started by a kubelet emulator; each cell in a network namespace of its own, "
        f"its hook run as inside a Pod. The curl loop ran under {curl}. Times below are real "
        f"seconds: measured / {f:g}. Fixed costs that do not scale (a process's start and "
        f"exit, ~50 ms) are multiplied by {1 / f:g} in them; the claims give those in measured "
        f"milliseconds. The kubelet emulator deleted each Pod at most {late * 1000:.0f} ms "
        f"(measured) after the moment its traffic was planned around.{_loaded(run)}",
        "",
        "## The deletion",
        "",
        "At t=0 the Pod is deleted: the recipe's grace clock G starts and the kubelet runs the "
        f"preStop hook; SIGTERM when it returns (or at G), SIGKILL at G but never sooner than "
        f"{KILL_AFTER_TERM:g} s after SIGTERM. Traffic runs from {WARMUP:g} s before the delete "
        f"until the router stops sending, {lag:g} s after it (`router-lag-20`: 20 s). The "
        "simulated vLLM (2 DP engines, one API server) does what the live vLLM 0.32 was "
        "measured doing. Without `--shutdown-timeout` (its default) SIGTERM kills its engine "
        f"core {VLLM_CORE_KILL * 1000:g} ms later, before any abort: every running and waiting "
        "request stalls (no error, no `[DONE]`); the listener closes "
        f"{VLLM_LISTENER_CLOSE:g} s after SIGTERM, and the process then waits for the stalled "
        "connections with no bound, so the Pod is held until the kubelet's SIGKILL at G and "
        f"those clients end with a truncated body; with nothing in flight it exits "
        f"{VLLM_EXIT:g} s after SIGTERM. With `--shutdown-timeout N` it answers each new "
        "request with HTTP 500 (`cannot schedule new futures after shutdown`), lets running "
        "and waiting requests finish, keeps /health and /metrics answering, and once none is "
        f"left its engine core tears itself down and exits {span(*VLLM_TEARDOWN)} s later "
        "(the machine's time: each scenario draws one value in that range, the same for "
        "every recipe); the "
        f"process follows {VLLM_EXIT:g} s after that. A request still running at N stalls as "
        "without the flag (the engine core is killed then). With several API "
        "servers each drops "
        "its engine connection at once (streams cut, new requests HTTP 500; inferred from the "
        f"code, not measured). SGLang looks at its SIGTERM flag every {SGLANG_NOTICE:g} s, then "
        "drains with no bound and keeps serving, and a stream stays in its "
        "http_requests_active 2 s after its last byte (both measured on SGLang 0.5.23's CPU "
        "engine: contract §7). drainhook runs "
        f"with its defaults: S = {SETTLE:g}, "
        f"I = {INTERVAL:g}, R = {EXIT_RESERVE:g}, so D = {DEADLINE:g} s at G = {GRACE:g} s "
        f"(flags times {f:g}).{_plan_line(run.plan)} The oracle is no recipe: SIGTERM the "
        "moment the replica's last request ended (the kubelet emulator watches the load "
        "generator's records), then the engine's own exit: the physical floor of a hold.",
        "",
        *_setup(run),
        "",
        "## Results",
        "",
        "completed: the final `data: [DONE]` arrived after a normal finish; cut: the stream "
        "ended early, the connection was reset, or it was aborted after tokens, or an HTTP "
        "error came on a connection the engine had accepted before SIGTERM (a request still "
        "in its server, uploading or rendering, when its engine core went); of them "
        "stalled: streams still open, with no byte since the engine core died, when the "
        "kubelet killed the engine (vLLM's stall: counted as cut); refused: connection "
        "refused, a non-2xx answer to a request that came after SIGTERM (vLLM's HTTP 500 "
        "while it drains), or an empty completion "
        "with finish_reason `abort`. The recipe's vLLM `--shutdown-timeout` in brackets; G per "
        "recipe. SIGTERM at and held (delete to the engine's exit) in real seconds. Hook exit: "
        "the hook's status, if it returned before G. vLLM recipes (kserve, llm-d, "
        "drainhook st4, drainhook+plan) are not run on SGLang; drainhook st4 runs only where it "
        "measures `--shutdown-timeout` (below).",
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
    if any(run.ran(k) for k in ("drainhook-st", "drainhook+plan")):
        lines += [
            "## vLLM's `--shutdown-timeout`: what it costs and what it buys",
            "",
            "drainhook alone (G 30), drainhook with `--shutdown-timeout "
            f"{MEASURED_SHUTDOWN_TIMEOUT:g}` at the same G (drainhook st4), and the plan's "
            "recipe (drainhook+plan, what `plan` and `inject` write), in the scenarios that "
            "tell them apart: `idle`, the router "
            f"lag of `short` ({lag:g} s) and of `router-lag-20` (20 s), work that outlives D "
            "(`outlive`), and the rollout. slipped: requests sent after the idle read the hook "
            f"released on began and before the listener closed ({VLLM_LISTENER_CLOSE:g} s "
            "after SIGTERM): without the flag such a request stalls until G and holds the Pod "
            "there; with it, it completes if it ends within N.",
            "",
            *advice_table(run),
            "",
            *advice_text(run),
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
        "- The engine is drainhook's own simulated engine (`sim/`, the one "
        "`scripts/demo` runs), as a process. Its vLLM SIGTERM paths (one API server) are "
        "calibrated to the live vLLM 0.32 (its CPU build, measured on loopback): the engine "
        "core killed about 20 ms after SIGTERM with no abort, stalled streams, the listener "
        "closed within 0.25 s, the process kept by any open connection until SIGKILL, an exit "
        "0.4 s after SIGTERM with none; with `--shutdown-timeout N`, HTTP 500 for new "
        "requests; drained, the engine core tears itself down and the process exits "
        f"{span(*(end + VLLM_EXIT for end in VLLM_TEARDOWN))} s after the last request ended "
        "(live, idle at SIGTERM: 3.94-4.45 s at N = 4, 10 and 45 on one machine, 5.67 and "
        "6.26 s on another; after a stream that ended 1.65 s into the drain, "
        "3.98 s after its end: kserve's and llm-d's N = 45 does not hold an idle replica "
        "45 s), or the core is killed at N if a request is still running. Every delay is "
        "scaled with the rest. The "
        "several-API-server path is read in vLLM's code, not measured: inferred. A request "
        "that reaches vLLM in the 0.25 s between the engine core's death and the listener's "
        "close is taken to stall like those in flight (not measured).",
        "- Where the gauges are blind (`invisible`, `invisible-sglang`; read in vLLM 0.32's "
        "and SGLang 0.5.23's code, docs/engines.md): vLLM renders each request after its body "
        "is parsed and before its scheduler sees it (media processing one request at a time, "
        "on one worker), answers HTTP 500 to one whose render ends after the engine core "
        "went, and sets its gauges after each engine step; its `/load` reads 0 (server-load "
        "tracking is off by default). SGLang leaves a request being prefilled out of both "
        "gauges and `/v1/loads`, refreshes its running count at each prefill and every 40 "
        "decode iterations, counts every request in `sglang:http_requests_active` from "
        "before its body to after its last byte, and its SIGTERM drain waits for every "
        "request its server holds.",
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
