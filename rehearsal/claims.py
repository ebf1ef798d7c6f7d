"""drainhook's claims, each a rule that reads a run and says holds or does not hold, and
where another recipe does better than a drainhook recipe, with the mechanism why.

Everything is computed from the run's cells; the only prose kept here is the
mechanism behind each case where a claim fails or another recipe beats drainhook
on a column, printed only when the run shows it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rehearsal import scenarios as scenario_table
from rehearsal import strategies as strategy_table
from rehearsal.record import Cell
from rehearsal.run import DRAINHOOKS, NOT_RIVALS, ORACLE, Run
from rehearsal.timeline import (
    DEADLINE,
    GRACE,
    INTERVAL,
    SETTLE,
    SGLANG_NOTICE,
    SGLANG_PD_EXIT,
    VLLM_EXIT,
    VLLM_TEARDOWN,
    span,
)

IDLE_SLACK = 0.1  # the "+ 100 ms" on an idle replica's hold
ORACLE_RATIO = 1.05  # the rollout's accelerator-seconds against the oracle's (issue 33)
AFTER_WORK = 1.0  # the "+ 1 s" past S + I after the last request ends
# Scenarios whose engine goes idle well before D: vLLM, and SGLang whose gauges lag.
RELEASE_SCENARIOS = ("short", "sglang-lag")
HELD_MARGIN = 0.25  # real seconds: a smaller difference in held_s is not "better"
BASELINE = "kserve"  # the recipe drainhook's halving claims are measured against


def _label(key: str) -> str:
    return strategy_table.BY_KEY[key].label


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
            and o.strategy not in NOT_RIVALS
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


def _flag_exit(shutdown_timeout: float) -> str:
    """vLLM's exit after SIGTERM with nothing in flight, with `--shutdown-timeout N`:
    the engine core's teardown (a range: the machine's) or N, whichever is shorter."""
    if not shutdown_timeout:
        return f"{VLLM_EXIT:g} s"
    low, high = (min(shutdown_timeout, end) for end in VLLM_TEARDOWN)
    return f"{span(low, high) if low < high else f'{low:g}'} + {VLLM_EXIT:g} s"


def idle_half(run: Run, key: str) -> Claim | None:
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
        f"An idle replica is held S + I/4 = {s + i / 4:g} s plus the engine's exit "
        f"({VLLM_EXIT:g} s; with vLLM's `--shutdown-timeout N`, {span(*VLLM_TEARDOWN)} s more of "
        f"its engine core's teardown, or N if shorter); "
        f"{_label(BASELINE)}'s sleep lasts {strategy_table.BY_KEY[BASELINE].sleep:g} s, and "
        f"its own `--shutdown-timeout` exit follows.",
    )


def rollout_half(run: Run, key: str) -> Claim | None:
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


def rollout_oracle(run: Run, key: str) -> Claim | None:
    """Against the physical floor: the oracle's SIGTERM the moment each replica's last
    request ended. drainhook reads every I/4 while the work drains, so its first idle
    read comes within I/4 of that end, and the confirming one I/4 later when the server's
    own signals read the zero: at most I/2 past it, plus what the engine's exit adds;
    over the rollout, within ORACLE_RATIO of the oracle's accelerator-seconds."""
    mine, floor = run.rollout(key), run.rollout(ORACLE)
    timeline = run.timeline(key)
    if mine is None or floor is None or timeline is None:
        return None
    _, interval, _ = timeline
    n = len(mine.cells)
    over = (sum(mine.holds()) - sum(floor.holds())) / n
    ratio = sum(mine.holds()) / sum(floor.holds())
    bound = interval / 2 + IDLE_SLACK
    return Claim(
        f"Over the {n}-replica rollout, holds each departing replica at most I/2 + "
        f"{IDLE_SLACK * 1000:.0f} ms longer than the oracle, on average, and the rollout "
        f"within {ORACLE_RATIO:g}x the oracle's accelerator-seconds",
        over <= bound and ratio <= ORACLE_RATIO,
        f"{over:+.2f} s per replica ({sum(mine.holds()):.1f} against "
        f"{sum(floor.holds()):.1f} accelerator-seconds, ratio {ratio:.3f}; I/2 + "
        f"{IDLE_SLACK * 1000:.0f} ms = {bound:g} s).",
        f"With vLLM's `--shutdown-timeout {mine.cells[0].shutdown_timeout:g}` the drained "
        f"engine core first tears itself down: every exit takes "
        f"{_flag_exit(mine.cells[0].shutdown_timeout)} after SIGTERM against the oracle's "
        f"{VLLM_EXIT:g} s."
        if mine.cells[0].shutdown_timeout
        else "drainhook's release came later after the last request's end than its read grid "
        "allows, or its engine took longer to exit than the oracle's.",
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
    # The confirming read I/4 after the first idle one: the server's count and the
    # connections answer in every cell (the hook runs in the Pod's namespace).
    base = run.scale(s + i / 4)
    over_ms = (c.sigterm_at_s - base) * 1000.0
    own = c.hook_elapsed()
    own_ms = "?" if own is None else f"{(own - base) * 1000.0:.0f}"
    ok_abs = c.sigterm_at_s <= base + IDLE_SLACK
    ok_scaled = c.sigterm_at_s <= run.scale(s + i / 4 + IDLE_SLACK)
    return Claim(
        "Holds an idle replica no longer than S + I/4 + 100 ms",
        ok_abs,
        f"SIGTERM came {c.sigterm_at_s:.3f} s after the delete, {over_ms:.0f} ms past (S + I/4) "
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
        others = [o for o in run.cells if o.scenario == c.scenario and o.strategy not in NOT_RIVALS]
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


def released_after_work(run: Run, key: str) -> Claim | None:
    """Issue "find the engine's work": once the last request has ended, SIGTERM within
    S + I + 1 s, on SGLang (whose gauges lag 30 s) as on vLLM."""
    timeline = run.timeline(key)
    if timeline is None:
        return None
    s, i, _ = timeline
    found: list[str] = []
    ok = True
    for scenario in RELEASE_SCENARIOS:
        c = run.cell(key, scenario)
        ends = [r.end for r in c.requests if r.outcome == "completed"] if c else []
        if c is None or not ends:
            continue
        past = c.sigterm_at_s - max(ends)
        holds = past <= run.scale(s + i + AFTER_WORK)
        ok = ok and holds
        found.append(
            f"`{scenario}`: last request ended at {run.real(max(ends)):.2f} s, SIGTERM at "
            f"{run.real(c.sigterm_at_s):.2f} s ({run.real(past):.2f} s later)"
        )
    if not found:
        return None
    return Claim(
        f"Releases a replica within S + I + {AFTER_WORK:g} s of its last request's end, on "
        "vLLM and on SGLang with lagging gauges alike",
        ok,
        "; ".join(found) + f" (S + I + {AFTER_WORK:g} = {s + i + AFTER_WORK:g} s).",
        "" if ok else "The engine's count reached 0 later than its last request ended.",
    )


CLAIMS: tuple[Rule, ...] = (
    _lost_before_deadline,
    idle_half,
    rollout_half,
    rollout_oracle,
    _zero_cut_before_deadline,
    _idle_exit,
    released_after_work,
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
    "`--shutdown-timeout 45` drains them itself, then tears its engine core down: it exits "
    "{drained_exit} s after its last request ends. {me} sends SIGTERM only once two "
    "reads 1 s apart found the engine idle, and vLLM then takes {my_exit} to exit. Where "
    "they win, it is on what their drain answers: new requests get HTTP 500 meanwhile "
    "(`router-lag-20`), and with several API servers the streams are cut instead "
    "(`dp-api-servers`)."
)
_HANG = (
    "/metrics never answers: {me} cannot tell idle from busy and holds until D = {d:g} s. "
    "kserve's and llm-d's sleep reads nothing (their vLLM then drains and exits "
    "{drained_exit} s after SIGTERM); the loops hold until their G (30 s) or G - 5."
)
_HUNG_HELD = (
    "The wedged engine's streams never end, and vLLM waits for their connections until the "
    "kill at G whenever SIGTERM comes (with `--shutdown-timeout` too: the engine core goes "
    "at N, the stalled streams still hold the process): every recipe holds the Pod until "
    "its own G, {their_g:g} s here against {me}'s {my_g:g}, so the difference is G, not "
    "the hook."
)
# Scenarios where every recipe is held to its G whatever its hook does: a recipe's
# own --shutdown-timeout is no part of the difference there.
HELD_TO_G = frozenset({"hung"})
_OWN_FLAG = (
    "{me}'s own vLLM `--shutdown-timeout {st:g}` keeps the drained engine while its core "
    "tears itself down (exit {flag_exit} after SIGTERM against {exit:g} s without it): "
    "that much of the difference."
)
_HUNG = (
    "The engine is wedged: no request in flight can end, whatever the recipe. No hook's "
    "SIGTERM at the delete closes the listener at once, so the router's last {lag:g} s of "
    "requests are refused instead of accepted by the wedged engine and cut at the kill: "
    "cut + refused {theirs} against {me}'s {lost}, and neither completes one."
)
WHY: dict[tuple[str, str], str] = {
    ("idle", "*"): "drainhook holds an idle engine for S + I/4: the settle, then a second, "
    "confirming read. No hook and the two loops have no settle (the curl loop ends on its "
    "first idle read, at once; the poll script on its second, 1 s later), and sleep 5 has no "
    "confirming read. Here nothing reaches the engine after the delete, so the settle "
    "protects nothing; in `short`, the router's last {lag:g} s of traffic is what it protects "
    "(no hook refuses it).",
    ("short", "*"): "The work is over by about 4 s. drainhook reads at S and confirms at "
    "S + I/4; sleep 5 returns at S, the curl loop on its single idle read at 5 s, the poll "
    "script on its second idle read (its 1 s grid runs from its own start). The difference "
    "is drainhook's confirming read: about I/4.",
    ("*", "poll-script"): _PHASE,
    ("*", "kserve"): _VLLM_DRAIN,
    ("*", "llm-d"): _VLLM_DRAIN,
    ("hang", "*"): _HANG,
    ("hung", "none"): _HUNG,
    ("outlive", "*"): "Streams run past D. The curl loop has no deadline: it holds until G, "
    "so the streams that end between D and G complete. kserve and llm-d have a G of 60 and "
    "75 s against drainhook's 30, and vLLM's own drain after their sleep: streams of up to "
    "40 s end inside it. drainhook keeps R = G - D for the engine's exit; "
    "with a G of 30 s it cannot wait for a 40 s stream: drainhook+plan (G 60) is the recipe to "
    "compare with those.",
    ("moved", "*"): "drainhook's configured port refuses while the engine listens on another "
    "port of its own container: a wrong target, which holds to D like the blind sleep "
    "(CONTRACT §2) and says `misconfigured`, naming the port that listens and who holds it; "
    "it reads no other port, so the streams finish by themselves.",
    ("sglang-lag", "*"): "SGLang drains by itself after SIGTERM, with no bound, and keeps "
    "serving meanwhile, so an early SIGTERM cuts nothing here, and the engine's exit waits "
    "for SGLang's next look at its SIGTERM flag (every {notice:g} s) whoever sends it. "
    "drainhook counts SGLang's live /v1/loads (`--source auto`, its default) rather than the "
    "lagging gauges, which would read busy until D. The poll script returns at about 1 s "
    "because it finds no vLLM gauge and takes that as idle: right here, for the wrong reason.",
    ("sglang-pd", "*"): "The decode server needs about {pd:g} s after SIGTERM to exit. "
    "drainhook with its defaults (R = 5) sends SIGTERM once the work is done, here at "
    "{term:.1f} s; the teardown fits only if SIGTERM comes by G - {pd:g} = {slot:g} s, else "
    "SIGKILL cuts it short (no request was running by then). An earlier SIGTERM lets "
    "SGLang's own unbounded drain finish the work and the teardown complete; the poll script "
    "sees no vLLM gauge and returns at once. `drainhook plan --role decode` says as much: "
    "R >= 20, G about 45.",
}
# The same, for drainhook+plan (G 60, D 55, vLLM --shutdown-timeout from the plan).
WHY_ST: dict[tuple[str, str], str] = {
    ("idle", "*"): "drainhook+plan holds an idle engine for S + I/4, as drainhook does; "
    "no hook and the loops have no settle and return on their first or second idle read, "
    "and sleep 5 has no confirming read.",
    ("short", "*"): "As for drainhook: its confirming read, about I/4, after work that is "
    "over by about 4 s.",
    ("*", "poll-script"): _PHASE,
    ("*", "kserve"): _VLLM_DRAIN,
    ("*", "llm-d"): _VLLM_DRAIN,
    ("hang", "*"): _HANG,
    ("hung", "none"): _HUNG,
    ("hung", "*"): _HUNG_HELD,
    ("moved", "*"): "As for drainhook: a wrong port holds to D.",
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
                if other is None or st.key in NOT_RIVALS:  # not the same hook, not the floor
                    continue
                columns = _wins(run, mine, other)
                lost = other.cut + other.refused - mine.cut - mine.refused
                g = f", G {other.grace:g}" if other.grace != mine.grace else ""
                only_held = all(w.startswith(("held", "engine exit")) for w in columns)
                if lost > 0 and columns and only_held:
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
                    theirs = run.cell(winner, sc.key)
                    assert theirs is not None
                    text = _reason(table, sc.key, winner).format(
                        me=_label(key),
                        exit=VLLM_EXIT,
                        my_exit=_flag_exit(mine.shutdown_timeout),
                        drained_exit=span(*(end + VLLM_EXIT for end in VLLM_TEARDOWN)),
                        lag=mine.router_lag,
                        notice=SGLANG_NOTICE,
                        pd=SGLANG_PD_EXIT,
                        slot=GRACE - SGLANG_PD_EXIT,
                        term=run.real(mine.sigterm_at_s),
                        st=run.plan.shutdown_timeout if run.plan else 0,
                        lag20=lag20,
                        d=timeline[2],
                        lost=mine.cut + mine.refused,
                        theirs=theirs.cut + theirs.refused,
                        their_g=theirs.grace,
                        my_g=mine.grace,
                    )
                    if text and text not in reasons:
                        reasons.append(text)
                flag = mine.shutdown_timeout
                held = any("held" in w for w in wins) and sc.key not in HELD_TO_G
                if flag and held:  # the recipe's own vLLM flag: the core's teardown
                    own = _OWN_FLAG.format(
                        me=_label(key), st=flag, exit=VLLM_EXIT, flag_exit=_flag_exit(flag)
                    )
                    if own not in reasons:
                        reasons.insert(0, own)
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
