"""benchmarks/rehearsal.md: the tables, drainhook's claims checked, and where others do better.

Everything in the report is computed from the cells of the run that writes it:
each claim is a rule (`CLAIMS`) that reads the run and says holds or does not
hold, with the numbers. The only prose kept here is the mechanism behind each
case where a claim fails or another recipe beats drainhook on a column,
printed only when the run shows it.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rehearsal import scenarios as scenario_table
from rehearsal import strategies as strategy_table
from rehearsal import svg
from rehearsal.record import Cell
from rehearsal.rollout import Rollout
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
DRAINHOOKS = ("drainhook", "drainhook+st")
BASELINE = "kserve"  # the recipe drainhook's halving claims are measured against


@dataclass
class Run:
    """What one `scripts/rehearse` run measured, and how and where it ran."""

    cells: Sequence[Cell]
    rollouts: Sequence[Rollout]
    scale: Scale
    wall: float
    plan: Plan | None
    parallel: int = 3
    rollout_parallel: int = 8
    argv: str = field(default_factory=lambda: shown_argv(sys.argv[1:]))
    date: str = field(default_factory=lambda: datetime.date.today().isoformat())
    python: str = field(default_factory=platform.python_version)
    cpus: int = field(default_factory=lambda: os.cpu_count() or 0)
    load: float = field(default_factory=lambda: os.getloadavg()[1])

    def cell(self, strategy: str, scenario: str) -> Cell | None:
        for c in self.cells:
            if c.strategy == strategy and c.scenario == scenario:
                return c
        return None

    def rollout(self, strategy: str) -> Rollout | None:
        return next((r for r in self.rollouts if r.strategy == strategy), None)

    def real(self, measured: float) -> float:
        return self.scale.real(measured)

    def timeline(self, key: str) -> tuple[float, float, float] | None:
        """A drainhook recipe's S, I and D (real seconds); None if it did not run."""
        if key == "drainhook":
            return SETTLE, INTERVAL, DEADLINE
        if key == "drainhook+st" and self.plan is not None:
            return self.plan.settle, self.plan.interval, self.plan.deadline
        return None

    def ran(self, key: str) -> bool:
        return any(c.strategy == key for c in self.cells) or self.rollout(key) is not None

    def lag(self) -> float:
        plain = [c for c in self.cells if scenario_table.BY_KEY[c.scenario].router_lag is None]
        return plain[0].router_lag if plain else ROUTER_LAG


PATH_OPTIONS = ("--data", "--report", "--from-data")


def shown_argv(argv: Sequence[str]) -> str:
    """The command line as the report shows it: without the options that name files."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in PATH_OPTIONS:
            skip = True
        elif not arg.startswith(tuple(f"{o}=" for o in PATH_OPTIONS)):
            out.append(arg)
    return " ".join(out)


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


# --- drainhook's claims, as rules ---------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    text: str
    holds: bool
    evidence: str
    why: str = ""  # the mechanism, printed when it does not hold


Rule = Callable[[Run, str], "Claim | None"]

# Why a recipe cuts or refuses fewer than drainhook in a scenario whose work ends
# before D, by (drainhook recipe, scenario): printed only where the run shows it.
WHY_LOST: dict[tuple[str, str], str] = {
    ("drainhook", "moved"): "drainhook reads a port where nothing listens: `unreachable`, "
    "which ends its wait right after the settle (CONTRACT §2: nothing to measure), and "
    "SIGTERM at S cuts the streams of an engine alive on its other port. Recipes that hold "
    "longer whatever they read (a sleep, a loop that takes a refused read for busy) let "
    "the streams finish. Listener discovery (the hook reading every listener of the Pod "
    "when its target refuses) is what closes this case.",
    ("drainhook+st", "moved"): "As for drainhook: `unreachable` right after the settle; "
    "vLLM's `--shutdown-timeout {st:g}` then drains for {st:g} s only, while the loops (which "
    "take a refused read for busy), kserve's and llm-d's 45 s drain and the longer sleeps "
    "outlast the streams. Listener discovery closes this case too.",
    ("drainhook", "router-lag-20"): "The router sends for {lag20:g} s and the last stream "
    "ends by about {lag20_end:g} s, just before D = {d:g} s: drainhook needs two idle reads "
    "in a row after the work is over, and the deadline came first in this run.",
}


def _lost_before_deadline(run: Run, key: str) -> Claim | None:
    timeline = run.timeline(key)
    if timeline is None or not run.ran(key):
        return None
    deadline = timeline[2]
    worse, seen = [], []
    reasons = []
    for sc in scenario_table.SCENARIOS:
        mine = run.cell(key, sc.key)
        if mine is None or not sc.ends_before_deadline(run.lag(), deadline):
            continue
        seen.append(sc.key)
        beaten = [
            o
            for o in run.cells
            if o.scenario == sc.key
            and o.strategy != key
            and (o.cut < mine.cut or o.refused < mine.refused)
        ]
        if beaten:
            best = min(beaten, key=lambda o: (o.cut + o.refused, o.cut))
            worse.append(
                f"`{sc.key}` ({_label(key)} cut {mine.cut}, refused {mine.refused}; "
                f"{_label(best.strategy)} cut {best.cut}, refused {best.refused})"
            )
            if (key, sc.key) in WHY_LOST:
                reasons.append(f"`{sc.key}`: " + _why(WHY_LOST[(key, sc.key)], run, key))
    if not seen:
        return None
    evidence = f"Scenarios (work ends before D = {deadline:g} s): {', '.join(seen)}." + (
        f" More lost than another recipe in: {'; '.join(worse)}." if worse else ""
    )
    return Claim(
        "In every scenario whose work ends before D, cuts and refuses no more than any recipe",
        not worse,
        evidence,
        " ".join(reasons),
    )


def _idle_half(run: Run, key: str) -> Claim | None:
    mine, base = run.cell(key, "idle"), run.cell(BASELINE, "idle")
    timeline = run.timeline(key)
    if mine is None or base is None or timeline is None:
        return None
    ratio = mine.held_s / base.held_s
    s, i, _ = timeline
    return Claim(
        f"Holds an idle replica at most half as long as {_label(BASELINE)}",
        ratio <= 0.5,
        f"held {run.real(mine.held_s):.2f} s against {run.real(base.held_s):.2f} s "
        f"(ratio {ratio:.2f}).",
        f"An idle replica is held S + I = {s + i:g} s plus the engine's exit; "
        f"{_label(BASELINE)}'s sleep lasts {strategy_table.BY_KEY[BASELINE].sleep:g} s.",
    )


def _rollout_half(run: Run, key: str) -> Claim | None:
    mine, base = run.rollout(key), run.rollout(BASELINE)
    if mine is None or base is None:
        return None
    held, base_held = sum(mine.holds()), sum(base.holds())
    (_, cut, refused), (_, b_cut, b_refused) = mine.counts(), base.counts()
    ratio = held / base_held
    ok = ratio <= 0.5 and cut <= b_cut and refused <= b_refused
    n = len(mine.cells)
    lag, high = run.lag(), scenario_table.BY_KEY["rollout"].load
    last = lag + (high.high if high else 0.0)
    why = (
        f"Each departing replica carries streams of up to {high.high if high else 0:g} s until "
        f"the router stops sending to it, {lag:g} s after the delete, so its work ends up to "
        f"{last:g} s after the delete; {_label(key)} holds it until then and a confirming read "
        f"later (mean {held / n:.1f} s per replica), {_label(BASELINE)} for its "
        f"{strategy_table.BY_KEY[BASELINE].sleep:g} s sleep and the engine's exit "
        f"(mean {base_held / n:.1f} s). Half of that needs the work to be over within "
        f"about {base_held / n / 2:.0f} s of the delete."
        if ratio > 0.5
        else ""
    )
    if cut > b_cut or refused > b_refused:
        why += f" It lost more requests: cut {cut} vs {b_cut}, refused {refused} vs {b_refused}."
    return Claim(
        f"Over the {n}-replica rollout, holds departing replicas for at most half of "
        f"{_label(BASELINE)}'s accelerator-seconds, with no more requests cut or refused",
        ok,
        f"{held:.1f} against {base_held:.1f} accelerator-seconds (ratio {ratio:.2f}); "
        f"cut {cut} vs {b_cut}, refused {refused} vs {b_refused}.",
        why.strip(),
    )


def _zero_cut_before_deadline(run: Run, key: str) -> Claim | None:
    timeline = run.timeline(key)
    if timeline is None:
        return None
    before = [
        c
        for c in run.cells
        if c.strategy == key
        and scenario_table.BY_KEY[c.scenario].ends_before_deadline(run.lag(), timeline[2])
    ]
    if not before:
        return None
    cut = ", ".join(f"`{c.scenario}` {c.cut}" for c in before)
    failing = [c.scenario for c in before if c.cut]
    why = " ".join(
        f"`{k}`: " + _why(WHY_LOST[(key, k)], run, key) for k in failing if (key, k) in WHY_LOST
    )
    return Claim(
        "Cuts 0 requests in every scenario whose work ends before D",
        not failing,
        f"Cut per scenario: {cut}.",
        why,
    )


def _idle_exit(run: Run, key: str) -> Claim | None:
    c, timeline = run.cell(key, "idle"), run.timeline(key)
    if c is None or timeline is None:
        return None
    s, i, _ = timeline
    base = run.scale(s + i)
    over_ms = (c.sigterm_at_s - base) * 1000.0
    own = c.hook_elapsed()
    own_ms = "?" if own is None else f"{(own - base) * 1000.0:.0f}"
    ok_abs = c.sigterm_at_s <= base + IDLE_SLACK
    ok_scaled = c.sigterm_at_s <= run.scale(s + i + IDLE_SLACK)
    return Claim(
        "Holds an idle replica no longer than S + I + 100 ms",
        ok_abs,
        f"SIGTERM came {c.sigterm_at_s:.3f} s after the delete, {over_ms:.0f} ms past (S + I) "
        f"x F = {base:.3f} s; drainhook's own summary says {own_ms} ms past. With 100 ms x F "
        f"= {run.scale(IDLE_SLACK) * 1000:.0f} ms: "
        f"{'holds' if ok_scaled else 'does not hold'}. The gap between its summary line and "
        "the kubelet seeing it exit is the interpreter's own exit, which does not shrink "
        "with the scale.",
    )


def _never_past_deadline(run: Run, key: str) -> Claim | None:
    timeline = run.timeline(key)
    mine = [c for c in run.cells if c.strategy == key]
    if timeline is None or not mine:
        return None
    d = run.scale(timeline[2])
    worst = max(mine, key=lambda c: c.sigterm_at_s)
    returns = [e for c in mine if (e := c.hook_elapsed()) is not None]
    own = "?" if not returns else f"{(max(returns) - d) * 1000.0:+.0f} ms"
    return Claim(
        "Never holds past D, as the kubelet sees it",
        worst.sigterm_at_s <= d,
        f"Latest SIGTERM: `{worst.scenario}`, {(worst.sigterm_at_s - d) * 1000.0:+.0f} ms from "
        f"D = {d:g} s (measured); drainhook's own latest return: {own} from D.",
        "The rest is the process's exit after its summary line." if worst.sigterm_at_s > d else "",
    )


def _no_more_cut(run: Run, key: str) -> Claim | None:
    mine = [c for c in run.cells if c.strategy == key]
    if not mine:
        return None
    worse = []
    for c in mine:
        others = [o for o in run.cells if o.scenario == c.scenario and o.strategy != key]
        fewer = [o for o in others if o.cut < c.cut]
        if fewer:
            best = min(fewer, key=lambda o: o.cut)
            g = f", G {best.grace:g} vs {c.grace:g}" if best.grace != c.grace else ""
            worse.append(
                f"`{c.scenario}` ({_label(key)} {c.cut}, {_label(best.strategy)} {best.cut}{g})"
            )
    return Claim(
        "In no scenario cuts more requests than any other recipe",
        not worse,
        f"Cut more in: {', '.join(worse)}." if worse else "Never.",
        "Each case is explained under *Where another recipe does better*." if worse else "",
    )


CLAIMS: tuple[Rule, ...] = (
    _lost_before_deadline,
    _idle_half,
    _rollout_half,
    _zero_cut_before_deadline,
    _idle_exit,
    _never_past_deadline,
    _no_more_cut,
)


def _why(text: str, run: Run, key: str) -> str:
    timeline = run.timeline(key) or (SETTLE, INTERVAL, DEADLINE)
    lag20 = scenario_table.BY_KEY["router-lag-20"]
    return text.format(
        st=run.plan.shutdown_timeout if run.plan else 0,
        lag20=lag20.lag(),
        lag20_end=lag20.lag() + (lag20.load.high if lag20.load else 0),
        d=timeline[2],
    )


def claims(run: Run) -> list[str]:
    out: list[str] = []
    for key in DRAINHOOKS:
        found = [c for rule in CLAIMS if (c := rule(run, key)) is not None]
        if not found:
            continue
        what = strategy_table.BY_KEY[key].what
        out += ["", f"### {_label(key)}", "", what, ""]
        for n, c in enumerate(found, 1):
            verdict = "**holds**" if c.holds else "**does not hold**"
            why = f" Why: {c.why}" if c.why and not c.holds else ""
            out.append(f"{n}. {c.text}: {verdict}. {c.evidence}{why}")
    return out[1:] if out else ["No drainhook recipe ran."]


# --- where another recipe does better ------------------------------------------------------

# Why another recipe beats a drainhook recipe on a column: the mechanism, by (scenario,
# the other recipe), "*" for any; printed only where the run shows such a case. Fields:
# lag, notice, pd, slot (G - pd), term (drainhook's SIGTERM, real s), st (the plan's
# --shutdown-timeout), lag20, d (the recipe's D), slack.
_PHASE = (
    "The poll script's 1 s read grid runs from its own start, drainhook's from S; the last "
    "stream ended just before one of the script's reads. A phase difference of at most one "
    "interval, not a better method."
)
_VLLM_DRAIN = (
    "kserve and llm-d send SIGTERM at 15 s while streams still run, and vLLM with "
    "`--shutdown-timeout 45` drains them itself and exits as soon as the last one ends; "
    "{me} sends SIGTERM only once two reads 1 s apart found the engine idle, and vLLM then "
    "takes its {exit:g} s to exit: up to 2 s more. That drain refuses every request that "
    "arrives meanwhile (`router-lag-20`), and with several API servers it cuts the streams "
    "instead (`dp-api-servers`)."
)
_HANG = (
    "/metrics never answers: {me} cannot tell idle from busy and holds until D = {d:g} s. "
    "kserve's and llm-d's sleep reads nothing and vLLM's own drain ends with the last stream; "
    "the loops hold until their G (30 s) or G - 5."
)
WHY: dict[tuple[str, str], str] = {
    ("idle", "*"): "drainhook holds an idle engine for S + I: the settle, then a second, "
    "confirming read. No hook and the two loops have no settle (the curl loop ends on its "
    "first idle read, at once; the poll script on its second, 1 s later), and sleep 5 has no "
    "confirming read. Here nothing reaches the engine after the delete, so the settle "
    "protects nothing; in `short`, the router's last {lag:g} s of traffic is what it protects "
    "(no hook refuses it).",
    ("short", "*"): "The work is over by about 4 s. drainhook reads at S and confirms at "
    "S + I; sleep 5 returns at S, the curl loop on its single idle read at 5 s, the poll "
    "script on its second idle read (its 1 s grid runs from its own start). The difference "
    "is drainhook's confirming read: about I.",
    ("*", "poll-script"): _PHASE,
    ("*", "kserve"): _VLLM_DRAIN,
    ("*", "llm-d"): _VLLM_DRAIN,
    ("hang", "*"): _HANG,
    ("outlive", "*"): "Streams run past D. The curl loop has no deadline: it holds until G, "
    "so the streams that end between D and G complete. kserve and llm-d have a G of 60 and "
    "75 s against drainhook's 30, and vLLM's own drain after their sleep: streams of up to "
    "40 s end inside it. drainhook keeps R = G - D for the engine's exit; "
    "with a G of 30 s it cannot wait for a 40 s stream: drainhook+st (G 60) is the recipe to "
    "compare with those.",
    ("moved", "*"): "drainhook's reads are refused (nothing listens on the port it was "
    "given): `unreachable`, which ends its wait right after the settle (CONTRACT §2: nothing "
    "to measure), and SIGTERM at S cuts the streams of an engine that is alive on its other "
    "port. The sleeps hold longer whatever happens; the curl loop and the poll script do not "
    "tell a refused read from a busy one, so they wait (until G, and until G - 5) and the "
    "streams finish.",
    ("sglang-lag", "*"): "SGLang drains by itself after SIGTERM, with no bound, and keeps "
    "serving meanwhile, so an early SIGTERM cuts nothing here. drainhook reads the lagging "
    "gauges as busy until D, so it holds an engine idle since about 4 s until D, and then "
    "until SGLang's next look at its SIGTERM flag (every {notice:g} s). The poll script "
    "returns at about 1 s because it finds no vLLM gauge and takes that as idle: right here, "
    "for the wrong reason. Reading SGLang's live /v1/loads (`--source loads`) closes this.",
    ("sglang-pd", "*"): "The decode server needs about {pd:g} s after SIGTERM to exit. "
    "drainhook with its defaults (R = 5) sends SIGTERM once the work is done, here at "
    "{term:.1f} s; the teardown fits only if SIGTERM comes by G - {pd:g} = {slot:g} s, else "
    "SIGKILL cuts it short (no request was running by then). An earlier SIGTERM lets "
    "SGLang's own unbounded drain finish the work and the teardown complete; the poll script "
    "sees no vLLM gauge and returns at once. `drainhook plan --role decode` says as much: "
    "R >= 20, G about 45.",
}
# The same, for drainhook+st (G 60, D 55, vLLM --shutdown-timeout from the plan).
WHY_ST: dict[tuple[str, str], str] = {
    ("idle", "*"): "drainhook+st holds an idle engine for S + I, as drainhook does; no hook "
    "and the loops have no settle and return on their first or second idle read, and sleep 5 "
    "has no confirming read.",
    ("short", "*"): "As for drainhook: its confirming read, about I, after work that is over "
    "by about 4 s.",
    ("*", "poll-script"): _PHASE,
    ("*", "kserve"): _VLLM_DRAIN,
    ("*", "llm-d"): _VLLM_DRAIN,
    ("hang", "*"): _HANG,
    ("moved", "*"): "drainhook+st's reads are refused: `unreachable` right after the settle, "
    "as for drainhook; vLLM's `--shutdown-timeout {st:g}` then drains for {st:g} s only, "
    "while kserve's and llm-d's 45 s drain, the loops (which take a refused read for busy) "
    "and the longer sleeps outlast the streams.",
}


def _reason(table: dict[tuple[str, str], str], scenario: str, other: str) -> str:
    for key in ((scenario, other), (scenario, "*"), ("*", other)):
        if key in table:
            return table[key]
    return ""


def _wins(run: Run, mine: Cell, other: Cell) -> list[str]:
    """The columns on which `other` beats drainhook's cell, with both numbers."""
    wins = []
    if other.completed > mine.completed:
        wins.append(f"completed {other.completed} vs {mine.completed}")
    if other.cut < mine.cut:
        wins.append(f"cut {other.cut} vs {mine.cut}")
    if other.refused < mine.refused:
        wins.append(f"refused {other.refused} vs {mine.refused}")
    if run.real(mine.held_s) - run.real(other.held_s) > HELD_MARGIN:
        wins.append(f"held {run.real(other.held_s):.2f} s vs {run.real(mine.held_s):.2f} s")
    if mine.sigkill and not other.sigkill:
        wins.append("engine exit clean vs SIGKILL")
    return wins


def better(run: Run) -> list[str]:
    """Per drainhook recipe and scenario, each recipe that beats it on a column, and why.

    A recipe that only holds the engine less, and loses more requests doing so, goes
    on a line of its own per scenario: its shorter hold is bought with them.
    """
    out = []
    for key in DRAINHOOKS:
        lines = []
        timeline = run.timeline(key) or (SETTLE, INTERVAL, DEADLINE)
        for sc in scenario_table.SCENARIOS:
            mine = run.cell(key, sc.key)
            if mine is None:
                continue
            wins, trades, winners = [], [], []
            for st in strategy_table.STRATEGIES:
                other = run.cell(st.key, sc.key)
                if other is None or st.key in DRAINHOOKS:  # not the same hook at another G
                    continue
                columns = _wins(run, mine, other)
                lost = other.cut + other.refused - mine.cut - mine.refused
                g = f", G {other.grace:g}" if other.grace != mine.grace else ""
                if lost > 0 and all(w.startswith(("held", "engine exit")) for w in columns):
                    trades.append(
                        f"{st.label} ({run.real(other.held_s):.2f} s; cut {other.cut}, "
                        f"refused {other.refused})"
                    )
                elif columns:
                    wins.append(f"{st.label} ({'; '.join(columns)}{g})")
                    winners.append(st.key)
            if wins:
                table = WHY if key == "drainhook" else WHY_ST
                lag20 = scenario_table.BY_KEY["router-lag-20"].lag()
                reasons: list[str] = []
                for winner in winners:
                    text = _reason(table, sc.key, winner).format(
                        me=_label(key),
                        exit=VLLM_EXIT,
                        lag=mine.router_lag,
                        notice=SGLANG_NOTICE,
                        pd=SGLANG_PD_EXIT,
                        slot=GRACE - SGLANG_PD_EXIT,
                        term=run.real(mine.sigterm_at_s),
                        st=run.plan.shutdown_timeout if run.plan else 0,
                        lag20=lag20,
                        d=timeline[2],
                    )
                    if text and text not in reasons:
                        reasons.append(text)
                lines.append(f"- **{sc.key}**: {', '.join(wins)}. {' '.join(reasons)}".rstrip())
            if trades:
                lines.append(
                    f"- **{sc.key}**, shorter holds bought with requests: {', '.join(trades)}, "
                    f"against {_label(key)}'s {run.real(mine.held_s):.2f} s with cut {mine.cut}, "
                    f"refused {mine.refused}: they send SIGTERM while work is in flight."
                )
        if lines:
            out += ["", f"### Against {_label(key)}", "", *lines]
    return out[1:] if out else ["- None: drainhook is best or tied on every column."]


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
        "milliseconds.",
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


# --- a run's data, kept to write the report again -------------------------------------------


def save(path: Path, run: Run) -> None:
    """Every cell of the run, as JSON lines, after one line on the run itself."""
    head = {
        "run": {
            "scale": run.scale.factor,
            "wall": run.wall,
            "plan": None if run.plan is None else dataclasses.asdict(run.plan),
            "parallel": run.parallel,
            "rollout_parallel": run.rollout_parallel,
            "argv": run.argv,
            "date": run.date,
            "python": run.python,
            "cpus": run.cpus,
            "load": run.load,
        }
    }
    lines = [json.dumps(head)]
    lines += [json.dumps({"cell": c.to_json()}) for c in run.cells]
    for r in run.rollouts:
        lines += [json.dumps({"cell": c.to_json(), "rollout": r.strategy}) for c in r.cells]
    path.write_text("\n".join(lines) + "\n")


def load(path: Path) -> Run:
    """The run `save` wrote."""
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    head = lines[0]["run"]
    cells = [Cell.from_json(e["cell"]) for e in lines[1:] if "rollout" not in e]
    by_recipe: dict[str, list[Cell]] = {}
    for e in lines[1:]:
        if "rollout" in e:
            by_recipe.setdefault(e["rollout"], []).append(Cell.from_json(e["cell"]))
    rollouts = [
        Rollout(key, sorted(cs, key=lambda c: c.replica or 0), REPLICA_START)
        for key, cs in by_recipe.items()
    ]
    plan = head["plan"]
    return Run(
        cells,
        rollouts,
        Scale(head["scale"]),
        head["wall"],
        None if plan is None else Plan(**{**plan, "arguments": tuple(plan["arguments"])}),
        head["parallel"],
        head["rollout_parallel"],
        head["argv"],
        head["date"],
        head["python"],
        head["cpus"],
        head["load"],
    )
