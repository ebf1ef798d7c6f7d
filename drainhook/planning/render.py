"""The outputs of `plan` (CONTRACT §4): text, its stable JSON (schema 1) and the
Pod-spec fragment (`--output yaml`, written by hand: no YAML library), each with the
evidence of `plan --observe` where the plan holds it."""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Sequence

from drainhook.errors import UsageError
from drainhook.hook.config import TIMELINE
from drainhook.hook.timeline import GRACE_MIN, KUBELET_MIN_STOP, PlanWarning
from drainhook.numfmt import json_number, number, seconds
from drainhook.planning.histogram import (
    INF,
    Histogram,
    Recommendation,
    bound_text,
    count_text,
    finite,
    formula,
    pct,
    quantile_label,
)
from drainhook.planning.plan import (
    SCHEMA,
    Applied,
    Output,
    Plan,
    apply_advice,
    engine_args,
    engine_flags,
)

BAR = 40


def render(plan: Plan, output: Output) -> str:
    """The plan as `text`, `json` or `yaml`, ending with a newline; each with the
    evidence of `plan --observe` where the plan holds it."""
    if output == "json":
        return json.dumps(to_json(plan), indent=2) + "\n"
    return to_yaml(plan) if output == "yaml" else to_text(plan)


def to_json(plan: Plan) -> dict[str, object]:
    """The stable JSON form (schema 1): inputs, every instant, the command, warnings,
    the advice applied; with evidence, `observed` and `recommended_grace` too."""
    c = plan.config
    rec = plan.recommendation
    evidence = {}
    if rec is not None:
        evidence = {"observed": observed_json(rec), "recommended_grace": rec.grace}
    return {
        "schema": SCHEMA,
        "engine": c.reach.engine,  # as given (the rules may know it otherwise: plan.engine)
        "role": plan.role,
        "grace_from": "default" if c.grace_default else None,  # as `wait`'s start line
        **{
            f.name: json_number(f.unset if f.of(c) is None else f.of(c))
            for f in TIMELINE
            if f.kind != "engine"
        },
        "instants": {
            "hook_start": 0,
            "settle_end": json_number(plan.at.settle_end),
            "first_read": json_number(plan.at.first_read),
            "idle_return": json_number(plan.at.idle_return),
            "stall_earliest": json_number(plan.at.stall_earliest),
            "deadline": json_number(plan.at.deadline),
            "sigterm_latest": json_number(plan.at.sigterm_latest),
            "kill": json_number(plan.at.kill),
        },
        "idle_outcome": "drained" if plan.at.idle_drains else "deadline",
        "reads_max": plan.at.reads_max,
        "exit_window": json_number(plan.at.kill - plan.at.sigterm_latest),
        "termination_grace_period_seconds": int(c.grace) if c.grace == int(c.grace) else None,
        "command": list(plan.command),
        "warnings": warnings_json(plan.warnings),
        "applied": applied_json(apply_advice(plan)),
        **evidence,
    }


def warnings_json(warnings: Sequence[PlanWarning]) -> list[dict[str, str]]:
    return [{"code": w.code, "message": w.message, "reason": w.reason} for w in warnings]


def applied_json(applied: Applied) -> dict[str, object]:
    """What `--output yaml` carries: the values with the advice applied, each change
    and why, the command, and the warnings that still stand."""
    c = applied.plan.config
    return {
        "grace": json_number(c.grace),
        "exit_reserve": json_number(c.exit_reserve),
        "command": list(applied.plan.command),
        # The engine's own flags the advice names (engine_flags), for tooling.
        "engine_args": engine_args(applied.plan),
        "changes": [
            {
                "field": ch.field,
                "name": ch.label,
                "from": json_number(ch.given),
                "to": json_number(ch.applied),
                "because": list(ch.because),
            }
            for ch in applied.changes
        ],
        "warnings": warnings_json(applied.plan.warnings),
    }


def to_text(plan: Plan) -> str:
    """The plan as a person reads it: its timeline, or with --observe the evidence
    and the recommendation; then the preStop, the advice applied and the warnings."""
    rec = plan.recommendation
    lines = timeline_text(plan) if rec is None else evidence_text(plan, rec)
    done = apply_advice(plan)
    if rec is None or not done.changes:
        lines += ["", "preStop: " + " ".join(plan.command)]
    lines += applied_text(done)
    lines += flags_text(done.plan)
    lines += warnings_text(plan.warnings)
    return "\n".join(lines) + "\n"


def flags_text(plan: Plan) -> list[str]:
    """The engine's own flags the hook reads through (inject adds them where the
    engine's version takes them), each with why."""
    shown = [f for f in engine_flags(plan) if f.reads]
    lines = ["", f"the engine's own flags the hook reads through ({plan.engine}):"] if shown else []
    for flag in shown:
        since = f", {plan.engine} {flag.since} or newer" if flag.since else ""
        lines += textwrap.wrap(
            f"{' '.join(flag.args)}: {flag.why}{since}",
            100,
            initial_indent="  ",
            subsequent_indent="    ",
            break_on_hyphens=False,
        )
    return lines


def timeline_text(plan: Plan) -> list[str]:
    """The timeline as a person reads it: each instant, and what happens there."""
    c, t = plan.config, plan.at
    d = t.deadline
    rows: list[tuple[str, str]] = [
        ("t=0", "hook starts; the kubelet's grace countdown starts too"),
        (f"0..{seconds(t.settle_end)}", "settle: the engine keeps serving untouched"),
    ]
    if t.first_read is not None:
        rows.append(
            (
                f"t={seconds(t.first_read)}",
                f"first read of /metrics, then one every {seconds(c.interval)}, every "
                f"{seconds(c.interval / 4)} while the work drains "
                f"({t.reads_max} before D at the slower step)",
            )
        )
        word = "read" if c.confirm == 1 else f"{c.confirm} idle reads in a row"
        linger = f", then --linger {seconds(c.linger)}" if c.linger else ""
        if t.idle_drains:
            fast = t.settle_end + (c.confirm - 1) * c.interval / 4
            what = (
                f"an idle engine's hook returns ({word}{linger}; from "
                f"t={seconds(fast)} when the server's count or connections read the zero)"
            )
            rows.append((f"t={seconds(t.idle_return)}", what))
    w = c.stall_window
    if t.stall_earliest is not None:
        what = (
            f"earliest `stalled` return (exit 5): work reported, no progress for W = {seconds(w)}"
        )
        rows.append((f"t={seconds(t.stall_earliest)}", what))
    rule = "min(G - R, max-wait)" if c.max_wait is not None else "G - R"
    kill_rule = (
        "G" if t.kill == c.grace else f"D + {seconds(KUBELET_MIN_STOP)}, the kubelet's least"
    )
    rows += [
        (f"t={seconds(d)}", f"deadline D = {rule}: the hook returns by now, busy or not"),
        (f"t={seconds(t.sigterm_latest)}", "SIGTERM at the latest (sent when the hook returns)"),
        (
            f"{seconds(t.sigterm_latest)}..{seconds(t.kill)}",
            f"the engine exits ({seconds(t.kill - t.sigterm_latest)})",
        ),
        (f"t={seconds(t.kill)}", f"the kubelet kills the container ({kill_rule})"),
    ]
    if t.stall_earliest is None and w > 0 and t.first_read is not None:
        late = t.first_read + w
        what = f"stall detection off: first read + W = {seconds(late)}, not before D"
        rows.append((f"W={seconds(w)}", what))
    width = max(len(when) for when, _ in rows)
    lines = [
        f"drainhook plan: G={seconds(c.grace)}{' (default)' if c.grace_default else ''} "
        f"S={seconds(c.settle)} R={seconds(c.exit_reserve)} "
        f"I={seconds(c.interval)} confirm={c.confirm}, engine {plan.engine}, role {plan.role}\n"
    ]
    return lines + [f"  {when.ljust(width)}  {what}" for when, what in rows]


def applied_text(applied: Applied) -> list[str]:
    """The values `--output yaml` changes, each with why, and its preStop; nothing
    when it changes none."""
    if not applied.changes:
        return []
    lines = ["", f"--output yaml applies the advice ({len(applied.changes)} changed):"]
    for ch in applied.changes:
        lines += textwrap.wrap(
            ch.text(), 100, initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False
        )
    return [*lines, "  preStop: " + " ".join(applied.plan.command)]


def warnings_text(warnings: tuple[PlanWarning, ...]) -> list[str]:
    if not warnings:
        return ["", "warnings: none"]
    lines = ["", f"warnings ({len(warnings)}):"]
    for w in warnings:
        lines += textwrap.wrap(
            f"{w.code}: {w.message}", 100, initial_indent="  ", subsequent_indent="    "
        )
        lines += textwrap.wrap(
            f"why: {w.reason}", 100, initial_indent="    ", subsequent_indent="      "
        )
    return lines


def to_yaml(plan: Plan) -> str:
    """A Pod-spec fragment for the plan with its advice applied (the evidence's G
    too): terminationGracePeriodSeconds and the preStop, each change, what the
    evidence says of it and the standing warnings as comments. Every string is
    written as JSON, which YAML reads as a double-quoted scalar."""
    applied = apply_advice(plan)
    chosen = applied.plan
    c = chosen.config
    if c.grace != int(c.grace):
        raise UsageError(
            f"--output yaml needs whole seconds for --grace (not {number(c.grace)}): "
            "terminationGracePeriodSeconds is an integer"
        )
    name = chosen.engine if chosen.engine != "auto" else "engine"
    lines = [
        "# Pod-spec fragment from `drainhook plan`: merge into the Pod template's spec.",
        f"# --grace must equal terminationGracePeriodSeconds. Container name: yours ({name}).",
    ]
    lines += [f"# changed: {ch.text()}" for ch in applied.changes]
    lines += [
        f"# engine flag: {' '.join(f.args)} on the engine's command line ({f.why})"
        for f in engine_flags(chosen)
        if f.reads
    ]
    if plan.recommendation is not None:
        lines += evidence_notes(plan, applied)
    # The share the G given leaves uncovered (observe-cuts) is text's and JSON's.
    shown = [w for w in chosen.warnings if w.code != "observe-cuts"]
    lines += [f"# warning: {w.code}: {w.message}" for w in shown]
    lines += [
        f"terminationGracePeriodSeconds: {int(c.grace)}",
        "containers:",
        f"  - name: {json.dumps(name)}",
        "    lifecycle:",
        "      preStop:",
        "        exec:",
        "          command:",
    ]
    lines += [f"            - {json.dumps(arg)}" for arg in chosen.command]
    return "\n".join(lines) + "\n"


def observed_json(rec: Recommendation) -> dict[str, object]:
    """The `observed` object of `plan --observe --output json`."""
    observed = rec.observed
    return {
        "requests": json_number(observed.requests),
        "quantile": rec.quantile,
        "latency_s": finite(rec.latency),
        "quantiles": {repr(q): finite(v) for q, v in rec.quantiles.items()},
        "longer_than_deadline": rec.longer,
        "source": observed.source,
        "engine": observed.engine,
        "histogram": observed.histogram.name,
        "series": observed.histogram.series,
        "largest_bound_s": finite(observed.histogram.largest_bound),
        "window_s": None if observed.window is None else round(observed.window, 3),
    }


def evidence_text(plan: Plan, rec: Recommendation) -> list[str]:
    """The evidence, a histogram drawn in the terminal with the line where D - S
    falls, and the recommendation."""
    observed = rec.observed
    h = observed.histogram
    c = plan.config
    label = quantile_label(rec.quantile)
    where = f"difference of two reads {observed.window:.1f}s apart" if observed.window else ""
    lines = [
        f"drainhook plan --observe: {count_text(observed.requests)} in {h.name} "
        f"({h.series} series) from {observed.source}" + (f"; {where}" if where else ""),
        "",
    ]
    lines += draw(h, rec)
    shown = "  ".join(f"{quantile_label(q)} <= {bound_text(v)}" for q, v in rec.quantiles.items())
    lines += ["", f"{shown}  (bucket upper bounds)"]
    lines.append("")
    if rec.grace is not None and rec.latency is not None:
        raised = f", raised to the {seconds(GRACE_MIN)} floor" if rec.raw_grace != rec.grace else ""
        lines.append(
            f"recommended: G = {rec.grace}s  (ceil(S {seconds(c.settle)} + {label} "
            f"{seconds(rec.latency)} + R {seconds(c.exit_reserve)}) = {rec.raw_grace}s{raised})"
        )
    else:
        lines.append("recommended: none (see the warnings)")
    if rec.longer is not None:
        lines.append(
            f"with G = {seconds(c.grace)} now: D - S = {seconds(rec.window_s)}; at most "
            f"{pct(rec.longer)} of observed requests ran longer"
        )
    return lines


def draw(h: Histogram, rec: Recommendation) -> list[str]:
    """One row per bucket with requests (and those between), a bar each, and a line
    where D - S falls: below it, requests that end within D - S; above, those a
    drain may cut."""
    rows = h.buckets()
    used = [i for i, (_, _, n) in enumerate(rows) if n > 0]
    if not used:
        return ["  (no requests observed)"]
    cut = rec.window_s
    # The row whose upper bound is the first >= D - S: the line goes after it.
    line_after = next((i for i, (_, hi, _) in enumerate(rows) if hi >= cut), len(rows) - 1)
    first = min(used[0], line_after)
    last = max(used[-1], line_after)
    most = max(n for _, _, n in rows)
    quantile_row = next((i for i, (_, hi, _) in enumerate(rows) if hi == rec.latency), None)
    labels = [f"({number(lo)}, {'+Inf' if hi == INF else number(hi)}]" for lo, hi, _ in rows]
    width = max(len(labels[i]) for i in range(first, last + 1))
    counts = [number(n) for _, _, n in rows]
    cwidth = max(len(counts[i]) for i in range(first, last + 1))
    out = [f"  {'latency (s)'.ljust(width)}  {'requests'.rjust(cwidth)}"]
    for i in range(first, last + 1):
        lo, hi, n = rows[i]
        bar = "#" * (math.ceil(n / most * BAR) if n else 0)
        mark = f"  <- {quantile_label(rec.quantile)}" if i == quantile_row else ""
        out.append(f"  {labels[i].ljust(width)}  {counts[i].rjust(cwidth)} |{bar}{mark}")
        if i == line_after:
            inside = lo < cut < hi
            note = (
                f" (inside the bucket above: its {number(n)} may end either side)" if inside else ""
            )
            out.append(f"  {'-' * (width + cwidth + 3)} D - S = {seconds(cut)}{note}")
    return out


def evidence_notes(plan: Plan, applied: Applied) -> list[str]:
    """What the evidence says of the fragment (for its own S, R and G), as comments."""
    c = applied.plan.config
    mine = applied.plan.recommendation
    assert mine is not None and plan.recommendation is not None
    notes = [f"# observed: {count_text(mine.observed.requests)} in {mine.observed.histogram.name}"]
    if mine.grace is None or mine.latency is None:
        kept = "keeps" if c.grace == plan.at.grace else "has"
        notes.append(f"# no recommended G: the fragment {kept} --grace {number(c.grace)}")
    elif not any(ch.field == "grace" for ch in applied.changes):
        notes.append(f"# {formula(c, mine)}")  # else the change names it
    if plan.recommendation.grace is not None and mine.longer is not None:
        # What the fragment's G leaves uncovered; the share for the G given is text's and JSON's.
        notes.append(
            f"# with G = {number(c.grace)}: D - S = {seconds(mine.window_s)}; at most "
            f"{pct(mine.longer)} of observed requests ran longer"
        )
    return notes
