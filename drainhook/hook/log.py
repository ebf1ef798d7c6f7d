"""What the hook says: a line per read, one summary line, `probe` output (CONTRACT §4-5).

Lines go to stderr and, with `--log-file`, to that file too. Writing never
blocks the hook and never fails it: a closed stderr, a full disk or a FIFO
nobody reads only lose lines. Nothing secret is printed: targets are shown
through `Target.display`, which has no userinfo.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import sys
import typing
from pathlib import Path

from drainhook.engines.verdict import Reading, Series
from drainhook.hook.drain import Result
from drainhook.hook.stall import Stall, counter_totals
from drainhook.hook.termination import hang_note
from drainhook.reading.discovery.search import SearchRecord

SCHEMA = 1


def _log_number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:g}" if value != int(value) or abs(value) >= 1e15 else str(int(value))


def json_count(value: float | None) -> int | float | None:
    """A count for JSON: an integer when whole (3, not 3.0), else as it is."""
    if value is not None and math.isfinite(value) and value == int(value):
        return int(value)
    return value


def _quote(text: str | None) -> str:
    if text is None:
        return "-"
    return json.dumps(text) if any(c in text for c in ' "=\\') else text


def series_text(s: Series) -> str:
    labels = ",".join(f'{k}="{_escape(v)}"' for k, v in s.labels)
    return f"{s.name}{{{labels}}}" if labels else s.name


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Log:
    """The hook's line sink: stderr (unless quiet) and an optional file."""

    def __init__(
        self,
        fmt: str = "text",
        *,
        quiet: bool = False,
        stream: typing.TextIO | None = None,
    ) -> None:
        self._fmt = fmt
        self._quiet = quiet
        self._stream = stream if stream is not None else sys.stderr
        self._fd: int | None = None
        self._warned: set[str] = set()

    def open_file(self, path: Path) -> None:
        """Also write to path; say so on stderr and go on if it cannot be opened.

        O_NONBLOCK: a FIFO with no reader refuses at once instead of hanging,
        and a full pipe (such as /proc/1/fd/1) drops a line instead of blocking.
        """
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            self._fd = os.open(path, flags, 0o644)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            if exc.errno == errno.ENXIO:
                reason = "no process reads that FIFO"
            self._stderr(f"drainhook: cannot open --log-file {path}: {reason}; going on")

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def read(self, t: float, n: int, reading: Reading) -> None:
        if self._fmt == "json":
            line = json.dumps(
                {
                    "event": "read",
                    "t": round(t, 3),
                    "read": n,
                    "verdict": reading.verdict.value,
                    "in_flight": json_count(reading.in_flight),
                    "read_ms": round(reading.read_ms, 2),
                    "engine": reading.engine,
                    "source": reading.source if reading.counted else None,
                    "reason": reading.reason,
                }
            )
        else:
            line = (
                f"drainhook t={t:.3f} read={n} verdict={reading.verdict.value} "
                f"in_flight={_log_number(reading.in_flight)} read_ms={reading.read_ms:.1f}"
            )
            if reading.counted and reading.source:
                line += f" source={reading.source}"
            if reading.parts:
                answering = sum(1 for _, r in reading.parts if r.verdict.value != "unreachable")
                line += f" targets={len(reading.parts)} answering={answering}"
            if reading.reason:
                line += f" reason={_quote(reading.reason)}"
        self._emit(line, summary=False)
        for warning in reading.warnings:
            if warning not in self._warned:  # each warning once per hook
                self._warned.add(warning)
                self.warning(warning)

    def discovery(self, t: float, search: SearchRecord) -> None:
        """Listener discovery's one line: the configured targets, what was found,
        how many listeners were read, and how long it took."""
        found = search.discovery
        search_ms = (search.ended - search.started) * 1000.0
        after = search.found_after
        if self._fmt == "json":
            line = json.dumps(
                {
                    "event": "discovery",
                    "t": round(t, 3),
                    "configured": list(search.configured),
                    "found": list(search.found),
                    "tried": len(found.tried),
                    "search_ms": round(search_ms, 2),
                    "found_ms": None if after is None else round(after * 1000.0, 2),
                    "listeners": found.describe(),
                }
            )
        else:
            line = (
                f"drainhook t={t:.3f} discovery configured={','.join(search.configured)} "
                f"found={','.join(search.found) or '-'} tried={len(found.tried)} "
                f"search_ms={search_ms:.1f}"
            )
            if after is not None:
                line += f" found_ms={after * 1000.0:.1f}"
            if not search.found:
                line += f" listeners={_quote(found.describe())}"
        self._emit(line, summary=False)

    def warning(self, text: str, *, code: str | None = None, reason: str | None = None) -> None:
        """One warning line; a plan rule's (`wait` at its start) also has its code and why."""
        if self._fmt == "json":
            more = {} if code is None else {"code": code, "reason": reason}
            line = json.dumps({"event": "warning", "warning": text, **more})
        else:
            line = f"drainhook warning={_quote(text)}"
            if code is not None:
                line += f" code={code} why={_quote(reason)}"
        self._emit(line, summary=False)

    def summary(self, result: Result, exit_code: int, target: str, deadline: float) -> None:
        last = result.last
        in_flight = last.in_flight if last else None
        reason = last.reason if last else None
        # vLLM work left at the deadline: it hangs until the kill at G (`after`, `why`).
        after, why = hang_note(result) or (None, None)
        if result.stall is not None:
            reason = result.stall.describe()
        if self._fmt == "json":
            line = json.dumps(
                {
                    "event": "summary",
                    "outcome": result.outcome.value,
                    "elapsed": round(result.elapsed, 3),
                    "reads": result.reads,
                    "in_flight": json_count(in_flight),
                    "reason": reason,
                    "exit": exit_code,
                    "deadline": round(deadline, 3),
                    "target": target,
                    "after_sigterm": after,
                    "after_sigterm_why": why,
                    **({"stall": stall_json(result.stall)} if result.stall else {}),
                }
            )
        else:
            line = (
                f"drainhook outcome={result.outcome.value} elapsed={result.elapsed:.3f} "
                f"reads={result.reads} in_flight={_log_number(in_flight)} reason={_quote(reason)} "
                f"exit={exit_code} deadline={deadline:.3f} target={target}"
            )
            if after is not None:
                line += f" after_sigterm={after} why={_quote(why)}"
        self._emit(line, summary=True)

    def _emit(self, line: str, *, summary: bool) -> None:
        if summary or not self._quiet:
            self._stderr(line)
        if self._fd is not None:
            # A full disk or a full pipe loses the line; the hook goes on.
            with contextlib.suppress(OSError):
                os.write(self._fd, (line + "\n").encode("utf-8", "replace"))

    def _stderr(self, line: str) -> None:
        try:
            self._stream.write(line + "\n")
            self._stream.flush()
        except (OSError, ValueError, AttributeError):
            pass  # stderr closed


def stall_json(stall: Stall) -> dict[str, object]:
    """The summary's `stall` object: for how long, the work, the frozen counters."""
    return {
        "seconds": round(stall.seconds, 3),
        "stall_after": stall.after,
        "work": json_count(stall.work),
        "in_flight": json_count(stall.in_flight),
        "counters": _counts(stall.counters),
        "targets": [f.target for f in stall.targets if f.target],
    }


def _counts(totals: dict[str, float]) -> dict[str, int | float | None]:
    return {name: json_count(value) for name, value in totals.items()}


def progress_of(reading: Reading) -> tuple[Series, ...]:
    """Every progress counter a reading carries (each target's, with several)."""
    parts = reading.parts or (("", reading),)
    return tuple(c for _, r in parts if r.progress is not None for c in r.progress.counters)


def external_of(reading: Reading) -> float | None:
    """The work reported as waiting outside the engine, over the targets; None when
    no target's could be read."""
    parts = reading.parts or (("", reading),)
    found = [r.progress.external for _, r in parts if r.progress is not None]
    return sum(found) if found else None


def probe_json(reading: Reading, target: str, search: SearchRecord | None = None) -> str:
    """The stable `probe --json` object (schema 1). Beyond the contract's fields:
    `source` (what was counted: metrics, loads, mixed; null when nothing was),
    `warnings`, `progress` (each progress counter's name and value, summed over
    its series and targets: CONTRACT §2b), `waiting_outside` (the work the
    engine reports as waiting outside itself), `targets` (each target's own
    read, with several) and `discovered` (the engine listeners a search found,
    when one ran)."""
    counted = reading.counted
    discovered = {}
    if search is not None:
        discovered["discovered"] = [
            _part_json(t.url, t.reading) for t in search.discovery.found if t.reading is not None
        ]
    return json.dumps(
        {
            "schema": SCHEMA,
            "target": target,
            "engine": reading.engine,
            "verdict": reading.verdict.value,
            "reason": None if counted else reading.reason,
            "in_flight": json_count(reading.in_flight) if counted else None,
            "series": [
                {"name": s.name, "labels": dict(s.labels), "value": s.value} for s in reading.series
            ],
            "read_ms": round(reading.read_ms, 3),
            "source": reading.source if counted else None,
            "warnings": list(reading.warnings),
            "progress": _counts(counter_totals(progress_of(reading))),
            "waiting_outside": json_count(external_of(reading)),
            **({"targets": [_part_json(n, r) for n, r in reading.parts]} if reading.parts else {}),
            **discovered,
        }
    )


def _part_json(name: str, reading: Reading) -> dict[str, object]:
    counted = reading.counted
    return {
        "target": name,
        "engine": reading.engine,
        "verdict": reading.verdict.value,
        "reason": None if counted else reading.reason,
        "in_flight": json_count(reading.in_flight) if counted else None,
        "source": reading.source if counted else None,
        "read_ms": round(reading.read_ms, 3),
    }


def probe_text(reading: Reading, target: str, search: SearchRecord | None = None) -> str:
    """`probe` for people: a key/value block, then every counted series, each
    target's read (with several), the engine listeners found (when a search ran)."""
    rows = [
        ("target", target),
        ("engine", reading.engine or "-"),
        ("verdict", reading.verdict.value),
        ("reason", reading.reason or "-"),
        ("in_flight", _log_number(reading.in_flight)),
        ("source", (reading.source if reading.counted else None) or "-"),
        ("read_ms", f"{reading.read_ms:.1f}"),
        ("series", str(len(reading.series))),
    ]
    lines = [f"{k:<10} {v}" for k, v in rows]
    width = max((len(series_text(s)) for s in reading.series), default=0)
    lines += [f"  {series_text(s):<{width}}  {_log_number(s.value)}" for s in reading.series]
    counters = progress_of(reading)
    outside = external_of(reading)
    lines.append(f"progress   {len(counters)}  waiting_outside={_log_number(outside)}")
    width = max((len(series_text(s)) for s in counters), default=0)
    lines += [f"  {series_text(s):<{width}}  {_log_number(s.value)}" for s in counters]
    if reading.parts:
        lines.append(f"targets    {len(reading.parts)}")
        for name, part in reading.parts:
            lines.append(
                f"  {name}  {part.verdict.value}  in_flight={_log_number(part.in_flight)}"
                f"  read_ms={part.read_ms:.1f}  reason={_quote(part.reason)}"
            )
    if search is not None:
        found = [t for t in search.discovery.found if t.reading is not None]
        lines.append(f"discovered {len(found)}")
        for t in found:
            r = t.reading
            assert r is not None
            lines.append(
                f"  {t.url}  {r.engine}  {r.verdict.value}  in_flight={_log_number(r.in_flight)}"
                f"  source={(r.source if r.counted else None) or '-'}"
            )
        if not found:
            lines.append(f"  none: {search.discovery.describe()}")
    lines += [f"warning    {w}" for w in reading.warnings]
    return "\n".join(lines)


def probe_both(readings: tuple[Reading, Reading], targets: tuple[str, str], as_json: bool) -> str:
    """`probe --source both`: /metrics and /v1/loads read one after the other, side by side.

    JSON: the /metrics object of `probe --json`, plus `loads`, the same object for
    /v1/loads. Text: one row per source, then each source's own block.
    """
    metrics, loads = readings
    if as_json:
        whole = json.loads(probe_json(metrics, targets[0]))
        whole["loads"] = json.loads(probe_json(loads, targets[1]))
        return json.dumps(whole)
    rows = [("source", "verdict", "in_flight", "read_ms", "reason")]
    for name, r in zip(("metrics", "loads"), readings, strict=True):
        rows.append(
            (name, r.verdict.value, _log_number(r.in_flight), f"{r.read_ms:.1f}", r.reason or "-")
        )
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    table = [
        "  ".join(c.ljust(w) for c, w in zip(row[:4], widths, strict=True)) + "  " + row[4]
        for row in rows
    ]
    blocks = [probe_text(r, t) for r, t in zip(readings, targets, strict=True)]
    return "\n\n".join(["\n".join(table), *blocks])
