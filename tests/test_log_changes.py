"""The log says what changed (CONTRACT §5): a read line when the verdict, the
total, the signal that holds, the targets that answer or the reason changed;
otherwise one line every 5 s while work may remain, every 10 s while idle, standing
for the reads since; `--log-reads all`
writes every read. The summary is the same either way.

The drain loop runs under a fake clock with the real `Log` (a ten-minute drain
in milliseconds); one real process shows the flag and the default end to end.
"""

from __future__ import annotations

import io
import itertools
import json

import pytest

from drainhook.engines.verdict import Reading, Signals, Verdict
from drainhook.hook.config import Timeline
from drainhook.hook.drain import Outcome, drain
from drainhook.hook.log import HEARTBEAT, PULSE, Log
from drainhook.planning import plan as planning
from tests.support.clock import Clock
from tests.support.loopback import Loopback, serve
from tests.support.process import Hook


def counted(n: float, held_by_server: bool = False) -> Reading:
    verdict = Verdict.IDLE if n == 0 else Verdict.BUSY
    signals = Signals(0.0 if held_by_server else n, n)
    return Reading(verdict, "vllm", n, (), None, 1.5, signals=signals)


def run_log(
    counts: list[tuple[float, float]], deadline: float, reads: str = "changes"
) -> tuple[list[dict[str, object]], int]:
    """Drain an engine whose count is `n` from each `(since, n)` on (seconds from
    t0), under a fake clock, through a real Log in JSON; its lines (less their
    time of day) and reads."""
    clock = Clock()
    stream = io.StringIO()
    log = Log("json", stream=stream, reads=reads)
    log.start(planning.wait_config(grace=deadline + 5.0, exit_reserve=5.0), "t", 0.0)

    def read(timeout: float) -> Reading:
        t = clock.now
        n = [c for since, c in counts if since <= t][-1]
        return counted(n)

    result = drain(
        Timeline(5.0, deadline, 1.0, 1.0),
        read,
        t0=0.0,
        clock=clock,
        sleep=clock.sleep,
        on_read=log.read,
    )
    log.summary(result, 0, "t", deadline)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert all(line.pop("logger") == "drainhook" and line.pop("time") for line in lines)
    return lines, result.reads


def read_lines(lines: list[dict[str, object]]) -> list[dict[str, object]]:
    return [e for e in lines if e["event"] == "read"]


def test_a_ten_minute_drain_of_one_request_writes_tens_of_lines() -> None:
    # The last request runs ten minutes: read every I/4 (2,400 reads), written on
    # the first read and then once every 5 s, each heartbeat standing for its reads
    # and saying the time left to D.
    lines, reads = run_log([(0.0, 1.0), (605.0, 0.0)], deadline=900.0)
    assert lines[0]["event"] == "start" and lines[0]["deadline"] == 900
    written = read_lines(lines)
    assert reads > 2300
    assert len(written) <= 600 / PULSE + 4, len(written)
    heartbeats = [e for e in written if e["reads"] is not None]
    assert all(e["in_flight"] == 1 for e in heartbeats)
    assert all(e["left"] == pytest.approx(900.0 - float(e["t"])) for e in written)  # type: ignore[arg-type]
    pairs = list(itertools.pairwise(written))
    gaps = [float(b["t"]) - float(a["t"]) for a, b in pairs]  # type: ignore[arg-type]
    # A line every 5 s while busy, never sooner and never later than the next read.
    assert all(PULSE - 1e-9 <= g <= PULSE + 0.25 for g in gaps[: len(heartbeats)]), gaps
    # Every read is numbered, and a heartbeat stands for the reads since the last line.
    # The first idle read is a change; the confirming one is not (the summary says it).
    assert (written[-1]["in_flight"], written[-1]["read"]) == (0, reads - 1)
    assert (lines[-1]["event"], lines[-1]["reads"]) == ("summary", reads)
    for a, b in pairs:
        if b["reads"] is not None:
            assert b["reads"] == int(b["read"]) - int(a["read"])  # type: ignore[call-overload]


@pytest.mark.parametrize(("n", "every"), [(1.0, PULSE), (0.0, HEARTBEAT)], ids=["busy", "idle"])
def test_a_line_every_5_s_while_work_remains_and_10_s_while_idle(n: float, every: float) -> None:
    # 30 s of reads every 0.25 s, nothing changing: the first read, then one line
    # per pulse (busy) or per heartbeat (idle: no work, the hook only confirms).
    stream = io.StringIO()
    log = Log("json", stream=stream)
    for k in range(121):
        log.read(k * 0.25, counted(n))
    written = [json.loads(line)["t"] for line in stream.getvalue().splitlines()]
    assert written == [k * every for k in range(int(30 / every) + 1)]


def test_a_change_of_the_count_is_written_at_once() -> None:
    lines, _ = run_log([(0.0, 1.0), (12.0, 2.0), (14.0, 1.0), (20.0, 0.0)], deadline=60.0)
    changes = [(e["t"], e["in_flight"]) for e in read_lines(lines) if e["reads"] is None]
    assert [n for _, n in changes] == [1, 2, 1, 0]
    # Each change is the line of the first read that saw it.
    assert [float(t) for t, _ in changes][1:3] == pytest.approx([12.0, 14.0])  # type: ignore[arg-type]


def test_the_signal_that_holds_is_a_change() -> None:
    log_stream = io.StringIO()
    log = Log("json", stream=log_stream)
    for t, reading in ((5.0, counted(1.0)), (5.25, counted(1.0, held_by_server=True))):
        log.read(t, reading)
    held = [json.loads(line)["held_by"] for line in log_stream.getvalue().splitlines()]
    assert held == [["scheduler", "server"], ["server"]]


def test_log_reads_all_writes_every_read_and_the_same_summary() -> None:
    counts = [(0.0, 1.0), (30.0, 0.0)]
    every, reads = run_log(counts, deadline=60.0, reads="all")
    changes, _ = run_log(counts, deadline=60.0)
    assert len(read_lines(every)) == reads
    assert all(e["reads"] is None for e in read_lines(every))
    assert len(read_lines(changes)) < reads // 10
    assert every[-1] == changes[-1] and every[-1]["event"] == "summary"


@pytest.mark.parametrize("flag", [(), ("--log-reads", "all")], ids=["changes", "all"])
def test_the_hook_logs_changes_by_default(hook: Hook, flag: tuple[str, ...]) -> None:
    """A busy engine read every 0.05 s for D = 2 s: about 35 reads, one line for
    them by default (nothing changes in 2 s), every one with --log-reads all."""
    busy = b"vllm:num_requests_running 3\nvllm:num_requests_waiting 0\n"
    with Loopback(serve(busy)) as srv:
        args = ("--url", srv.url, "--settle", "0.2", "--interval", "0.05", "--grace", "3",
                "--exit-reserve", "1")  # fmt: skip
        run = hook("wait", *args, *flag)
    assert run.code == 3, run.stderr
    summary = run.summary
    reads = int(summary.split(" reads=")[1].split()[0])
    lines = [line for line in run.stderr.splitlines() if " read=" in line]
    assert reads >= 10
    if not flag and "time ran out" in lines[-1]:
        # A read started a moment before D has no time left (a loaded machine): its
        # failure is a change, and is written; the unchanged reads before it are not.
        lines = lines[:-1]
        reads -= 1
    assert len(lines) == (reads if flag else 1), run.stderr
    assert Outcome.DEADLINE.value in summary


def test_a_wrong_targets_cause_is_said_once_whatever_listens() -> None:
    """Issue 59 (CONTRACT §5): a misconfigured target's read line is written once per
    cause, not again when only the set of listening ports (or their holders) changes;
    a new cause is a new line."""
    stream = io.StringIO()
    log = Log("json", stream=stream)
    why = "misconfigured: connection refused; TCP ports {} listen here: point --port"
    for t, ports in enumerate(("8001", "8001,9090", "9090", "8001")):
        log.read(float(t), Reading.failed(Verdict.UNKNOWN, why.format(ports), 1.0))
    log.read(4.0, Reading.failed(Verdict.UNKNOWN, "misconfigured: HTTP 404: check --path", 1.0))
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    reasons = [e["reason"] for e in lines if e["event"] == "read"]
    assert reasons == [why.format("8001"), "misconfigured: HTTP 404: check --path"]
