"""drainhook against a live SGLang 0.5.23 (its CPU engine, the Python HTTP server).

One engine, the cases in order: probe's count; a lone short request the
scheduler's gauge never shows; a request being prefilled, held; two streams
drained, with the server's 2 s tail measured; a slow upload; the scheduler
frozen (SIGSTOP) called stalled, and a short freeze not; last, SIGTERM with
streams in flight and a new request during the drain (the conformance episode
`sglang-drain`), which ends the engine.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.conftest import READ_LATE, SPAWN_LATE, late
from tests.live.conftest import Hook, wait_for
from tests.live.streams import Streams, assert_complete
from tests.live_sglang.engine import LiveSglang
from tests.live_sglang.looks import (
    COMPLETIONS,
    GENERATE,
    Request,
    gauges,
    loads,
    long_prompt,
    reads,
)
from tests.support import conformance
from tests.support.process import base_env, run_delay

pytestmark = pytest.mark.live

TAIL = 2.0  # s: SGLang's abort task sleeps this long after a stream's last byte
WAIT = ("--grace", "30", "--log-format", "json", "--termination-log", "")


@pytest.fixture(scope="module")
def engine(start_engine: Callable[..., Any]) -> Iterator[LiveSglang]:
    with start_engine("default") as live:
        yield live


def probe(hook: Hook, engine: LiveSglang) -> tuple[int, dict[str, Any]]:
    run = hook("probe", "--json", "--url", engine.url())
    return run.code, json.loads(run.stdout)


def test_metrics_carry_the_scheduler_soon_after_the_listener_opens(
    engine: LiveSglang, record: Any
) -> None:
    """For a moment after its listener opens, SGLang's /metrics answers 200 with no
    scheduler series (a read then names no engine: doubt, never idle)."""
    assert engine.metrics_at is not None and engine.series_at is not None
    window = engine.series_at - engine.metrics_at
    assert 0 <= window <= 10, window
    record("sglang /metrics without scheduler series at start", window_s=round(window, 3))


def test_probe_counts_what_the_engine_runs(hook: Hook, engine: LiveSglang, record: Any) -> None:
    """Idle: 0. Two long streams: 2, from /v1/loads and the server's own count."""
    code, idle = probe(hook, engine)
    assert (code, idle["verdict"], idle["in_flight"], idle["engine"]) == (0, "idle", 0, "sglang")
    streams = Streams(engine)
    streams.send(30.0)
    streams.send(30.0)
    wait_for(lambda: loads(engine) == 2, 15, "two running requests")
    code, two = probe(hook, engine)
    assert (code, two["verdict"], two["in_flight"]) == (1, "busy", 2), two
    for s in streams.close():
        assert s.detail == "closed by the client", s
    wait_for(lambda: loads(engine) == 0 and engine.counted() == 0, 15, "the closed requests gone")
    record("sglang probe 0/2 streams", in_flight=[idle["in_flight"], two["in_flight"]])


def test_a_lone_short_request_is_held(spawn_hook: Any, engine: LiveSglang, record: Any) -> None:
    """A request of 35 tokens (under --decode-log-interval 40): the hook sees it busy,
    whatever sglang:num_running_reqs shows (recorded: the share of its life the gauge
    showed it), and its first idle read after that begins after the request's last byte.
    A read's start is known within [spawned, started] + t - read_ms: the hook's clock
    starts between its spawn and its first line (0.1 s apart here). The request is sent
    0.1 to 0.2 s before the first read, which may rightly read idle: on a fresh engine
    SGLang's server count missed its first request 0.2 s after it was sent (1 of 3
    runs; with I = 0.5 the confirming read, I/4 later, then released). With I = 2 it
    comes 0.5 s later. Every read surely inside the request's life from its first token
    on is busy.
    A hook that read the scheduler's gauges only would read idle throughout; one that
    released early would go idle before the last byte."""
    settle = 2.0
    proc = spawn_hook(
        "wait", "--url", engine.url(), "--settle", str(settle), "--interval", "2",
        "--log-reads", "all", *WAIT,
    )  # fmt: skip
    spawned = time.monotonic()
    assert proc.stderr is not None
    proc.stderr.readline()  # the start line: written at the hook's start
    started = time.monotonic()
    seen: list[float] = []
    time.sleep(max(0.0, started + settle - 0.2 - time.monotonic()))  # in flight at the first read
    request = Request(engine, COMPLETIONS, 35, "a lone short request")
    while request.out.ended is None:
        seen.append(gauges(engine)[0])
        time.sleep(0.02)
    _, stderr = proc.communicate(timeout=60)
    returned = time.monotonic()
    assert request.complete(), request.out
    assert proc.returncode == 0 and '"outcome": "drained"' in stderr, stderr
    last, headers = request.out.last_byte, request.headers
    assert last is not None and headers is not None  # /v1/completions: with the first token
    # Each read: its earliest and latest possible start (monotonic), and its verdict.
    starts = [(r["at"] - r["read_ms"] / 1000, r["verdict"]) for r in reads(stderr, spawned)]
    span = [(lo, lo + started - spawned, v) for lo, v in starts]
    timeline = (
        last - headers,
        started - spawned,
        [(round(lo - headers, 3), v) for lo, _, v in span],
    )
    assert any(v == "busy" and lo < last for lo, _, v in span), ("never busy", timeline)
    idle_at, _, verdict = span[max(i for i, (_, _, v) in enumerate(span) if v == "busy") + 1]
    assert verdict == "idle" and idle_at > last, ("idle too soon", timeline)
    inside = {v for lo, hi, v in span if headers <= lo and hi < last}
    assert inside <= {"busy"}, ("idle while it streamed", timeline)
    shown = sum(1 for v in seen if v > 0)
    record("sglang lone short request", gauge_samples=len(seen), gauge_showed=shown,
           release_s=round(returned - last, 3))  # fmt: skip


@pytest.mark.parametrize("path", [GENERATE, COMPLETIONS])
def test_a_request_being_prefilled_is_held(
    spawn_hook: Any, engine: LiveSglang, path: str, record: Any
) -> None:
    """A 1,800-token prompt sent 0.3 s before the hook's first read: while it is
    prefilled, the scheduler's gauges and /v1/loads read 0 and the server's count 1;
    every read until its first token is busy, and the hook returns after its last byte.
    /generate sends its headers at once, so the connection signal cannot see it;
    /v1/completions sends them with the first token, so it can."""
    settle = 2.0
    proc = spawn_hook(
        "wait", "--url", engine.url(), "--settle", str(settle), "--interval", "0.5", *WAIT
    )
    spawned = time.monotonic()
    time.sleep(max(0.0, spawned + settle - 0.3 - time.monotonic()))
    request = Request(engine, path, 40, long_prompt())
    _, stderr = proc.communicate(timeout=90)
    returned = time.monotonic()
    request.join()
    assert request.complete(), request.out
    assert proc.returncode == 0 and '"outcome": "drained"' in stderr, stderr
    assert request.first is not None and request.headers is not None
    assert request.out.last_byte is not None and returned > request.out.last_byte
    prefill = [r for r in reads(stderr, spawned) if r["at"] < request.first - 0.05]
    assert prefill, ("no read while the prompt was prefilled", request.first - spawned, stderr)
    assert {r["verdict"] for r in prefill} == {"busy"}, prefill
    assert {r["server"] for r in prefill} == {1}, prefill
    headers_first = request.headers < request.first - 0.5
    assert headers_first == (path == GENERATE), (request.headers, request.first)
    record(
        f"sglang prefill held ({path})",
        prefill_s=round(request.first - request.sent, 3),
        headers_s=round(request.headers - request.sent, 3),
        reads_in_prefill=[
            {k: r[k] for k in ("scheduler", "server", "connections")} for r in prefill
        ],
        release_s=round(returned - request.out.last_byte, 3),
    )


def test_streams_drained_and_the_tail(hook: Hook, engine: LiveSglang, record: Any) -> None:
    """`wait --grace 30 --settle 2` (I = 1 s) with two streams: both complete, and the
    hook returns within 2.5 s + 1.3 I of the last byte and not before the server's
    count of the stream falls, TAIL s after its last byte (measured here)."""
    streams = Streams(engine)
    streams.send(4.0)
    streams.send(6.0)
    wait_for(lambda: loads(engine) == 2, 15, "two running requests")
    falls: list[float] = []

    def watch() -> None:  # when the server's count last falls to 0
        while len(streams.ended) < 2 or any(s.ended is None for s in streams.ended):
            time.sleep(0.02)
        while engine.counted() > 0:
            time.sleep(0.02)
        falls.append(time.monotonic())

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    before = run_delay()
    run = hook("wait", "--url", engine.url(), "--grace", "30", "--settle", "2")
    returned = time.monotonic()
    starved = run_delay() - before + run.starved
    assert_complete(streams.join())
    watcher.join(30)
    assert run.code == 0 and "outcome=drained" in run.stderr, run.stderr
    last = max(s.last_byte or 0.0 for s in streams.ended)
    release, tail = returned - last, falls[0] - last
    assert TAIL - 0.1 <= tail <= late(TAIL + 0.5, READ_LATE, starved), tail
    assert returned >= falls[0] - 0.05, (release, tail)
    assert release <= late(2.5 + 1.3 * 1.0, READ_LATE, starved), (release, run.stderr)
    record("sglang streams drained", release_s=round(release, 3), tail_s=round(tail, 3),
           starved_s=round(starved, 3))  # fmt: skip


@pytest.mark.timeout(300)
def test_an_uploading_request_is_held_until_its_stream_ends(
    drainhook: list[str], engine: LiveSglang, record: Any
) -> None:
    """The window episode (conformance.run_upload): mid-upload only the server's count
    (up before the body is read) and the connection see the request; probe says busy;
    the hook returns after the stream's last byte, within 2I + 0.3 s + the tail."""
    seen = conformance.run_upload(engine, drainhook, base_env())
    numbers = conformance.upload_numbers(seen)
    record("sglang upload while the hook starts", **numbers)
    probe = seen.probe or {}
    held = probe.get("signals") or {}
    # The upload is the server's count and a connection; the scheduler has none. The
    # `wait` running beside the probe may have a read of its own connected to the port
    # at that instant: for the probe, another process's connection (2 seen once).
    assert probe.get("verdict") == "busy" and held.get("scheduler") == 0, numbers
    assert held.get("server") == 1 and held.get("connections") in (1, 2), numbers
    assert probe.get("in_flight") == held.get("connections"), numbers
    assert seen.stream.kind == "complete" or (seen.stream.done and seen.stream.finish == "length")
    assert seen.hook_code == 0 and '"outcome": "drained"' in seen.hook_stderr, seen.hook_stderr
    assert seen.last_byte is not None and seen.hook_returned is not None
    release = seen.hook_returned - seen.last_byte
    assert 0 < release <= late(2 * 0.5 + 0.3 + TAIL + 0.3, SPAWN_LATE, seen.starved), numbers


def _frozen_wait(hook: Hook, engine: LiveSglang, freeze: float, thaw: float | None) -> Any:
    """`wait --stall-after 5` (G 20, R 2, S 0, I 0.5) with one long stream, the
    scheduler SIGSTOPped `freeze` s after the hook's start and SIGCONTed `thaw` s
    later (None: left frozen until the hook returns)."""
    streams = Streams(engine)
    streams.send(30.0)
    wait_for(lambda: loads(engine) == 1, 15, "one running request")
    scheduler = engine.scheduler()
    args = ["wait", "--url", engine.url(), "--grace", "20", "--exit-reserve", "2"]
    args += ["--settle", "0", "--interval", "0.5", "--stall-after", "5", "--termination-log", ""]
    done: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: done.update(run=hook(*args)))
    start = time.monotonic()
    thread.start()
    time.sleep(freeze)
    os.kill(scheduler, signal.SIGSTOP)
    frozen = time.monotonic()
    try:
        if thaw is not None:
            time.sleep(thaw)
            os.kill(scheduler, signal.SIGCONT)
            streams.close()
        thread.join(60)
    finally:
        os.kill(scheduler, signal.SIGCONT)
        streams.close()
    wait_for(lambda: loads(engine) == 0 and engine.counted() == 0, 30, "the engine idle again")
    return done["run"], frozen - start


def test_a_frozen_scheduler_is_stalled_and_a_thawed_one_is_not(
    hook: Hook, engine: LiveSglang, record: Any
) -> None:
    """SIGSTOP the scheduler with a stream in flight: `stalled` (exit 5) within W + I
    of the freeze. A 1.5 s freeze, thawed well inside W: the stream is closed by its
    client after the thaw and the hook drains (exit 0), never `stalled`."""
    run, frozen_at = _frozen_wait(hook, engine, 1.0, None)
    summary = run.stderr.strip().splitlines()[-1]
    assert run.code == 5 and "outcome=stalled" in summary, run.stderr
    after = run.elapsed - frozen_at
    assert 5.0 - 0.5 <= after <= late(5.0 + 0.5 + 0.5, READ_LATE, run.starved), run.stderr
    thawed, _ = _frozen_wait(hook, engine, 1.0, 1.5)
    assert thawed.code == 0 and "outcome=drained" in thawed.stderr, thawed.stderr
    record("sglang frozen scheduler", stalled_after_freeze_s=round(after, 3),
           thawed_exit=thawed.code)  # fmt: skip


def test_sigterm_with_streams_in_flight(engine: LiveSglang, record: Any) -> None:
    """SIGTERM 1 s into a 3 s and a 6 s stream, a new request 1 s later: /health 503,
    /metrics 200, every stream and the new request complete, and the process exits
    on its own (the conformance episode `sglang-drain`). Ends the engine."""
    episode = conformance.EPISODES["sglang-drain"]
    seen = conformance.run(engine, episode)
    ends = [e for e in seen.stream_ends if e is not None]
    numbers = conformance.numbers(seen)
    if seen.exit is not None and ends:
        numbers["exit_after_last_s"] = round(seen.exit - max(ends), 3)
    record("sglang SIGTERM with streams in flight", **numbers)
    assert conformance.mismatch(seen, episode) == [], conformance.summary(seen)
