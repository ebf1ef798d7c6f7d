"""What the hook says (CONTRACT §5): read lines (on a change, a heartbeat, or every
read), warnings and the summary, each an `Event` written as
text or JSON to stderr and `--log-file`. Writing never blocks or fails the hook:
a closed stderr, a full disk, a full pipe or an unread FIFO lose the line (never
time: drainhook.failsafe.write_now). No userinfo is shown."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
import typing
from dataclasses import dataclass
from pathlib import Path

from drainhook.engines.verdict import Reading, Verdict
from drainhook.failsafe import write_now
from drainhook.hook.config import WaitConfig
from drainhook.hook.drain import Result
from drainhook.hook.stall import Stall
from drainhook.hook.termination import hang_note
from drainhook.numfmt import json_number, shown
from drainhook.reading.failures import is_misconfigured

Value = str | int | float | None | list[str] | dict[str, object]


@dataclass(frozen=True)
class Event:
    """One log line as fields, in order. `shown`: fields a text line writes even
    when they have no value (as `-`); others it leaves out."""

    kind: str
    fields: tuple[tuple[str, Value], ...]
    shown: frozenset[str] = frozenset({"in_flight"})

    def json(self, at: str = "") -> str:
        """The event as one JSON object; `at`: its time of day, beside `"logger":
        "drainhook"`, so that lines in the engine's stdout can be picked out."""
        head = {"event": self.kind, **({"logger": "drainhook", "time": at} if at else {})}
        return json.dumps({**head, **dict(self.fields)})

    def text(self, at: str = "") -> str:
        """The event as one text line; `at`, its time of day, follows the first field
        (`t=` on a read line), so the first still says what the line is."""
        out = ["drainhook"]
        for key, value in self.fields:
            if value is not None or key in self.shown:
                out.append(f"{key}={text_value(value)}")
        if at:
            out.insert(2, f"at={at}")
        return " ".join(out)

    def terminal(self, at: str) -> str:
        """The line a person reads at a terminal (CONTRACT §5): the time of day without
        the date, `left=` in tenths, the line cut to TERMINAL columns (a file or a
        pipe keeps the full record)."""
        fields = tuple(
            (k, round(v, 1) if k == "left" and isinstance(v, float) else v) for k, v in self.fields
        )
        line = Event(self.kind, fields, self.shown).text(at[11:-1] if "T" in at else at)
        return line if len(line) <= TERMINAL else line[: TERMINAL - 1] + "…"


TERMINAL = 120  # columns a terminal's line fits


def wall_time(seconds: float) -> str:
    """A wall-clock instant as UTC to the millisecond: `2026-12-06T04:41:10.123Z`."""
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    return f"{whole}.{int(seconds % 1 * 1000):03d}Z"


def text_value(value: Value) -> str:
    """A field's value in a text line: numbers by drainhook.numfmt, `-` for none,
    a list comma-joined, an object as compact JSON; a string (and an object)
    quoted when it holds a blank, a quote, `=` or a backslash."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return shown(value)
    if isinstance(value, list):
        return ",".join(value) or "-"
    text = json.dumps(value, separators=(",", ":")) if isinstance(value, dict) else value
    return json.dumps(text) if any(c in text for c in ' "=\\') else text


def signal_fields(reading: Reading | None) -> tuple[tuple[str, Value], ...]:
    """Each signal's own count (CONTRACT §2a: `scheduler`, `server`, `connections`;
    none where the target does not answer it, or the read gave no count) and
    `held_by`, the signals that read work on a busy read."""
    signals = reading.signals if reading is not None and reading.counted else None
    if signals is None:
        return (("scheduler", None), ("server", None), ("connections", None), ("held_by", None))
    holding = list(signals.holding()) if reading is not None and reading.in_flight else []
    return (
        ("scheduler", json_number(signals.scheduler)),
        ("server", json_number(signals.server)),
        ("connections", json_number(signals.connections)),
        ("held_by", holding or None),
    )


# While nothing changes, a read line this often (seconds), standing for the reads since;
# PULSE as often while work may remain (any verdict but idle), so that a person
# watching sees the hook alive and the time left.
HEARTBEAT = 10.0
PULSE = 5.0


def read_event(
    t: float, n: int, reading: Reading, stands_for: int | None = None, left: float | None = None
) -> Event:
    """A read's line: when, the time left to D, its number, verdict, count, time, source,
    each signal and what held, the targets answering, why; `reads`: the reads a
    heartbeat line stands for."""
    parts = reading.parts
    answering = sum(1 for _, r in parts if r.verdict.value != "unreachable")
    return Event(
        "read",
        (
            ("t", round(t, 3)),
            ("left", None if left is None else round(max(0.0, left), 3)),
            ("read", n),
            ("reads", stands_for),
            ("verdict", reading.verdict.value),
            ("in_flight", json_number(reading.in_flight)),
            ("read_ms", round(reading.read_ms, 2)),
            ("engine", reading.engine),
            ("source", reading.source if reading.counted else None),
            *signal_fields(reading),
            ("targets", len(parts) if parts else None),
            ("answering", answering if parts else None),
            ("reason", reading.reason),
        ),
    )


def what_changes(reading: Reading) -> tuple[object, ...]:
    """What a read line is written for when it changes (CONTRACT §5): the verdict,
    the total, the signals that hold, the targets that answer, the reason."""
    event = dict(read_event(0.0, 0, reading).fields)
    # A wrong target's cause, once: not again when only the ports that listen change.
    reason = reading.reason
    event["reason"] = reason.split("; ", 1)[0] if is_misconfigured(reason) else reason
    return tuple(event[k] for k in ("verdict", "in_flight", "held_by", "answering", "reason"))


def missing_signals(reading: Reading) -> tuple[Event, ...]:
    """A line for each signal a reading has missing (CONTRACT §2a: logged once,
    the others decide): `drainhook signal=server missing="..."`, with the target
    when there are several."""
    found: list[Event] = []
    for name, part in reading.per_target():
        if part.signals is None:
            continue
        for signal, why in part.signals.missing:
            fields: tuple[tuple[str, Value], ...] = (("signal", signal), ("missing", why))
            found.append(Event("signal", (*fields, ("target", name or None))))
    return tuple(found)


def warning_event(text: str, code: str | None = None, reason: str | None = None) -> Event:
    """A warning; a plan rule's (`wait` at its start) also has its code and why."""
    more: tuple[tuple[str, Value], ...] = (
        () if code is None else (("code", code), ("reason", reason))
    )
    return Event("warning", (("warning", text), *more))


def summary_event(result: Result, exit_code: int, target: str, deadline: float) -> Event:
    """The run's last line: outcome, when, reads, the work left and why, exit code, D and
    target; what becomes of vLLM work left (`after_sigterm`), a stall's counters."""
    last = result.last
    reason = last.reason if last else None
    after, why = hang_note(result) or (None, None)
    if result.stall is not None:
        reason = result.stall.describe()
    return Event(
        "summary",
        (
            ("outcome", result.outcome.value),
            ("elapsed", round(result.elapsed, 3)),
            ("reads", result.reads),
            ("in_flight", json_number(last.in_flight if last else None)),
            ("held_by", signal_fields(last)[-1][1]),
            ("reason", reason),
            ("exit", exit_code),
            ("deadline", round(deadline, 3)),
            ("target", target),
            ("after_sigterm", after),
            ("after_sigterm_why", why),
            *((("stall", stall_json(result.stall)),) if result.stall else ()),
        ),
        shown=frozenset({"in_flight", "reason"}),
    )


class Log:
    """The hook's line sink: stderr (unless quiet) and an optional file, in one
    format (`text` or `json`)."""

    def __init__(
        self,
        fmt: str = "text",
        *,
        quiet: bool = False,
        stream: typing.TextIO | None = None,
        reads: str = "changes",
    ) -> None:
        self._json = fmt == "json"
        self._every_read = reads == "all"
        self._reads = 0  # reads seen
        self._said: tuple[tuple[object, ...], float, int] | None = None  # last line's
        self._quiet = quiet
        self._stream = stream
        self._tty = stream is None and not self._json and _isatty(2)
        self._fd: int | None = None
        self._warned: set[str] = set()
        self._deadline: float | None = None  # D, for each read line's time left

    def open_file(self, path: Path) -> None:
        """Also write to path (O_NONBLOCK: a FIFO with no reader refuses at once, a full pipe
        such as /proc/1/fd/1 drops a line); say so on stderr and go on if it cannot be opened."""
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

    def read(self, t: float, reading: Reading) -> None:
        """A read at t (seconds since the hook's start): its line when something
        changed since the last line, or HEARTBEAT (PULSE) has passed; then its warnings."""
        self._reads += 1
        state = what_changes(reading)
        left = None if self._deadline is None else self._deadline - t
        if self._every_read or self._said is None or self._said[0] != state:
            self.emit(read_event(t, self._reads, reading, left=left))
            self._said = (state, t, self._reads)
        elif t - self._said[1] >= (HEARTBEAT if reading.verdict is Verdict.IDLE else PULSE):
            self.emit(read_event(t, self._reads, reading, self._reads - self._said[2], left))
            self._said = (state, t, self._reads)
        for warning in reading.warnings:
            # Once per kind (CONTRACT §5): its text up to the values it names, which
            # go in parentheses, so that churning label values say it once.
            kind = warning.split(" (", 1)[0]
            if kind not in self._warned:
                self._warned.add(kind)
                self.warning(warning)
        for event in missing_signals(reading):
            said = event.text()
            if said not in self._warned:  # each missing signal, for each reason, once
                self._warned.add(said)
                self.emit(event)

    def start(self, config: WaitConfig, target: str, elapsed: float) -> None:
        """The line at t = 0 (CONTRACT §5): the targets, the engine, G (`grace_from=default`
        when neither --grace nor its variable gave it), S, R, I, and D from the start and
        as a time of day; `elapsed`: the seconds since t = 0."""
        self._deadline = config.deadline
        t0 = time.time() - elapsed  # its `at` is t = 0's time of day, as its `start=0` says
        fields: tuple[tuple[str, Value], ...] = (
            ("start", 0),
            ("target", target),
            ("engine", config.reach.engine),
            ("grace", json_number(config.grace)),
            ("grace_from", "default" if config.grace_default else None),
            ("settle", json_number(config.settle)),
            ("exit_reserve", json_number(config.exit_reserve)),
            ("interval", json_number(config.interval)),
            ("deadline", json_number(config.deadline)),
            ("deadline_at", wall_time(t0 + config.deadline)),
        )
        self.emit(Event("start", fields), t0)

    def warning(self, text: str, *, code: str | None = None, reason: str | None = None) -> None:
        self.emit(warning_event(text, code, reason))

    def summary(self, result: Result, exit_code: int, target: str, deadline: float) -> None:
        self.emit(summary_event(result, exit_code, target, deadline))

    def end(self, sentence: str) -> None:
        """The drain's ending in words, the termination message's line, before the
        summary, with its time of day (the Pod's status has the kubelet's): `drainhook:
        drained in 5.3 s after 2 reads; nothing in flight (04:50:58.753Z)`."""
        event = Event("end", (("message", sentence),))
        self.emit(event, plain=f"drainhook: {sentence} ({wall_time(time.time())[11:]})")

    def emit(self, event: Event, when: float | None = None, plain: str = "") -> None:
        """Write one event's line, with its time of day (by default now: printed, never
        used to decide), or `plain` as the text line; quiet, only the ending in words and
        the summary (CONTRACT §5: --quiet drops the other lines, never the sentence)."""
        at = wall_time(time.time() if when is None else when)
        line = event.json(at) if self._json else plain or event.text(at)
        if event.kind in ("summary", "end") or not self._quiet:
            self._stderr(event.terminal(at) if self._tty and not plain else line)
        if self._fd is not None:
            # A full disk or a full pipe loses the line; the hook goes on.
            write_now(self._fd, (line + "\n").encode("utf-8", "replace"))

    def _stderr(self, line: str) -> None:
        if self._stream is None:  # never waiting on a stderr nobody reads
            write_now(2, (line + "\n").encode("utf-8", "replace"))
        else:
            self._stream.write(line + "\n")


def _isatty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def stall_json(stall: Stall) -> dict[str, object]:
    """The summary's `stall` object: for how long, the work, the frozen counters."""
    return {
        "seconds": round(stall.seconds, 3),
        "stall_after": stall.after,
        "work": json_number(stall.work),
        "in_flight": json_number(stall.in_flight),
        "counters": {name: json_number(v) for name, v in stall.counters.items()},
        "targets": [f.target for f in stall.targets if f.target],
    }
