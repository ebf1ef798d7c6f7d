"""benchmarks/rehearsal.md: the table, drainhook's numbers checked, and where others do better.

Everything in the report is computed from the cells of the run that writes it;
the only prose kept here is the mechanism behind each case where another
strategy beats drainhook on a column, printed only when the run shows it.
"""

from __future__ import annotations

import datetime
import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path

from rehearsal import scenarios as scenario_table
from rehearsal import strategies as strategy_table
from rehearsal import svg
from rehearsal.matrix import Cell
from rehearsal.timeline import (
    DEADLINE,
    GRACE,
    INTERVAL,
    KILL_AFTER_TERM,
    ROUTER_LAG,
    SETTLE,
    SGLANG_NOTICE,
    SGLANG_PD_EXIT,
    VLLM_EXIT,
    WARMUP,
    Scale,
)

PICTURE_SCENARIO = "long"
IDLE_SLACK = 0.1  # the "+ 100 ms" on an idle replica's hold
HELD_MARGIN = 0.25  # real seconds: a smaller difference in held_s is not "better"

# Why other strategies beat drainhook on a column, scenario by scenario: the
# mechanism, printed only where the run shows such a case. Fields: lag, notice,
# pd, slot (G - pd), term (drainhook's SIGTERM, real s).
WHY: dict[str, str] = {
    "idle": "drainhook holds an idle engine for S + I: the settle, then a second, confirming "
    "read. No hook and the two loops have no settle (the curl loop ends on its first idle "
    "read, at once; the poll script on its second, 1 s later), and sleep 5 has no confirming "
    "read. Here nothing reaches the engine after the delete, so the settle protects nothing; "
    "in `short`, the router's last {lag:g} s of traffic is what it protects (no hook refuses "
    "it).",
    "short": "The work is over by about 4 s. drainhook reads at S and confirms at S + I; "
    "sleep 5 returns at S, the curl loop on its single idle read at 5 s, the poll script on "
    "its second idle read (its 1 s grid runs from its own start). The difference is "
    "drainhook's confirming read: about I.",
    "long": "The poll script's 1 s read grid runs from its own start, drainhook's from S; the "
    "last stream ended just before one of the script's reads. A phase difference of at most "
    "one interval, not a better method.",
    "dp-one-busy": "The poll script sums both DP engines, as drainhook does; its 1 s read grid "
    "runs from its own start, drainhook's from S. A phase difference of at most one interval.",
    "outlive": "The curl loop has no deadline: it holds until G, so the streams that end "
    "between D and G complete. drainhook keeps R = G - D for the engine's own exit. vLLM needs 1 s "
    "here, inside the kubelet's 2 s minimum after SIGTERM, so this run did not need the "
    "reserve; an engine that needs longer (`sglang-pd`) is SIGKILLed when a hook holds to G.",
    "moved": "drainhook's reads are refused (nothing listens on the port it was given): "
    "`unreachable`, which ends its wait right after the settle (CONTRACT §2: nothing to "
    "measure), and SIGTERM at S cuts the streams of an engine that is alive on its other "
    "port. sleep 15 holds longer whatever happens; the curl loop and the poll script do not "
    "tell a refused read from a busy one, so they wait (until G, and until G - 5) and the "
    "streams finish. No hook cuts one stream fewer than drainhook because it refuses, "
    "rather than cuts, the one sent during the router's lag.",
    "sglang-lag": "SGLang drains by itself after SIGTERM, with no bound, and keeps serving "
    "meanwhile, so an early SIGTERM cuts nothing here. drainhook reads the lagging gauges as "
    "busy until D, so it holds an engine idle since about 4 s until D, and then until "
    "SGLang's next look at its SIGTERM flag (every {notice:g} s). The poll script returns at "
    "about 1 s because it finds no vLLM gauge and takes that as idle: right here, for the "
    "wrong reason.",
    "sglang-pd": "The decode server needs about {pd:g} s after SIGTERM to exit. drainhook with "
    "its defaults (R = 5) sends SIGTERM once the work is done, here at {term:.1f} s; the "
    "teardown fits only if SIGTERM comes by G - {pd:g} = {slot:g} s, else SIGKILL cuts it "
    "short (no request was running by then). An earlier SIGTERM lets SGLang's own unbounded "
    "drain finish the work and the teardown complete; the poll script sees no vLLM gauge and "
    "returns at once. `drainhook plan --role decode` says as much: R >= 20, G about 45.",
}


def _cell(cells: Sequence[Cell], strategy: str, scenario: str) -> Cell | None:
    for c in cells:
        if c.strategy == strategy and c.scenario == scenario:
            return c
    return None


def _s(scale: Scale, measured: float | None) -> str:
    return "-" if measured is None else f"{scale.real(measured):.2f}"


def table(cells: Sequence[Cell], scale: Scale) -> list[str]:
    out = [
        "| scenario | strategy | completed | cut | refused | SIGTERM at (s) | held (s) "
        "| engine exit | hook exit |",
        "|---|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for sc in scenario_table.SCENARIOS:
        first = True
        for st in strategy_table.STRATEGIES:
            c = _cell(cells, st.key, sc.key)
            if c is None:
                continue
            name = f"**{sc.key}**" if first else ""
            first = False
            hook = "-" if c.hook_exit is None else str(c.hook_exit)
            if st.kind == "exec" and c.hook_returned_s is None:
                hook = "still running at G"
            out.append(
                f"| {name} | {st.label} | {c.completed} | {c.cut} | {c.refused} "
                f"| {_s(scale, c.sigterm_at_s)} | {_s(scale, c.held_s)} "
                f"| {'SIGKILL' if c.sigkill else 'clean'} | {hook} |"
            )
    return out


def checks(cells: Sequence[Cell], scale: Scale) -> list[str]:
    """The issue's numbers for drainhook, each with its verdict and the measurement."""
    mine = {c.scenario: c for c in cells if c.strategy == "drainhook"}
    out: list[str] = []

    def verdict(ok: bool) -> str:
        return "**holds**" if ok else "**does not hold**"

    lag = next(iter(mine.values())).router_lag if mine else ROUTER_LAG
    before = [(k, c) for k, c in mine.items() if scenario_table.BY_KEY[k].ends_before_deadline(lag)]
    if before:
        cut = [f"`{k}` {c.cut}" for k, c in before]
        ok = all(c.cut == 0 for _, c in before)
        out.append(
            f"1. Cuts 0 requests in every scenario whose work ends before D: {verdict(ok)}. "
            f"Cut per scenario: {', '.join(cut)}."
        )
    if "idle" in mine:
        c = mine["idle"]
        base = scale(SETTLE + INTERVAL)
        over_ms = (c.sigterm_at_s - base) * 1000.0
        own = c.hook_elapsed()
        own_ms = "?" if own is None else f"{(own - base) * 1000.0:.0f}"
        ok_abs = c.sigterm_at_s <= base + IDLE_SLACK
        ok_scaled = c.sigterm_at_s <= scale(SETTLE + INTERVAL + IDLE_SLACK)
        out.append(
            f"2. Holds an idle replica no longer than S + I + 100 ms: SIGTERM came "
            f"{c.sigterm_at_s:.3f} s after the delete, {over_ms:.0f} ms past (S + I) x F = "
            f"{base:.3f} s; drainhook's own summary says {own_ms} ms past. With 100 ms "
            f"unscaled: {verdict(ok_abs)}; with 100 ms x F = {scale(IDLE_SLACK) * 1000:.0f} ms: "
            f"{verdict(ok_scaled)}. The gap between its summary line and the kubelet seeing it "
            "exit is the interpreter's own exit, which does not shrink with the scale."
        )
    if mine:
        d = scale(DEADLINE)
        worst = max(mine.values(), key=lambda c: c.sigterm_at_s)
        returns = [e for c in mine.values() if (e := c.hook_elapsed()) is not None]
        own_max = max(returns, default=None)
        ok = worst.sigterm_at_s <= d
        own_text = "?" if own_max is None else f"{(own_max - d) * 1000.0:+.0f} ms"
        out.append(
            f"3. Never holds past D: {verdict(ok)} as the kubelet sees it. Latest SIGTERM: "
            f"`{worst.scenario}`, {(worst.sigterm_at_s - d) * 1000.0:+.0f} ms from D = {d:g} s; "
            f"drainhook's own latest return: {own_text} from D. The rest is the process's exit "
            "after its summary line."
        )
    worse = []
    for key, c in mine.items():
        others = [o for o in cells if o.scenario == key and o.strategy != "drainhook"]
        fewer = [o for o in others if o.cut < c.cut]
        if fewer:
            best = min(fewer, key=lambda o: o.cut)
            worse.append(
                f"`{key}` (drainhook {c.cut}, {strategy_table.BY_KEY[best.strategy].label} "
                f"{best.cut})"
            )
    if mine:
        tail = f" Cut more in: {', '.join(worse)}." if worse else ""
        out.append(
            f"4. In no scenario cuts more requests than any other strategy: "
            f"{verdict(not worse)}.{tail}"
        )
    return out


def _wins(mine: Cell, other: Cell, scale: Scale) -> list[str]:
    """The columns on which `other` beats drainhook's cell, with both numbers."""
    wins = []
    if other.completed > mine.completed:
        wins.append(f"completed {other.completed} vs {mine.completed}")
    if other.cut < mine.cut:
        wins.append(f"cut {other.cut} vs {mine.cut}")
    if other.refused < mine.refused:
        wins.append(f"refused {other.refused} vs {mine.refused}")
    if scale.real(mine.held_s) - scale.real(other.held_s) > HELD_MARGIN:
        wins.append(f"held {scale.real(other.held_s):.2f} s vs {scale.real(mine.held_s):.2f} s")
    if mine.sigkill and not other.sigkill:
        wins.append("engine exit clean vs SIGKILL")
    return wins


def better(cells: Sequence[Cell], scale: Scale) -> list[str]:
    """Per scenario, each strategy that beats drainhook on a column, the numbers, and why.

    A strategy that only holds the engine less, and loses more requests doing so,
    goes on a line of its own per scenario: its shorter hold is bought with them.
    """
    out = []
    for sc in scenario_table.SCENARIOS:
        mine = _cell(cells, "drainhook", sc.key)
        if mine is None:
            continue
        wins, trades = [], []
        for st in strategy_table.STRATEGIES:
            other = _cell(cells, st.key, sc.key)
            if other is None or st.key == "drainhook":
                continue
            columns = _wins(mine, other, scale)
            lost = other.cut + other.refused - mine.cut - mine.refused
            if lost > 0 and all(w.startswith(("held", "engine exit")) for w in columns):
                trades.append(
                    f"{st.label} ({scale.real(other.held_s):.2f} s; cut {other.cut}, "
                    f"refused {other.refused})"
                )
            elif columns:
                wins.append(f"{st.label} ({'; '.join(columns)})")
        if wins:
            why = WHY.get(sc.key, "").format(
                lag=mine.router_lag,
                notice=SGLANG_NOTICE,
                pd=SGLANG_PD_EXIT,
                slot=GRACE - SGLANG_PD_EXIT,
                term=scale.real(mine.sigterm_at_s),
            )
            out.append(f"- **{sc.key}**: {', '.join(wins)}. {why}".rstrip())
        if trades:
            out.append(
                f"- **{sc.key}**, shorter holds bought with requests: {', '.join(trades)}, "
                f"against drainhook's {scale.real(mine.held_s):.2f} s with cut {mine.cut}, "
                f"refused {mine.refused}: they send SIGTERM while work is in flight."
            )
    return out or ["- None: drainhook is best or tied on every column of every scenario."]


def _setup(router_lag: float) -> list[str]:
    out = [
        "| strategy | what the kubelet runs |",
        "|---|---|",
        *(f"| {s.label} | {s.what} |" for s in strategy_table.STRATEGIES),
        "",
        "| scenario | traffic and twist | work ends before D |",
        "|---|---|---|",
    ]
    for sc in scenario_table.SCENARIOS:
        ends = "yes" if sc.ends_before_deadline(router_lag) else "no"
        out.append(f"| `{sc.key}` | {sc.what} | {ends} |")
    return out


def write(path: Path, cells: Sequence[Cell], scale: Scale, wall: float, picture: str) -> None:
    """Write the report to path and the timeline picture beside it."""
    picture_cells = [
        c for st in strategy_table.STRATEGIES if (c := _cell(cells, st.key, picture)) is not None
    ]
    lag = cells[0].router_lag if cells else ROUTER_LAG
    svg_path = path.with_name(path.stem + "-timeline.svg")
    if picture_cells:
        scenario = scenario_table.BY_KEY[picture]
        svg_path.write_text(svg.render(scenario, picture_cells, scale))
    curl = "bash + curl" if strategy_table.CURL else "its urllib equivalent (no curl here)"
    today = datetime.date.today().isoformat()
    f = scale.factor
    lines = [
        "# Rehearsal: drain strategies under live traffic",
        "",
        "<!-- written by scripts/rehearse; rerun it to refresh -->",
        "",
        f"`scripts/rehearse` ran {len(cells)} cells at `--scale {f:g}` in {wall:.0f} s "
        f"({today}, Python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"2 cells at a time, 5-minute load average {os.getloadavg()[1]:.1f} at the end). "
        "Every part is a real process on loopback: the simulated engine, "
        f"the load generator, and each strategy's hook, started by a kubelet emulator; the "
        f"curl loop ran under {curl}. Times below are real seconds: measured / {f:g}. Fixed "
        f"costs that do not scale (a process's start and exit, ~50 ms) are multiplied by "
        f"{1 / f:g} in them; the checks give those in measured milliseconds.",
        "",
        "## The rollout",
        "",
        f"At t=0 the Pod is deleted: the grace clock G = {GRACE:g} s starts and the kubelet runs "
        f"the preStop hook; SIGTERM when it returns (or at G), SIGKILL at G but never sooner "
        f"than {KILL_AFTER_TERM:g} s after SIGTERM. Traffic runs from {WARMUP:g} s before the "
        f"delete until the router stops sending, {lag:g} s after it. vLLM (2 DP "
        f"engines, `--shutdown-timeout 0`) aborts every running and waiting request on "
        f"SIGTERM, stops listening and exits {VLLM_EXIT:g} s later. SGLang looks at its SIGTERM "
        f"flag every {SGLANG_NOTICE:g} s, then drains with no bound and keeps serving. drainhook "
        f"runs with its defaults: S = {SETTLE:g}, I = {INTERVAL:g}, R = {GRACE - DEADLINE:g}, "
        f"so D = {DEADLINE:g} s (passed as flags times {f:g}).",
        "",
        *_setup(lag),
        "",
        "## Results",
        "",
        "completed: the final `data: [DONE]` arrived; cut: the stream ended early or the "
        "connection was reset; refused: connection refused or HTTP 503. SIGTERM at and held "
        "(delete to the engine's exit) in real seconds. Hook exit: the hook's status, if it "
        "returned before G.",
        "",
        *table(cells, scale),
        "",
        "## drainhook's numbers",
        "",
        *checks(cells, scale),
        "",
        "## Where another strategy does better",
        "",
        "Every column where another strategy beats drainhook in this run (held: by more than "
        f"{HELD_MARGIN:g} s), and why.",
        "",
        *better(cells, scale),
        "",
    ]
    if picture_cells:
        lines += [
            "## Timeline",
            "",
            f"`{picture}`, every strategy: requests, the /metrics reads the engine answered, "
            "SIGTERM and the engine's exit.",
            "",
            f"![timeline of the {picture} scenario]({svg_path.name})",
            "",
        ]
    lines += [
        "## How it is modelled",
        "",
        "- Each request's duration is drawn from the scenario's distribution by its id, so "
        "every strategy of a scenario serves the same requests; the load generator records "
        "each one's outcome as it ends.",
        "- The curl loop keeps the first sample of each gauge (`grep -m1`), as written against "
        'one engine: with 2 DP engines it reads `engine="0"` only. `dp-one-busy` puts the '
        "work on engine 1.",
        "- The poll script and the curl loop look for vLLM's gauges only: on SGLang the "
        "script finds none (idle), the loop never matches (holds to G).",
        f"- SGLang's watchdog looks at its SIGTERM flag every {SGLANG_NOTICE:g} s from the "
        "engine's start; the rehearsal pins those looks to 2.5 s after the delete + k x 5 s "
        "(the mean phase), the same for every strategy. `sglang-lag` uses the worst case of "
        "the lag (30 s).",
        "- The router's lag and the load are the same for every strategy; a request the "
        "router sends to a stopped vLLM is refused (a real router would retry it elsewhere).",
        "",
        f"Rerun: `scripts/rehearse` (add `--scale 1` for real time; `--json` prints one object "
        f"per cell). Command line of this run: `{' '.join(sys.argv[1:]) or '(defaults)'}`.",
        "",
    ]
    path.write_text("\n".join(lines))
