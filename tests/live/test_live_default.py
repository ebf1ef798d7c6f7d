"""drainhook against a live vLLM in its default mode (`--shutdown-timeout 0`).

One engine, the cases in order: probe's count under 0, 1 and 3 streams; the
first idle read after the last byte; `wait` released after two streams with
both complete; `plan --observe` on the histogram those requests filled; and
last SIGTERM right after `wait` returns (the conformance episode
`idle-sigterm`), which ends the engine.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.conftest import READ_LATE, late
from tests.live.conftest import Hook, wait_for
from tests.live.engine import LONGEST, LiveVllm
from tests.live.streams import Streams, assert_complete, gauges, probe
from tests.support import conformance
from tests.support.process import run_delay

pytestmark = pytest.mark.live

SETTLE = 2.0  # `wait --settle` of the release case


@pytest.fixture(scope="module")
def engine(start_engine: Callable[..., Any]) -> Iterator[LiveVllm]:
    with start_engine("default") as live:
        yield live


def test_probe_counts_what_the_engine_runs(hook: Hook, engine: LiveVllm, record: Any) -> None:
    """probe's verdict and count under 0, 1 and 3 streams equal the engine's running +
    waiting (vllm:num_requests_waiting_by_reason is on the page, never counted).

    The streams are as long as the model's context allows, far longer than the case,
    and their clients close them at its end, so the engine's count cannot change while
    a probe starts and reads (a CI run saw an 8 s stream end inside one probe's
    start-up); the gauges read after each probe show it did not."""
    code, idle = probe(hook, engine)
    assert (code, idle["verdict"], idle["in_flight"], idle["engine"]) == (0, "idle", 0, "vllm")
    streams = Streams(engine)
    long = LONGEST / engine.rate  # s: 30-35 here, and closed after a few
    streams.send(long)
    wait_for(lambda: gauges(engine) == (1, 0), 10, "one running request")
    code, one = probe(hook, engine)
    assert gauges(engine) == (1, 0)
    assert (code, one["verdict"], one["in_flight"]) == (1, "busy", 1)
    streams.send(long)
    streams.send(long)
    wait_for(lambda: gauges(engine) == (3, 0), 10, "three running requests")
    code, three = probe(hook, engine)
    assert gauges(engine) == (3, 0)
    assert (code, three["verdict"], three["in_flight"]) == (1, "busy", 3)
    names = {s["name"] for s in three["series"]}
    assert names == {"vllm:num_requests_running", "vllm:num_requests_waiting"}
    for s in streams.close():
        assert (s.finish, s.detail) == (None, "closed by the client"), s  # still running
    wait_for(lambda: gauges(engine) == (0, 0), 10, "the closed requests aborted")
    code, after = probe(hook, engine)
    assert (code, after["verdict"], after["in_flight"]) == (0, "idle", 0)
    record(
        "probe 0/1/3 streams",
        in_flight=[idle["in_flight"], one["in_flight"], three["in_flight"]],
        read_ms=[p["read_ms"] for p in (idle, one, three, after)],
    )


def _reads(stderr: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("event") == "read"]


def test_idle_detected_within_0_2_s_of_the_last_byte(
    spawn_hook: Callable[..., Any], engine: LiveVllm, record: Any
) -> None:
    """`wait` polling every 50 ms: every read while the stream ran is busy, and the
    first idle read ends within 0.2 s of the stream's last byte."""
    streams = Streams(engine)
    stream = streams.send(3.0)
    wait_for(lambda: gauges(engine) == (1, 0), 10, "one running request")
    args = ["wait", "--url", engine.url(), "--settle", "0", "--interval", "0.05"]
    args += ["--grace", "30", "--log-format", "json", "--termination-log", ""]
    before = run_delay()
    spawned = time.monotonic()
    proc = spawn_hook(*args)
    _, stderr = proc.communicate(timeout=60)
    starved = run_delay() - before
    assert_complete(streams.join())
    assert proc.returncode == 0, stderr
    assert stream.last_byte is not None
    reads = _reads(stderr)
    ends = [(spawned + r["t"], r) for r in reads]  # a read's `t` is when it ended
    first_idle = next(at for at, r in ends if r["verdict"] == "idle")
    latency = first_idle - stream.last_byte
    busy_before = [r["verdict"] for at, r in ends if at < stream.last_byte]
    assert busy_before and set(busy_before) == {"busy"}, busy_before
    # Within one interval (50 ms) and one read, timed here.
    assert -0.05 <= latency <= late(0.05, READ_LATE, starved), (latency, reads)
    record(
        "idle detected after the last byte",
        latency_ms=round(latency * 1000, 1),
        interval_s=0.05,
        read_ms=[r["read_ms"] for r in reads][:5],
    )


def test_wait_releases_soon_after_the_last_stream_ends(
    hook: Hook, engine: LiveVllm, record: Any
) -> None:
    """`wait --grace 30 --settle 2` (I = 1 s) with two streams running: `drained`
    within I/2 + 0.05 s of the last stream's end, never before I/4 of it (the first
    idle read within I/4, read every I/4 once the first stream has ended; the
    confirming read I/4 later, the server's /load and the connections answering that
    zero: CONTRACT §1), both streams complete."""
    streams = Streams(engine)
    streams.send(5.0)
    streams.send(6.0)
    wait_for(lambda: gauges(engine) == (2, 0), 10, "two running requests")
    before = run_delay()
    run = hook("wait", "--url", engine.url(), "--grace", "30", "--settle", str(SETTLE))
    returned = time.monotonic()
    starved = run_delay() - before + run.starved
    ended = streams.join()
    assert_complete(ended)
    summary = run.stderr.strip().splitlines()[-1]
    assert run.code == 0 and "outcome=drained" in summary, run.stderr
    last = max(s.last_byte or 0.0 for s in ended)
    release = returned - last
    interval = 1.0
    # The contract's I/2 + 0.05 s, and a read's tolerance (the last byte is the
    # client's instant; the engine's count falls a moment after it).
    latest = late(interval / 2 + 0.05, READ_LATE, starved)
    assert interval / 4 - 0.05 <= release <= latest, (release, run.stderr)
    record(
        "wait released after the last stream",
        release_s=round(release, 3),
        starved_s=round(starved, 3),
        elapsed_s=round(run.elapsed, 3),
        tokens=[s.tokens for s in ended],
    )


def test_plan_observe_reads_the_live_histogram(hook: Hook, engine: LiveVllm, record: Any) -> None:
    """`plan --observe --grace 60` counts every request the engine finished and
    recommends G = ceil(S + the bound of the bucket holding p99.9 + R)."""
    samples = engine.metrics()
    finished = sum(
        v for k, v in samples.items() if k.startswith("vllm:e2e_request_latency_seconds_count{")
    )
    run = hook("plan", "--observe", "--grace", "60", "--url", engine.url(), "--output", "json")
    assert run.code == 0, run.stderr
    plan = json.loads(run.stdout)
    observed = plan["observed"]
    assert observed["requests"] == finished >= 6  # the warm-up and the cases above
    latency = observed["latency_s"]
    assert latency >= max(engine.durations)  # p99.9 of a few requests: the longest one's bucket
    assert plan["recommended_grace"] == max(15, math.ceil(5 + latency + 5))
    record(
        "plan --observe",
        requests=observed["requests"],
        latency_s=latency,
        recommended_grace=plan["recommended_grace"],
        longest_s=round(max(engine.durations), 3),
    )


def test_sigterm_right_after_wait_returns(hook: Hook, engine: LiveVllm, record: Any) -> None:
    """`wait` on the idle engine returns `drained`; SIGTERM at once: the listener
    closes and the process exits on its own (conformance episode `idle-sigterm`)."""
    run = hook("wait", "--url", engine.url(), "--grace", "30", "--settle", "0.5")
    assert run.code == 0, run.stderr
    episode = conformance.EPISODES["idle-sigterm"]
    seen = conformance.run(engine, episode)
    record("SIGTERM after wait (default mode)", **conformance.numbers(seen))
    assert conformance.mismatch(seen, episode) == [], conformance.summary(seen)
