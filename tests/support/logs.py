"""Reading a run's log lines: text lines' key=value fields, JSON lines' events,
the lines but the timeline warnings, and whether the connections a server saw
fit the reads."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any


def events(stderr: str, kind: str | None = None) -> list[dict[str, Any]]:
    """The JSON events of a `--log-format json` run (those of one kind if given)."""
    found = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    return [e for e in found if kind is None or e.get("event") == kind]


def timeline_warning(line: str) -> bool:
    """A warning `wait` logs at its start about its own timeline (`plan`'s rules, with a
    code): the shrunk timelines of the tests get some."""
    if line.startswith("{"):
        return line.startswith('{"event": "warning"') and '"code": ' in line
    return line.startswith("drainhook warning=") and " code=" in line


def signal_line(line: str) -> bool:
    """A line saying that one of a target's signals is missing (CONTRACT §2a, said
    once per reason): the test listeners answer vLLM's /load 404
    (tests/support/loopback.py), so a vLLM run gets one."""
    if line.startswith("{"):
        return line.startswith('{"event": "signal"')
    return line.startswith("drainhook signal=")


def start_line(line: str) -> bool:
    """The line `wait` writes at t = 0: its targets and timeline."""
    return line.startswith(('{"event": "start"', "drainhook start="))


ENDINGS = ("drained", "deadline", "unreachable", "stalled", "interrupted", "misconfigured")


def end_line(line: str) -> bool:
    """The ending in words, just before the summary: the termination message's line."""
    return line.startswith(('{"event": "end"', *(f"drainhook: {e}" for e in ENDINGS)))


def hook_lines(lines: list[str]) -> list[str]:
    """The lines of a run but its start line, timeline warnings, missing-signal notes
    and the ending in words: reads, summary, other warnings."""
    skip = (start_line, timeline_warning, signal_line, end_line)
    return [line for line in lines if not any(said(line) for said in skip)]


def fields(line: str) -> dict[str, str]:
    """The key=value pairs of a text log line (a quoted value unquoted)."""
    try:
        words = shlex.split(line)
    except ValueError:  # an unbalanced quote in a hostile server's reason
        words = line.split()
    return dict(word.split("=", 1) for word in words if "=" in word)


def timed_out(read: Mapping[str, object]) -> bool:
    """A read that ran out of time: `unknown`, with `timed out` or (a leg D left no
    time to start) `no time left` in its reason (a text log line's fields, or a JSON
    line's object, where the reason may be null)."""
    reason = str(read.get("reason") or "")
    return read.get("verdict") == "unknown" and ("timed out" in reason or "no time left" in reason)


def connections_fit(connections: int, reads: Sequence[Mapping[str, object]]) -> bool:
    """One connection a read: none left open behind a read, no redirect followed. A
    read that ran out of time may have done so before it could connect: one started
    a millisecond before D (the grid follows the first read, so where its last slot
    falls is chance), or one a loaded machine kept off the CPU."""
    late = sum(1 for read in reads if timed_out(read))
    return len(reads) - late <= connections <= len(reads)
