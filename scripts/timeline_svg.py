"""docs/timeline.svg: the timeline of `drainhook plan --output json`, drawn.

    scripts/timeline-svg                       rewrite docs/timeline.svg (the default plan)
    scripts/timeline-svg --check               exit 1 when the committed file is stale
    scripts/timeline-svg -- --grace 45 ...     draw another plan, to stdout

Standard library only. The drawing is a pure function of the plan's JSON
(`render`), so tests/test_docs.py checks that the committed picture is current.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "docs" / "timeline.svg"

WIDTH = 900
LEFT, RIGHT = 50, 850  # the axis: t = 0 .. the kill
BAR_HEIGHT = 34
LINE = 15  # px between the lines of a label
CHAR = 7.5  # px per character at 13 px, to keep labels apart
INK, GREY = "#1f2933", "#52606d"
COLORS = {"settle": "#9aa5b1", "reads": "#4c78a8", "exit": "#f58518", "kill": "#c0392b"}
FONT = 'font-family="Helvetica, Arial, sans-serif"'


def plan_json(args: list[str]) -> dict[str, Any]:
    """The plan as `drainhook plan --output json` prints it."""
    out = subprocess.run(
        [sys.executable, "-m", "drainhook", "plan", *args, "--output", "json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    data: dict[str, Any] = json.loads(out)
    return data


def _s(value: float) -> str:
    return f"{value:g} s"


@dataclass
class Callout:
    """A labelled instant: a dashed line from the bar to its text."""

    when: float
    lines: list[str]
    color: str
    above: bool  # above the bar, text to the right; below, text to the left
    level: int = 0  # 0 is farthest from the bar


def _stack(callouts: list[Callout], x: Any) -> int:
    """Give each callout a level so that no two texts overlap and no dashed line
    crosses a text; the number of levels used."""
    placed: list[tuple[float, float, Callout]] = []
    # Taken in the order their texts grow (left to right above, right to left below),
    # a later callout goes nearer the bar than any placed one it overlaps.
    order = sorted(callouts, key=lambda c: c.when if c.above else -c.when)
    for c in order:
        width = CHAR * max(len(s) for s in c.lines)
        lo, hi = (x(c.when), x(c.when) + width) if c.above else (x(c.when) - width, x(c.when))
        clash = [p.level for a, b, p in placed if p.above == c.above and a < hi + 8 and lo < b + 8]
        c.level = max(clash) + 1 if clash else 0
        placed.append((lo, hi, c))
    return max((c.level for c in callouts), default=0) + 1


def render(plan: dict[str, Any]) -> str:
    """The SVG for one plan's JSON (the keys `drainhook plan --output json` documents)."""
    t = plan["instants"]
    settle, deadline, kill = t["settle_end"], t["deadline"], t["kill"]
    first, idle = t["first_read"], t["idle_return"]
    interval, grace, reserve = plan["interval"], plan["grace"], plan["exit_reserve"]

    def x(when: float) -> float:
        return float(round(LEFT + (RIGHT - LEFT) * when / kill, 1))

    callouts = [Callout(0, ["t = 0", "hook starts"], INK, above=True)]
    if first is not None:
        callouts.append(
            Callout(settle, [f"S = {_s(settle)}", "settle ends, first read"], INK, above=True)
        )
    if plan["idle_outcome"] == "drained":
        confirm = plan["confirm"]
        which = "idle read" if confirm == 1 else f"{confirm} idle reads in a row"
        callouts.append(
            Callout(idle, [f"{_s(idle)}: an idle engine's hook returns", f"({which})"], INK, True)
        )
    rule = "min(G - R, max-wait)" if plan["max_wait"] is not None else "G - R"
    callouts.append(
        Callout(
            deadline,
            [f"D = {rule} = {_s(deadline)}", "the hook returns by now;", "SIGTERM at the latest"],
            COLORS["exit"],
            above=False,
        )
    )
    killer = "G" if kill == grace else "D + 2 s"
    callouts.append(
        Callout(kill, [f"{killer} = {_s(kill)}", "the kubelet kills"], COLORS["kill"], False)
    )
    above = _stack([c for c in callouts if c.above], x)
    below = _stack([c for c in callouts if not c.above], x)
    bar_top = 50 + above * (2 * LINE + 8) + 6
    axis_y = bar_top + BAR_HEIGHT + 8
    below_top = axis_y + 58
    height = below_top + (below - 1) * (3 * LINE + 8) + 3 * LINE + 4

    parts: list[str] = []
    add = parts.append
    add(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" aria-labelledby="title desc">'
    )
    add(f'<title id="title">drainhook wait: the preStop timeline for G = {_s(grace)}</title>')
    reads = f"every {_s(interval)} from {_s(first)}" if first is not None else "never"
    add(
        '<desc id="desc">'
        + escape(
            f"Settle until {_s(settle)}; read /metrics {reads}; an idle engine's hook "
            f"returns at {_s(idle)} ({plan['idle_outcome']}); deadline D = {_s(deadline)}, "
            f"when SIGTERM lands at the latest; the kubelet kills at {_s(kill)}."
        )
        + "</desc>"
    )
    add(f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>')
    add(
        f'<text x="{LEFT}" y="28" {FONT} font-size="16" font-weight="bold" fill="{INK}">'
        f"drainhook wait, from the hook's start to the kill: G = {_s(grace)}, "
        f"S = {_s(plan['settle'])}, R = {_s(reserve)}, I = {_s(interval)}</text>"
    )

    for name, start, end, label in (
        ("settle", 0, settle, "settle"),
        ("reads", settle, deadline, f"read /metrics every {_s(interval)}"),
        ("exit", deadline, kill, "engine exits"),
    ):
        if end <= start:
            continue
        add(
            f'<rect x="{x(start)}" y="{bar_top}" width="{round(x(end) - x(start), 1)}" '
            f'height="{BAR_HEIGHT}" fill="{COLORS[name]}"/>'
        )
        if x(end) - x(start) > CHAR * len(label) + 10:
            add(
                f'<text x="{round((x(start) + x(end)) / 2, 1)}" y="{bar_top + 22}" {FONT} '
                f'font-size="13" fill="#ffffff" text-anchor="middle">{escape(label)}</text>'
            )
    # a tick per read slot, while they are few enough to tell apart
    if first is not None and 0 < plan["reads_max"] <= 120:
        for n in range(plan["reads_max"]):
            tx = x(first + n * interval)
            add(
                f'<line x1="{tx}" y1="{bar_top}" x2="{tx}" y2="{bar_top + 6}" '
                'stroke="#ffffff" stroke-width="1"/>'
            )

    add(f'<line x1="{LEFT}" y1="{axis_y}" x2="{RIGHT}" y2="{axis_y}" stroke="{INK}"/>')
    step = 5.0 if kill <= 60 else float(max(5, round(kill / 10 / 5) * 5))
    n = 0
    while n * step <= kill + 1e-9:
        tx = x(n * step)
        add(f'<line x1="{tx}" y1="{axis_y}" x2="{tx}" y2="{axis_y + 5}" stroke="{INK}"/>')
        add(
            f'<text x="{tx}" y="{axis_y + 18}" {FONT} font-size="11" fill="{GREY}" '
            f'text-anchor="middle">{n * step:g}</text>'
        )
        n += 1
    add(
        f'<text x="{LEFT}" y="{axis_y + 33}" {FONT} font-size="11" fill="{GREY}">'
        "seconds since the hook started (t = 0: the kubelet starts counting G)</text>"
    )

    for c in callouts:
        tx = x(c.when)
        if c.above:
            levels, level = above, c.level
            first_y = bar_top - 12 - (levels - 1 - level) * (2 * LINE + 8) - LINE
            first_y -= (len(c.lines) - 2) * LINE
            y1, y2 = first_y - 12, bar_top
            text_x, anchor = tx + 4, "start"
        else:
            levels, level = below, c.level
            first_y = below_top + (levels - 1 - level) * (3 * LINE + 8)
            y1, y2 = bar_top + BAR_HEIGHT, first_y + (len(c.lines) - 1) * LINE + 3
            text_x, anchor = tx - 4, "end"
        add(
            f'<line x1="{tx}" y1="{y1}" x2="{tx}" y2="{y2}" stroke="{c.color}" '
            'stroke-width="1.5" stroke-dasharray="3 2"/>'
        )
        for i, text in enumerate(c.lines):
            weight = ' font-weight="bold"' if i == 0 else ""
            add(
                f'<text x="{round(text_x, 1)}" y="{first_y + LINE * i}" {FONT} font-size="13"'
                f'{weight} fill="{INK}" text-anchor="{anchor}">{escape(text)}</text>'
            )
    add("</svg>")
    return "\n".join(parts) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    plan_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    svg = render(plan_json(plan_args))
    if plan_args:
        sys.stdout.write(svg)
        return 0
    if check:
        current = OUTPUT.read_text() if OUTPUT.exists() else ""
        if current != svg:
            print(f"{OUTPUT.relative_to(ROOT)} is stale: run scripts/timeline-svg", file=sys.stderr)
            return 1
        print(f"{OUTPUT.relative_to(ROOT)} is current")
        return 0
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(svg)
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
