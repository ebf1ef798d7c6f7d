"""`drainhook wait` end to end: the real CLI as a subprocess against real loopback servers.

Every case runs on a shrunk timeline (S = 0.2 s, I = 0.1 s, D = 2 s or less) and
asserts the exit code, the summary line, what each read concluded and how many
connections the server accepted, so that a hook that skipped reads, followed a
redirect or waited out a hung listener past D would fail it.
"""

from __future__ import annotations

import datetime
import gzip
import json
import math
import os
import socket
import time
from pathlib import Path

import pytest

from drainhook.hook.config import EXIT_ALLOWANCE
from tests.conftest import SPAWN_LATE, WAKE_LATE, late
from tests.support.logs import connections_fit, end_line, fields, hook_lines, start_line
from tests.support.loopback import (
    Behaviour,
    Loopback,
    close_after,
    drip,
    drip_headers,
    hang,
    never_read,
    read_request,
    reset_after,
    response_bytes,
    route,
    sample,
    sequence,
    serve,
)
from tests.support.process import Hook, Run

SETTLE, INTERVAL, READ_TIMEOUT = 0.2, 0.1, 0.3  # S, I and the read timeout
TICK = 0.011  # one kernel clock tick (USER_HZ 100), the resolution of the process start
TIMELINE = ("--settle", str(SETTLE), "--interval", str(INTERVAL),
            "--read-timeout", str(READ_TIMEOUT))  # fmt: skip
D = 2.0  # real processes run to D >= 2 s: a sub-second D is at a loaded machine's mercy
DEADLINE = ("--grace", "2.5", "--exit-reserve", "0.5")
D_SHORT = D  # "unknown until D"
DEADLINE_SHORT = DEADLINE

IDLE = sample("vllm-single-dp2-idle.txt")
BUSY = sample("vllm-single-dp2.txt")  # in_flight 6
MIB = 1024 * 1024


def read_lines(run: Run) -> list[dict[str, str]]:
    return [fields(line) for line in run.lines if " read=" in line]


def verdicts(run: Run) -> list[str]:
    return [r["verdict"] for r in read_lines(run)]


def fewest_reads(run: Run, reads: int) -> int:
    """`reads` on the grid, less the slots the machine's withholding of the CPU can
    explain (one per interval of `run.starved`), but never under one read."""
    return max(1, reads - math.ceil(run.starved / INTERVAL))


def wait(hook: Hook, url: str, *extra: str, deadline: tuple[str, ...] = DEADLINE) -> Run:
    # A hook that blocks (on a FIFO, a dripping server) fails here, not at the suite's timeout.
    return hook("wait", "--url", url, *TIMELINE, *deadline, *extra, timeout=15)


def free_port() -> int:
    """A loopback port with nothing listening on it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def earliest(run: Run) -> float:
    """The earliest start of the last read (CONTRACT §1): from S, a step of I after
    each read but an idle one that the server's count or the connections also read
    (the confirming read then comes I/4 later). The busy counts here are 6 or an
    unknown: never the quick step of a drain's last request."""
    t = SETTLE
    for r in read_lines(run)[:-1]:
        server_zero = r["verdict"] == "idle" and ("server" in r or "connections" in r)
        t += INTERVAL / 4 if server_zero else INTERVAL
    return t


def assert_drained(run: Run, reads: int) -> dict[str, str]:
    assert run.code == 0, run.stderr
    summary = fields(run.summary)
    assert summary["outcome"] == "drained", run.stderr
    assert summary["reads"] == str(reads), run.stderr
    assert summary["in_flight"] == "0"
    assert summary["exit"] == "0"
    # The last read is at `earliest` or later after the process start, which the
    # kernel records in 10 ms ticks (rounded down): up to one tick before the spawn
    # measured here.
    assert len(read_lines(run)) == reads, run.stderr
    assert earliest(run) - TICK <= run.elapsed <= late(D, SPAWN_LATE, run.starved)
    return summary


def assert_deadline(run: Run, d: float) -> dict[str, str]:
    assert run.code == 3, run.stderr
    summary = fields(run.summary)
    assert summary["outcome"] == "deadline", run.stderr
    assert summary["exit"] == "3"
    assert float(summary["deadline"]) == pytest.approx(d)
    assert d - 0.1 <= run.elapsed <= late(d, SPAWN_LATE, run.starved), run.stderr
    return summary


# ---- idle, busy and the confirming reads -------------------------------------------


@pytest.mark.reads
def test_idle_engine_drains_on_the_second_read_with_a_plain_get(hook: Hook) -> None:
    heads: list[bytes] = []
    with Loopback(route({"/metrics": IDLE}, heads)) as srv:
        run = wait(hook, srv.url)
    assert_drained(run, reads=2)
    assert srv.connections == 2
    assert verdicts(run) == ["idle", "idle"]
    assert float(read_lines(run)[0]["t"]) >= SETTLE
    # CONTRACT §2: one GET, text format 0.0.4, no compression asked for.
    assert len(heads) == 2
    head = heads[0].decode("latin-1").lower()
    assert head.startswith("get /metrics http/1.1\r\n")
    assert "\r\naccept: text/plain;version=0.0.4\r\n" in head
    assert "\r\naccept-encoding: identity\r\n" in head


@pytest.mark.parametrize(
    ("bodies", "extra", "expected"),
    [
        pytest.param((BUSY, BUSY, IDLE), (), ["busy", "busy", "idle", "idle"], id="busy-then-idle"),
        pytest.param(
            (IDLE, BUSY, IDLE), (), ["idle", "busy", "idle", "idle"], id="busy-resets-confirmation"
        ),
        pytest.param(
            (IDLE, BUSY, IDLE, BUSY, IDLE),
            (),
            ["idle", "busy", "idle", "busy", "idle", "idle"],
            id="every-busy-resets",
        ),
        pytest.param((IDLE,), ("--confirm", "3"), ["idle", "idle", "idle"], id="confirm-3"),
        pytest.param(
            (IDLE, IDLE, BUSY, IDLE),
            ("--confirm", "3"),
            ["idle", "idle", "busy", "idle", "idle", "idle"],
            id="confirm-3-reset",
        ),
    ],
)
@pytest.mark.reads
def test_drained_after_the_confirming_idle_reads(
    hook: Hook, bodies: tuple[bytes, ...], extra: tuple[str, ...], expected: list[str]
) -> None:
    with Loopback(sequence(*(serve(b) for b in bodies))) as srv:
        run = wait(hook, srv.url, *extra)
    assert_drained(run, reads=len(expected))
    assert verdicts(run) == expected
    assert srv.connections == len(expected)
    busy_totals = {r["in_flight"] for r in read_lines(run) if r["verdict"] == "busy"}
    assert busy_totals <= {"6"}


@pytest.mark.reads
def test_sglang_engine_pinned_drains(hook: Hook) -> None:
    busy, idle = sample("sglang-mp-dp2.txt"), sample("sglang-mp-dp2-idle.txt")
    with Loopback(sequence(serve(busy), serve(idle))) as srv:
        # /metrics alone: one connection a read (tests/test_sources.py reads /v1/loads beside it).
        run = wait(hook, srv.url, "--engine", "sglang", "--source", "metrics")
    assert_drained(run, reads=3)
    assert [(r["verdict"], r["in_flight"]) for r in read_lines(run)] == [
        ("busy", "6"),
        ("idle", "0"),
        ("idle", "0"),
    ]
    assert srv.connections == 3


@pytest.mark.reads
def test_always_busy_holds_until_the_deadline(hook: Hook) -> None:
    with Loopback(serve(BUSY)) as srv:
        run = wait(hook, srv.url)
    summary = assert_deadline(run, D)
    reads = read_lines(run)
    # (D - S) / I = 18 reads on the grid; a loaded machine may lose a few.
    assert fewest_reads(run, 10) <= len(reads) <= 19, run.stderr
    assert len(reads) == int(summary["reads"])
    assert connections_fit(srv.connections, reads), run.stderr
    # Each read saw the 6 requests, or (a loaded machine, or the last read cut
    # at D) ran out of time: unknown, which holds the hook just the same.
    for r in reads:
        if r["verdict"] == "unknown":
            assert "timed out" in r["reason"], r
        else:
            assert (r["verdict"], r["in_flight"]) == ("busy", "6"), r
    assert "busy" in verdicts(run)
    assert summary["in_flight"] == reads[-1]["in_flight"]


@pytest.mark.reads
def test_sglang_pinned_against_a_vllm_body_is_unknown_until_the_deadline(hook: Hook) -> None:
    with Loopback(serve(sample("vllm-single-dp2-idle.txt"))) as srv:
        run = wait(hook, srv.url, "--engine", "sglang", deadline=DEADLINE_SHORT)
    summary = assert_deadline(run, D_SHORT)
    assert summary["in_flight"] == "-"
    assert set(verdicts(run)) == {"unknown"}
    assert int(summary["reads"]) == len(read_lines(run)) >= fewest_reads(run, 3)
    assert connections_fit(srv.connections, read_lines(run)), run.stderr


# ---- listeners that never finish: each read is bounded as a whole ----------------


@pytest.mark.parametrize(
    "behaviour",
    [
        pytest.param(hang, id="hung-listener"),
        pytest.param(never_read, id="never-reads-the-request"),
        pytest.param(drip(IDLE, every=0.05), id="body-drips"),
        pytest.param(drip_headers(every=0.05), id="headers-drip"),
    ],
)
@pytest.mark.reads
def test_a_listener_that_never_finishes_is_unknown_until_the_deadline(
    hook: Hook, behaviour: Behaviour
) -> None:
    with Loopback(behaviour) as srv:
        run = wait(hook, srv.url, deadline=DEADLINE_SHORT)
    summary = assert_deadline(run, D_SHORT)
    reads = read_lines(run)
    assert int(summary["reads"]) == len(reads) >= fewest_reads(run, 2)
    assert connections_fit(srv.connections, reads), run.stderr
    for r in reads:
        assert r["verdict"] == "unknown"
        assert "timed out" in r["reason"], r
        # The whole read ends at --read-timeout, not a socket timeout per byte.
        assert float(r["read_ms"]) <= READ_TIMEOUT * 1000 + 250, r


# ---- responses that are broken: unknown, counted as busy, then the hook recovers ----


def _gzip_bomb() -> bytes:
    """A small gzip body that inflates to 4 MiB: over a 1 MiB cap."""
    return gzip.compress(IDLE + (b"#" * 1023 + b"\n") * 4096, 6)


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        pytest.param(
            reset_after(response_bytes(IDLE)[:4000]), "connection broken", id="reset-mid-body"
        ),
        pytest.param(close_after(b"HTTP/1.1 200 OK\r\n"), "closed", id="close-after-status"),
        pytest.param(
            serve(IDLE, headers={"Content-Length": str(len(IDLE) + 1000)}),
            "closed",
            id="content-length-too-large",
        ),
        pytest.param(
            serve(IDLE + b"# padding\n" * (MIB // 10 + 1)), "max-body", id="body-over-cap"
        ),
        pytest.param(
            serve(_gzip_bomb(), headers={"Content-Encoding": "gzip"}), "max-body", id="gzip-bomb"
        ),
    ],
)
@pytest.mark.reads
def test_a_broken_response_is_unknown_and_resets_confirmation(
    hook: Hook, bad: Behaviour, reason: str
) -> None:
    with Loopback(sequence(bad, serve(IDLE))) as srv:
        run = wait(hook, srv.url, "--max-body", "1MiB")
    assert_drained(run, reads=3)
    first = read_lines(run)[0]
    assert first["verdict"] == "unknown"
    assert first["in_flight"] == "-"
    # The server's doing, or (a loaded machine) the read's time ran out first: both
    # are unknown. tests/test_read.py asserts each reason with time to spare.
    assert reason in first["reason"] or "timed out" in first["reason"], first
    assert verdicts(run)[1:] == ["idle", "idle"]
    assert srv.connections == 3


@pytest.mark.reads
def test_a_gzip_body_sent_unasked_is_decoded(hook: Hook) -> None:
    with Loopback(serve(gzip.compress(IDLE), headers={"Content-Encoding": "gzip"})) as srv:
        run = wait(hook, srv.url)
    assert_drained(run, reads=2)
    assert srv.connections == 2


# ---- nothing to measure: unreachable ends the hook at once -------------------------


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        (301, "Moved Permanently"),
        (302, "Found"),
        (307, "Temporary Redirect"),
        (401, "Unauthorized"),
        (404, "Not Found"),
    ],
)
@pytest.mark.reads
def test_a_3xx_or_4xx_from_the_start_is_a_wrong_target_held_and_never_followed(
    hook: Hook, status: int, reason: str
) -> None:
    """CONTRACT §2: a target that has never answered 2xx and answers a 3xx or a 4xx is
    misconfigured (a wrong path, port or key): doubt, said, never a release, and the
    hook goes on reading it; when it then answers idle, it is drained as any other."""
    with Loopback(serve(b"", status, reason)) as target:
        # A redirect to a live idle endpoint: a hook following it would drain at once.
        location = {"Location": target.url}
        with Loopback(sequence(serve(b"moved\n", status, reason, location), serve(IDLE))) as srv:
            run = wait(hook, srv.url, deadline=())  # D = 25 s
    assert run.code == 0, run.stderr
    reads = [fields(line) for line in run.lines if " read=" in line]
    assert [r["verdict"] for r in reads] == ["unknown", "idle", "idle"]
    assert reads[0]["reason"].startswith(f"misconfigured: HTTP {status}: ")
    assert fields(run.summary)["reads"] == "3"
    assert (srv.connections, target.connections) == (3, 0)
    # The first read held: the confirmation took I + I/4 more, not D.
    assert run.elapsed <= late(SETTLE + 2 * INTERVAL, SPAWN_LATE, run.starved)


@pytest.mark.parametrize(
    ("status", "reason"),
    [(500, "Internal Server Error"), (503, "Service Unavailable"), (429, "Too Many Requests")],
)
@pytest.mark.reads
def test_a_5xx_or_429_from_the_start_holds_to_the_deadline(
    hook: Hook, status: int, reason: str
) -> None:
    """A 5xx or a 429 says the server is there and troubled: doubt, never the end."""
    with Loopback(serve(b"troubled\n", status, reason)) as srv:
        run = wait(hook, srv.url, deadline=DEADLINE_SHORT)
    summary = assert_deadline(run, D_SHORT)
    assert f"HTTP {status}" in summary["reason"]
    assert set(verdicts(run)) == {"unknown"}
    assert len(verdicts(run)) >= fewest_reads(run, round((D_SHORT - SETTLE) / INTERVAL))
    assert connections_fit(srv.connections, read_lines(run))


@pytest.mark.parametrize(
    ("status", "reason"),
    [(503, "Service Unavailable"), (429, "Too Many Requests"), (404, "Not Found")],
)
@pytest.mark.reads
def test_a_non_2xx_in_the_middle_of_a_drain_holds_the_hook(
    hook: Hook, status: int, reason: str
) -> None:
    """Idle, then two answers of `status`, then idle again: the hook never returns
    on the doubt (a 404 after a 2xx is doubt too, not a wrong path), and drains
    only on the two idle reads after it."""
    troubled = serve(b"troubled\n", status, reason)
    with Loopback(sequence(serve(IDLE), troubled, troubled, serve(IDLE))) as srv:
        run = wait(hook, srv.url)
    assert_drained(run, reads=5)
    assert verdicts(run) == ["idle", "unknown", "unknown", "idle", "idle"]
    assert [r.get("reason") for r in read_lines(run)][1:3] == [f"HTTP {status}"] * 2
    assert srv.connections == 5


def test_connection_refused_is_unreachable_at_once(hook: Hook) -> None:
    run = hook("wait", "--url", f"http://127.0.0.1:{free_port()}/metrics", *TIMELINE)
    assert run.code == 4, run.stderr
    summary = fields(run.summary)
    assert summary["outcome"] == "unreachable"
    assert summary["reads"] == "1"
    assert "refused" in summary["reason"]
    assert float(summary["deadline"]) == 25.0
    assert run.elapsed <= late(SETTLE + READ_TIMEOUT, SPAWN_LATE, run.starved)  # at once, not at D


# ---- the deadline D and what is clipped to it --------------------------------------


@pytest.mark.reads
def test_max_wait_caps_the_deadline(hook: Hook) -> None:
    with Loopback(serve(BUSY)) as srv:
        run = hook("wait", "--url", srv.url, *TIMELINE, "--grace", "30", "--max-wait", "2")
    summary = assert_deadline(run, 2.0)
    assert int(summary["reads"]) == len(read_lines(run)) >= fewest_reads(run, 3)
    assert connections_fit(srv.connections, read_lines(run)), run.stderr


@pytest.mark.reads
def test_linger_holds_after_confirmation(hook: Hook) -> None:
    with Loopback(serve(IDLE)) as srv:
        run = wait(hook, srv.url, "--linger", "0.4")
    assert_drained(run, reads=2)
    assert run.elapsed >= SETTLE + INTERVAL / 4 + 0.4 - TICK  # the server's zero: I/4
    assert srv.connections == 2


@pytest.mark.reads
def test_linger_is_clipped_to_the_deadline(hook: Hook) -> None:
    with Loopback(serve(IDLE)) as srv:
        run = wait(hook, srv.url, "--linger", "30", deadline=DEADLINE_SHORT)
    summary = assert_drained(run, reads=2)
    assert D_SHORT - 0.1 <= run.elapsed <= late(D_SHORT, SPAWN_LATE, run.starved)
    assert float(summary["elapsed"]) >= D_SHORT - EXIT_ALLOWANCE
    assert srv.connections == 2


@pytest.mark.parametrize(
    ("grace", "reserve", "d"),
    [
        pytest.param("1", "1", 0.0, id="D-is-zero"),
        pytest.param("1", "0.5", 0.5, id="D-before-settle-ends"),
    ],
)
def test_no_read_when_the_deadline_comes_before_the_settle_ends(
    hook: Hook, grace: str, reserve: str, d: float
) -> None:
    with Loopback(serve(IDLE)) as srv:
        run = hook(
            "wait", "--url", srv.url, "--grace", grace, "--exit-reserve", reserve,
            "--settle", "2", "--interval", "0.1",
        )  # fmt: skip
    summary = assert_deadline(run, d)  # the whole run is mostly interpreter start-up
    assert summary["reads"] == "0"
    assert summary["in_flight"] == "-"
    assert srv.connections == 0


# ---- exit codes and log lines ---------------------------------------------------


@pytest.mark.reads
def test_exit_zero_maps_deadline_to_zero(hook: Hook) -> None:
    with Loopback(serve(BUSY)) as srv:
        run = wait(hook, srv.url, "--exit-zero", deadline=DEADLINE_SHORT)
    assert run.code == 0, run.stderr
    summary = fields(run.summary)
    assert (summary["outcome"], summary["exit"]) == ("deadline", "0")
    assert int(summary["reads"]) == len(read_lines(run)) >= fewest_reads(run, 3)
    assert connections_fit(srv.connections, read_lines(run)), run.stderr
    assert D_SHORT - 0.1 <= run.elapsed <= late(D_SHORT, SPAWN_LATE, run.starved)


def test_exit_zero_maps_unreachable_to_zero(hook: Hook) -> None:
    run = hook("wait", "--url", f"http://127.0.0.1:{free_port()}/", *TIMELINE, "--exit-zero")
    assert run.code == 0, run.stderr
    summary = fields(run.summary)
    assert (summary["outcome"], summary["exit"], summary["reads"]) == ("unreachable", "0", "1")


@pytest.mark.reads
def test_json_log_format(hook: Hook) -> None:
    with Loopback(sequence(serve(BUSY), serve(IDLE))) as srv:
        run = wait(hook, srv.url, "--log-format", "json")
    assert run.code == 0, run.stderr
    events = [json.loads(line) for line in hook_lines(run.lines)]
    assert len(events) < len(run.lines) and all(json.loads(line) for line in run.lines)
    reads = [e for e in events if e["event"] == "read"]
    summaries = [e for e in events if e["event"] == "summary"]
    assert len(reads) + len(summaries) == len(events)
    assert [(e["read"], e["verdict"], e["in_flight"]) for e in reads] == [
        (1, "busy", 6),
        (2, "idle", 0),
        (3, "idle", 0),
    ]
    assert all(e["t"] >= SETTLE and e["read_ms"] >= 0 for e in reads)
    assert len(summaries) == 1
    summary = summaries[0]
    assert {"outcome", "elapsed", "reads", "in_flight", "reason", "exit"} <= summary.keys()
    assert summary["outcome"] == "drained"
    assert summary["reads"] == 3 == srv.connections
    assert summary["in_flight"] == 0
    assert summary["reason"] is None
    assert summary["exit"] == 0
    # From the process start, which the kernel records in whole ticks.
    # busy, idle, then the confirming read I/4 later (the server's own zero).
    assert SETTLE + INTERVAL + INTERVAL / 4 <= summary["elapsed"] <= late(run.elapsed, TICK)


def wall(at: str) -> float:
    """A line's time of day (`2026-12-06T04:41:10.123Z`) as seconds since the epoch."""
    return datetime.datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()


@pytest.mark.reads
def test_the_start_line_says_the_timeline_and_every_line_its_time_of_day(hook: Hook) -> None:
    """No --grace: the start line marks G's default (30 s, so D = 25 s) and says D as a
    time of day; every line has one, in order; each read line says the time left."""
    before = time.time()
    with Loopback(sequence(serve(BUSY), serve(IDLE))) as srv:
        run, url = hook("wait", "--url", srv.url, *TIMELINE), srv.url
    after = time.time()
    assert run.code == 0, run.stderr
    assert run.lines[-2].startswith("drainhook: drained in ")  # the ending in words
    start, *rest = [fields(line) for line in run.lines if not end_line(line)]
    assert start_line(run.lines[0]) and start["start"] == "0"
    got = {k: start[k] for k in ("target", "engine", "grace", "grace_from", "deadline")}
    assert got == {"target": url, "engine": "auto", "grace": "30", "grace_from": "default",
                   "deadline": "25"}  # fmt: skip
    assert (start["settle"], start["interval"], start["exit_reserve"]) == ("0.2", "0.1", "5")
    # The start line's time of day is t = 0's (the process start, in whole ticks); D is
    # 25 s after it; the other lines follow in order, written as they happen.
    assert wall(start["deadline_at"]) - wall(start["at"]) == pytest.approx(25, abs=0.0011)
    times = [wall(f["at"]) for f in (start, *rest)]
    assert times == sorted(times) and before - TICK <= times[0] and times[-1] <= after
    reads = [f for f in rest if "read" in f]
    assert len(reads) == 3 and all(
        float(f["left"]) == pytest.approx(25 - float(f["t"]), abs=0.0011) for f in reads
    )


@pytest.mark.parametrize("given", ["flag", "variable"])
def test_a_grace_given_is_not_marked_default_and_json_names_drainhook(
    hook: Hook, given: str
) -> None:
    flag = ("--grace", "2.5") if given == "flag" else ()
    env = {"DRAINHOOK_GRACE": "2.5"} if given == "variable" else {}
    with Loopback(serve(IDLE)) as srv:
        run = hook("wait", "--url", srv.url, *TIMELINE, *flag, "--exit-reserve", "0.5",
                   "--log-format", "json", env=env)  # fmt: skip
    assert run.code == 0, run.stderr
    lines = [json.loads(line) for line in run.lines]
    assert all(e["logger"] == "drainhook" and wall(e["time"]) for e in lines)
    start = lines[0]
    assert (start["event"], start["grace"], start["deadline"]) == ("start", 2.5, 2)
    assert start["grace_from"] is None  # given, so no mark


def test_json_summary_of_a_failure_carries_the_reason(hook: Hook) -> None:
    run = hook(
        "wait", "--url", f"http://127.0.0.1:{free_port()}/", *TIMELINE, "--log-format", "json"
    )
    assert run.code == 4
    events = [json.loads(line) for line in hook_lines(run.lines)]
    assert [e["event"] for e in events] == ["read", "summary"]
    summary = events[-1]
    assert (summary["outcome"], summary["exit"], summary["reads"]) == ("unreachable", 4, 1)
    assert summary["in_flight"] is None
    assert "refused" in summary["reason"]


def test_quiet_prints_only_the_sentence_and_the_summary(hook: Hook) -> None:
    with Loopback(sequence(serve(BUSY), serve(IDLE))) as srv:
        run = wait(hook, srv.url, "--quiet")
    assert run.code == 0
    assert len(run.lines) == 2 and run.lines[0].startswith("drainhook: drained in ")
    assert fields(run.lines[1])["outcome"] == "drained"
    assert fields(run.lines[1])["reads"] == "3"
    assert srv.connections == 3


@pytest.mark.reads
def test_log_file_gets_the_same_lines(hook: Hook, tmp_path: Path) -> None:
    log = tmp_path / "hook.log"
    with Loopback(sequence(serve(BUSY), serve(IDLE))) as srv:
        run = wait(hook, srv.url, "--log-file", str(log))
    assert run.code == 0
    assert len(hook_lines(run.lines)) == 4  # three reads, one summary
    assert log.read_text().splitlines() == run.lines


@pytest.mark.reads
def test_an_unwritable_log_file_is_reported_once_and_the_hook_goes_on(
    hook: Hook, tmp_path: Path
) -> None:
    log = tmp_path / "missing" / "hook.log"
    with Loopback(serve(IDLE)) as srv:
        run = wait(hook, srv.url, "--log-file", str(log))
    assert_drained(run, reads=2)
    assert srv.connections == 2
    warnings = [line for line in run.lines if "--log-file" in line]
    assert len(warnings) == 1, run.stderr
    assert str(log) in warnings[0]
    assert len(hook_lines(run.lines)) == 4  # the warning, two reads, the summary
    assert not log.parent.exists()


@pytest.mark.reads
def test_a_log_file_fifo_nobody_reads_does_not_block(hook: Hook, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with Loopback(serve(IDLE)) as srv:
        run = wait(hook, srv.url, "--log-file", str(fifo))
    assert_drained(run, reads=2)
    assert srv.connections == 2
    assert len([line for line in run.lines if "--log-file" in line]) == 1


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_url_userinfo_is_sent_but_never_shown(hook: Hook, tmp_path: Path, log_format: str) -> None:
    heads: list[bytes] = []
    log = tmp_path / "hook.log"
    with Loopback(route({"/metrics": IDLE}, heads)) as srv:
        shown_url = srv.url
        url = shown_url.replace("://", "://scraper:s3cr3t-token@")
        run = wait(hook, url, "--log-format", log_format, "--log-file", str(log))
    assert run.code == 0, run.stderr
    assert srv.connections == 2
    assert all(b"\r\nauthorization: basic " in head.lower() for head in heads)  # sent
    shown = run.stdout + run.stderr + log.read_text()
    assert shown_url in shown  # the target, without userinfo
    for secret in ("s3cr3t", "scraper", "@127.0.0.1"):
        assert secret not in shown


# ---- release at the floor (CONTRACT §1) ---------------------------------------------


@pytest.mark.parametrize("phase", [0.0, 0.25, 0.5, 0.75])
def test_release_within_half_an_interval_of_the_engine_going_idle(hook: Hook, phase: float) -> None:
    """The last request ends at S + 2I + phase x I from the hook's spawn (I = 0.4 s,
    D = 2.5 s); the connection signal answers every idle read. The reads come every
    I/4 while the count is 1, the first idle one within I/4 of the end, the
    confirming one I/4 after it: the release (the confirming read's arrival) at
    most I/2 + 0.05 s after the end, and never before two idle reads."""
    interval, settle = 0.4, 0.2
    one = b"vllm:num_requests_running 1\nvllm:num_requests_waiting 0\n"
    arrivals: list[tuple[float, bytes]] = []
    idle_at: list[float] = []

    def engine(conn: socket.socket) -> None:
        read_request(conn)
        now = time.monotonic()
        body = one if now < idle_at[0] else IDLE
        arrivals.append((now, body))
        conn.sendall(response_bytes(body))

    with Loopback(engine) as srv:
        idle_at.append(time.monotonic() + settle + 2 * interval + phase * interval / 4)
        timeline = ("--settle", str(settle), "--interval", str(interval))
        run = hook("wait", "--url", srv.url, *timeline, "--grace", "3", "--exit-reserve", "0.5")
    assert_drained_at_the_floor(run, arrivals, idle_at[0], interval)


def assert_drained_at_the_floor(
    run: Run, arrivals: list[tuple[float, bytes]], idle: float, interval: float
) -> None:
    assert run.code == 0, run.stderr
    bodies = [body for _, body in arrivals]
    assert bodies[-2:] == [IDLE, IDLE] and bodies[-3] != IDLE, run.stderr  # exactly two
    first, confirming = arrivals[-2][0], arrivals[-1][0]
    assert idle <= first <= late(idle + interval / 4, WAKE_LATE, run.starved), run.stderr
    assert confirming - first >= interval / 4 - 0.005  # the quick step, no quicker
    release = confirming - idle
    assert release <= late(interval / 2 + 0.05, WAKE_LATE, run.starved), (release, run.stderr)
    print(f"released {release * 1000:.0f} ms after the engine went idle")
