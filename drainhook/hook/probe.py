"""`probe`'s output (CONTRACT §4): one read shown for people (a key/value block,
every counted series, the progress counters, each target's read) or as the
stable `probe --json` object (schema 1: fields may be added, never renamed)."""

from __future__ import annotations

import dataclasses
import json
import math
import select
import time
from collections.abc import Callable

from drainhook import exits
from drainhook.engines.verdict import Reading, Series, Verdict
from drainhook.hook.log import read_event, text_value, wall_time, warning_event, what_changes
from drainhook.hook.stall import counter_totals
from drainhook.hook.timeline import MIN_INTERVAL
from drainhook.numfmt import json_number, shown
from drainhook.reading.assemble import hook_reader
from drainhook.reading.config import LOADS_PATH, ReadConfig
from drainhook.reading.pid1 import unsignalled

SCHEMA = 1


_ESCAPE = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n"})  # as /metrics writes them


def series_text(s: Series) -> str:
    labels = ",".join(f'{k}="{v.translate(_ESCAPE)}"' for k, v in s.labels)
    return f"{s.name}{{{labels}}}" if labels else s.name


def progress_of(reading: Reading) -> tuple[Series, ...]:
    """Every progress counter a reading carries (each target's, with several)."""
    return tuple(
        c for _, r in reading.per_target() if r.progress is not None for c in r.progress.counters
    )


def external_of(reading: Reading) -> float | None:
    """The work waiting outside the engine over the targets (None: none could say)."""
    found = [r.progress.external for _, r in reading.per_target() if r.progress is not None]
    return sum(found) if found else None


def signals_json(reading: Reading) -> dict[str, object] | None:
    """Each signal's own count (CONTRACT §2a) and why one is missing (None: no count)."""
    signals = reading.signals
    if signals is None or not reading.counted:
        return None
    return {
        "scheduler": json_number(signals.scheduler),
        "server": json_number(signals.server),
        "connections": json_number(signals.connections),
        "missing": dict(signals.missing),
    }


def held_by(reading: Reading) -> list[str]:
    """The signals that read work, on a busy read (what held a hook)."""
    if reading.signals is None or not reading.counted or not reading.in_flight:
        return []
    return list(reading.signals.holding())


def probe_json(reading: Reading, target: str) -> str:
    """The stable `probe --json` object (schema 1): the contract's fields, and `source`,
    `warnings`, `progress`, `waiting_outside`, `signals`, `held_by` and `targets` (with
    several): CONTRACT §4 lists each."""
    counted = reading.counted
    return json.dumps(
        {
            "schema": SCHEMA,
            "target": target,
            "engine": reading.engine,
            "verdict": reading.verdict.value,
            "reason": None if counted else reading.reason,
            "in_flight": json_number(reading.in_flight) if counted else None,
            "series": [
                {"name": s.name, "labels": dict(s.labels), "value": s.value} for s in reading.series
            ],
            "read_ms": round(reading.read_ms, 3),
            "source": reading.source if counted else None,
            "warnings": list(reading.warnings),
            "progress": {
                n: json_number(v) for n, v in counter_totals(progress_of(reading)).items()
            },
            "waiting_outside": json_number(external_of(reading)),
            "signals": signals_json(reading),
            "held_by": held_by(reading),
            **({"targets": [_part_json(n, r) for n, r in reading.parts]} if reading.parts else {}),
        }
    )


def _part_json(name: str, reading: Reading) -> dict[str, object]:
    counted = reading.counted
    return {
        "target": name,
        "engine": reading.engine,
        "verdict": reading.verdict.value,
        "reason": None if counted else reading.reason,
        "in_flight": json_number(reading.in_flight) if counted else None,
        "source": reading.source if counted else None,
        "read_ms": round(reading.read_ms, 3),
        "signals": signals_json(reading),
    }


def probe_text(reading: Reading, target: str) -> str:
    """`probe` for people: a key/value block, then every counted series, and each
    target's read (with several). A read that counted nothing shows only what it
    found: the target, the verdict, why, and the time it took."""
    counted = reading.counted
    rows = [
        ("target", target),
        ("engine", reading.engine or "-"),
        ("verdict", reading.verdict.value),
        ("reason", reading.reason or "-"),
        ("in_flight", shown(reading.in_flight)),
        ("source", reading.source or "-"),
        ("signals", _signals_text(reading)),
        ("held_by", ",".join(held_by(reading)) or "-"),
        ("read_ms", f"{reading.read_ms:.1f}"),
        ("series", str(len(reading.series))),
    ]
    kept = ("target", "verdict", "reason", "read_ms")
    lines = [f"{k:<10} {v}" for k, v in rows if counted or k in kept]
    width = max((len(series_text(s)) for s in reading.series), default=0)
    lines += [f"  {series_text(s):<{width}}  {shown(s.value)}" for s in reading.series]
    counters = progress_of(reading)
    if counters:  # what a stall is read by (CONTRACT §2b)
        lines.append(f"progress   {len(counters)} counters that move while the engine works")
    width = max((len(series_text(s)) for s in counters), default=0)
    lines += [f"  {series_text(s):<{width}}  {shown(s.value)}" for s in counters]
    if (outside := external_of(reading)) is not None:
        lines.append(f"waiting    {shown(outside)} on something outside the engine (never a stall)")
    if reading.parts:
        lines.append(f"targets    {len(reading.parts)}")
        for name, part in reading.parts:
            lines.append(
                f"  {name}  {part.verdict.value}  in_flight={shown(part.in_flight)}"
                f"  read_ms={part.read_ms:.1f}  reason={text_value(part.reason)}"
            )
    lines += [f"warning    {w}" for w in reading.warnings]
    if reading.signals is not None and counted:
        lines += [f"missing    {name}: {why}" for name, why in reading.signals.missing]
    return "\n".join(lines)


def _signals_text(reading: Reading) -> str:
    """`scheduler=N server=N connections=N`, `-` for a signal not answered: the names
    `wait`'s lines and the JSON give them (connections: those whose request has no
    answer yet, CONTRACT §2a)."""
    found = signals_json(reading)
    if found is None:
        return "-"
    return " ".join(
        f"{k}={shown(v) if isinstance(v, (int, float)) else '-'}"
        for k, v in found.items()
        if k != "missing"
    )


def probe_both(readings: tuple[Reading, Reading], targets: tuple[str, str], as_json: bool) -> str:
    """`probe --source both`: /metrics and /v1/loads, one after the other. JSON: the
    /metrics object plus `loads`, the same for /v1/loads; text: a row per source,
    then each source's block."""
    metrics, loads = readings
    if as_json:
        whole = json.loads(probe_json(metrics, targets[0]))
        whole["loads"] = json.loads(probe_json(loads, targets[1]))
        return json.dumps(whole)
    rows = [("source", "verdict", "in_flight", "read_ms", "reason")]
    for name, r in zip(("metrics", "loads"), readings, strict=True):
        rows.append(
            (name, r.verdict.value, shown(r.in_flight), f"{r.read_ms:.1f}", r.reason or "-")
        )
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    table = [
        "  ".join(c.ljust(w) for c, w in zip(row[:4], widths, strict=True)) + "  " + row[4]
        for row in rows
    ]
    blocks = [probe_text(r, t) for r, t in zip(readings, targets, strict=True)]
    return "\n\n".join(["\n".join(table), *blocks])


PROBE_EXIT = {verdict: exits.PROBE[verdict.value] for verdict in Verdict}


def run_probe(reach: ReadConfig, as_json: bool) -> tuple[str, int]:
    """`probe`: one read now; the text to print and the exit code. `--source both`:
    /metrics, then /v1/loads on the same listeners (the exit code is /metrics')."""
    if reach.source == "both":
        metrics = dataclasses.replace(reach, source="metrics")
        loads = dataclasses.replace(
            reach,
            source="loads",
            target=reach.target.with_path(LOADS_PATH),
            more=tuple(t.with_path(LOADS_PATH) for t in reach.more),
        )
        pair = (read_once(metrics), read_once(loads))
        shown = probe_both(pair, (metrics.display, loads.display), as_json)
        return shown, PROBE_EXIT[pair[0].verdict]
    # Every signal read, whatever the scheduler's count, to show each apart (§2a).
    reading = read_once(dataclasses.replace(reach, every_signal=True))
    if (said := unsignalled(reach.target)) is not None:  # SIGTERM stops short
        reading = dataclasses.replace(reading, warnings=(*reading.warnings, said))
    out = probe_json if as_json else probe_text
    return out(reading, reach.display), PROBE_EXIT[reading.verdict]


def read_once(reach: ReadConfig) -> Reading:
    """One read of reach as `wait` reads (each part within its read timeout; a refusal
    `unreachable` only once the engine is shown gone: CONTRACT §2)."""
    reader = hook_reader(reach)
    try:
        return reader.read(math.inf)
    finally:
        reader.close()


def reader_gone(fd: int = 1) -> bool:
    """Whether the reader of `fd` went away, asked without writing: a pipe whose read
    end is closed polls POLLERR, a terminal hung up POLLHUP."""
    try:
        poller = select.poll()
        poller.register(fd, 0)  # errors and hang-ups are reported whatever is asked
        return any(events for _fd, events in poller.poll(0))
    except (OSError, ValueError):
        return False


def watch_reads(
    reach: ReadConfig,
    as_json: bool,
    every: float,
    write: Callable[[str], object],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
    wall: Callable[[], float] = time.time,
    gone: Callable[[], bool] = reader_gone,
) -> int:
    """`probe --watch`: read every `every` seconds, with one reader as `wait` has, until
    a signal ends it (drainhook.hook.signals raises) or the output's reader goes away
    (a write fails, or `gone()` after a read that wrote nothing: then the last read's
    code); a read line when what `wait` writes one for changes, and each warning
    once. `--source both` watches /metrics."""
    reach = dataclasses.replace(reach, source="metrics") if reach.source == "both" else reach
    reader = hook_reader(dataclasses.replace(reach, every_signal=True))
    start, n, last, said = clock(), 0, None, set[str]()
    short = None
    if every < MIN_INTERVAL:
        short = f"interval I = {every:g} s is under {MIN_INTERVAL:g} s: the engine is read "
        short += f"{1 / every:.0f} times a second, each read a request to its API server"
    pending = [w for w in (unsignalled(reach.target), short) if w is not None]
    try:
        while True:
            began, n = clock(), n + 1
            reading = reader.read(math.inf)
            pending += [w for w in reading.warnings if w not in said and w not in pending]
            events = [warning_event(w) for w in pending]
            if (changed := what_changes(reading)) != last or events:
                events.append(read_event(began - start, n, reading))
            at = wall_time(wall())
            try:
                for event in events:
                    write(event.json(at) if as_json else event.text(at))
            except OSError:  # stdout closed (`| head`): the watch is over
                return PROBE_EXIT[reading.verdict]
            if not events and gone():  # nothing changed, and no one reads any more
                return PROBE_EXIT[reading.verdict]
            said.update(pending)
            pending, last = [], changed
            sleep(max(0.0, every - (clock() - began)))
    finally:
        reader.close()
