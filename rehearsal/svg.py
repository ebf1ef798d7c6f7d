"""The pictures, drawn as plain SVG: one scenario's timeline, a lane per recipe (`render`),
and the rollouts on one time axis (`render_rollout`).

Each lane shows the scenario's requests (a bar from sent to end: green when
completed, red when cut; a grey cross when refused), the /metrics reads the
engine answered (a tick: dark when busy, light when idle, hollow when never
answered), SIGTERM (orange), and the engine's exit (black; red when SIGKILL).
Times are real seconds (measured / scale). Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from xml.sax.saxutils import escape

from rehearsal.record import Cell, Request
from rehearsal.rollout import Rollout
from rehearsal.scenarios import Scenario
from rehearsal.strategies import BY_KEY as STRATEGIES
from rehearsal.timeline import DEADLINE, GRACE, ROUTER_LAG, SETTLE, WARMUP, Scale

WIDTH = 960
LEFT, RIGHT = 150, 930
TOP = 84
LANE = 74
FONT = 'font-family="Helvetica, Arial, sans-serif"'
INK, GREY = "#1f2933", "#7b8794"
COLORS = {
    "completed": "#2f9e44",
    "cut": "#e03131",
    "refused": "#868e96",
    "busy": "#1c4e80",
    "idle": "#74c0fc",
    "sigterm": "#f08c00",
    "exit": "#1f2933",
    "sigkill": "#c92a2a",
}


def _rows(requests: Sequence[Request], scale: Scale) -> list[tuple[Request, int]]:
    """Pack the request bars into as few rows as keep them apart."""
    ends: list[float] = []
    out = []
    for r in sorted(requests, key=lambda r: r.sent):
        for i, end in enumerate(ends):
            if end < r.sent - scale(0.1):
                ends[i] = r.end
                out.append((r, i))
                break
        else:
            ends.append(r.end)
            out.append((r, len(ends) - 1))
    return out


def render(scenario: Scenario, cells: Sequence[Cell], scale: Scale) -> str:
    """The SVG text for the cells of one scenario, in the given (strategy) order."""
    start = -WARMUP if scenario.load else -1.0
    end = max([GRACE + 3.0, *(scale.real(c.held_s) + 1.0 for c in cells)])

    def x(real: float) -> float:
        return LEFT + (real - start) / (end - start) * (RIGHT - LEFT)

    def xs(measured: float) -> float:
        return x(scale.real(measured))

    height = TOP + LANE * len(cells) + 100
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" {FONT} font-size="12">',
        f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>',
        f'<text x="{LEFT}" y="22" font-size="15" font-weight="bold" fill="{INK}">'
        f"{escape(scenario.title)}: requests, reads and signals, strategy by strategy</text>",
        f'<text x="{LEFT}" y="40" fill="{GREY}">{escape(scenario.what)} Run at --scale '
        f"{scale.factor:g}; times shown in real seconds.</text>",
    ]
    bottom = TOP + LANE * len(cells)
    lag = cells[0].router_lag if cells else ROUTER_LAG
    marks = [(0.0, "delete"), (lag, "router stops"), (SETTLE, "S"), (DEADLINE, "D")]
    marks.append((GRACE, "G"))
    last_x, raised = -1000.0, False
    for when, label in marks:
        # Labels of marks close together alternate between two heights.
        raised = not raised and x(when) - last_x < 70
        last_x = x(when)
        y = TOP - (24 if raised else 10)
        out.append(
            f'<line x1="{x(when):.1f}" y1="{y + 3}" x2="{x(when):.1f}" y2="{bottom}" '
            f'stroke="{GREY}" stroke-dasharray="3,3"/>'
        )
        out.append(
            f'<text x="{x(when):.1f}" y="{y}" text-anchor="middle" fill="{GREY}">'
            f"{escape(label)}</text>"
        )
    for lane, cell in enumerate(cells):
        top = TOP + lane * LANE
        out += _lane(cell, top, xs, scale)
    out += _axis(start, end, bottom, x)
    out += _legend(bottom + 48)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _lane(cell: Cell, top: float, xs: Callable[[float], float], scale: Scale) -> list[str]:
    label = STRATEGIES[cell.strategy].label
    out = [
        f'<line x1="{LEFT}" y1="{top:.1f}" x2="{RIGHT}" y2="{top:.1f}" stroke="#e4e7eb"/>',
        f'<text x="{LEFT - 10}" y="{top + 26:.1f}" text-anchor="end" font-weight="bold" '
        f'fill="{INK}">{escape(label)}</text>',
        f'<text x="{LEFT - 10}" y="{top + 42:.1f}" text-anchor="end" fill="{GREY}">'
        f"cut {cell.cut}, refused {cell.refused}</text>",
    ]
    for read in cell.read_log:
        x0 = xs(read.start)
        if read.end is None:
            out.append(
                f'<circle cx="{x0:.1f}" cy="{top + 8:.1f}" r="2.5" fill="none" '
                f'stroke="{COLORS["busy"]}"/>'
            )
        else:
            color = COLORS["idle"] if read.total == 0 else COLORS["busy"]
            out.append(
                f'<line x1="{x0:.1f}" y1="{top + 4:.1f}" x2="{x0:.1f}" y2="{top + 13:.1f}" '
                f'stroke="{color}" stroke-width="1.5"/>'
            )
    rows = _rows(cell.requests, scale)
    count = 1 + max((row for _, row in rows), default=0)
    pitch = min(6.0, (LANE - 26) / count)
    for r, row in rows:
        y = top + 20 + row * pitch
        if r.outcome == "refused":
            cx = xs(r.sent)
            out.append(
                f'<path d="M{cx - 3:.1f},{y - 3:.1f} l6,6 M{cx - 3:.1f},{y + 3:.1f} l6,-6" '
                f'stroke="{COLORS["refused"]}" stroke-width="1.3"/>'
            )
            continue
        x0, x1 = xs(r.sent), max(xs(r.end), xs(r.sent) + 1)
        out.append(
            f'<line x1="{x0:.1f}" y1="{y:.1f}" x2="{x1:.1f}" y2="{y:.1f}" '
            f'stroke="{COLORS[r.outcome]}" stroke-width="{max(1.0, pitch - 1.5):.1f}"/>'
        )
    bottom = top + LANE - 4
    term = xs(cell.sigterm_at_s)
    out.append(
        f'<line x1="{term:.1f}" y1="{top + 2:.1f}" x2="{term:.1f}" y2="{bottom:.1f}" '
        f'stroke="{COLORS["sigterm"]}" stroke-width="2"/>'
    )
    exit_color = COLORS["sigkill"] if cell.sigkill else COLORS["exit"]
    ex = xs(cell.held_s)
    out.append(
        f'<line x1="{ex:.1f}" y1="{top + 2:.1f}" x2="{ex:.1f}" y2="{bottom:.1f}" '
        f'stroke="{exit_color}" stroke-width="2"/>'
    )
    word = "SIGKILL" if cell.sigkill else "exit"
    out.append(
        f'<text x="{ex + 3:.1f}" y="{bottom - 2:.1f}" fill="{exit_color}" font-size="10">'
        f"{word} {scale.real(cell.held_s):.1f}</text>"
    )
    return out


def _axis(start: float, end: float, y: float, x: Callable[[float], float]) -> list[str]:
    out = [f'<line x1="{LEFT}" y1="{y:.1f}" x2="{RIGHT}" y2="{y:.1f}" stroke="{INK}"/>']
    t = 5 * int(start // 5)
    while t <= end:
        if t >= start:
            out.append(
                f'<line x1="{x(t):.1f}" y1="{y:.1f}" x2="{x(t):.1f}" y2="{y + 5:.1f}" '
                f'stroke="{INK}"/>'
            )
            out.append(
                f'<text x="{x(t):.1f}" y="{y + 18:.1f}" text-anchor="middle" fill="{INK}">'
                f"{t:g} s</text>"
            )
        t += 5
    return out


def _legend(y: float) -> list[str]:
    items = [
        ("bar", COLORS["completed"], "request completed"),
        ("bar", COLORS["cut"], "request cut"),
        ("cross", COLORS["refused"], "refused"),
        ("tick", COLORS["busy"], "read: busy"),
        ("tick", COLORS["idle"], "read: idle"),
        ("ring", COLORS["busy"], "read never answered"),
        ("vline", COLORS["sigterm"], "SIGTERM"),
        ("vline", COLORS["exit"], "engine exit"),
        ("vline", COLORS["sigkill"], "SIGKILL"),
    ]
    out = []
    px = float(LEFT)
    for shape, color, text in items:
        if px + 24 + 6.6 * len(text) > RIGHT:
            px, y = float(LEFT), y + 20
        if shape == "bar":
            out.append(
                f'<line x1="{px:.1f}" y1="{y - 4:.1f}" x2="{px + 16:.1f}" y2="{y - 4:.1f}" '
                f'stroke="{color}" stroke-width="4"/>'
            )
        elif shape == "cross":
            out.append(
                f'<path d="M{px + 5:.1f},{y - 7:.1f} l6,6 M{px + 5:.1f},{y - 1:.1f} l6,-6" '
                f'stroke="{color}" stroke-width="1.3"/>'
            )
        elif shape == "tick":
            out.append(
                f'<line x1="{px + 8:.1f}" y1="{y - 9:.1f}" x2="{px + 8:.1f}" y2="{y:.1f}" '
                f'stroke="{color}" stroke-width="1.5"/>'
            )
        elif shape == "ring":
            out.append(
                f'<circle cx="{px + 8:.1f}" cy="{y - 4:.1f}" r="2.5" fill="none" stroke="{color}"/>'
            )
        else:
            out.append(
                f'<line x1="{px + 8:.1f}" y1="{y - 11:.1f}" x2="{px + 8:.1f}" y2="{y + 2:.1f}" '
                f'stroke="{color}" stroke-width="2"/>'
            )
        out.append(f'<text x="{px + 20:.1f}" y="{y:.1f}" fill="{INK}">{escape(text)}</text>')
        px += 24 + 6.6 * len(text)
    return out


ROLLOUT_COLORS = {"clean": "#1c4e80", "cut": "#e03131", "refused": "#f08c00", "start": "#dee2e6"}


def render_rollout(rollouts: Sequence[Rollout], start: float) -> str:
    """The rollouts on one time axis (real seconds): a lane per recipe, each replica's hold
    (delete to exit: blue, red when it cut, orange when it only refused) followed by its
    replacement's start (grey)."""
    if not rollouts:
        raise ValueError("no rollout to draw")
    end = max(r.steps()[-1].ready for r in rollouts) * 1.02
    lane = 46

    def x(t: float) -> float:
        return LEFT + t / end * (RIGHT - LEFT)

    height = TOP + lane * len(rollouts) + 90
    n = len(rollouts[0].cells)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" {FONT} font-size="12">',
        f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>',
        f'<text x="{LEFT}" y="22" font-size="15" font-weight="bold" fill="{INK}">'
        f"Rolling update of {n} replicas, one at a time: each replica's hold, recipe by recipe"
        "</text>",
        f'<text x="{LEFT}" y="40" fill="{GREY}">A replacement starts when its predecessor has '
        f"exited and serves {start:g} s later; then the next replica is deleted. Run at "
        f"--scale {rollouts[0].scale:g}; real seconds.</text>",
    ]
    for i, r in enumerate(rollouts):
        top = TOP + i * lane
        _, cut, refused = r.counts()
        label = STRATEGIES[r.strategy].label
        out += [
            f'<line x1="{LEFT}" y1="{top:.1f}" x2="{RIGHT}" y2="{top:.1f}" stroke="#e4e7eb"/>',
            f'<text x="{LEFT - 10}" y="{top + 18:.1f}" text-anchor="end" font-weight="bold" '
            f'fill="{INK}">{escape(label)}</text>',
            f'<text x="{LEFT - 10}" y="{top + 33:.1f}" text-anchor="end" fill="{GREY}" '
            f'font-size="10">held {sum(r.holds()):.0f} s, cut {cut}, refused {refused}</text>',
        ]
        for step, cell in zip(r.steps(), r.cells, strict=True):
            color = "clean" if cell.cut + cell.refused == 0 else "cut" if cell.cut else "refused"
            out.append(
                f'<rect x="{x(step.exit):.1f}" y="{top + 12:.1f}" '
                f'width="{max(0.5, x(step.ready) - x(step.exit)):.1f}" height="16" '
                f'fill="{ROLLOUT_COLORS["start"]}"/>'
            )
            out.append(
                f'<rect x="{x(step.delete):.1f}" y="{top + 8:.1f}" '
                f'width="{max(1.0, x(step.exit) - x(step.delete)):.1f}" height="24" '
                f'fill="{ROLLOUT_COLORS[color]}"/>'
            )
        last = r.steps()[-1].ready
        out.append(
            f'<text x="{x(last) + 4:.1f}" y="{top + 25:.1f}" fill="{INK}" font-size="10">'
            f"{last:.0f} s</text>"
        )
    bottom = TOP + lane * len(rollouts)
    out += _axis_every(end, bottom, x)
    items = [
        ("clean", "hold, nothing lost"),
        ("cut", "hold that cut requests"),
        ("refused", "hold that refused requests"),
        ("start", f"replacement starting ({start:g} s)"),
    ]
    px, y = float(LEFT), bottom + 50
    for key, text in items:
        out.append(
            f'<rect x="{px:.1f}" y="{y - 10:.1f}" width="14" height="12" '
            f'fill="{ROLLOUT_COLORS[key]}"/>'
        )
        out.append(f'<text x="{px + 20:.1f}" y="{y:.1f}" fill="{INK}">{escape(text)}</text>')
        px += 30 + 6.6 * len(text)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _axis_every(end: float, y: float, x: Callable[[float], float]) -> list[str]:
    """An axis from 0 to end with a tick every 60 s."""
    out = [f'<line x1="{LEFT}" y1="{y:.1f}" x2="{RIGHT}" y2="{y:.1f}" stroke="{INK}"/>']
    t = 0
    while t <= end:
        out.append(
            f'<line x1="{x(t):.1f}" y1="{y:.1f}" x2="{x(t):.1f}" y2="{y + 5:.1f}" stroke="{INK}"/>'
        )
        out.append(
            f'<text x="{x(t):.1f}" y="{y + 18:.1f}" text-anchor="middle" fill="{INK}">'
            f"{t:g} s</text>"
        )
        t += 60
    return out
