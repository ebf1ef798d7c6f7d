"""The signals of one read and how they combine (CONTRACT §2a, §2b): SGLang's
`sglang:http_requests_active` in the /metrics scan, over the endpoints that
carry work; the server's count kept when /v1/loads stands in for the gauges;
several targets' signals summed; and the stall rule, which counts the
scheduler's work only.

Each case is built so that the bug it guards against gives another answer: an
endpoint list that leaves out too much (or too little) counts differently, a
sum of the signals differs from their max, a stall rule that counts the
server's work opens a window where none may open.
"""

from __future__ import annotations

import json

import pytest

from drainhook.engines.exposition import scan
from drainhook.engines.gauges import BY_NAME, SGLANG_NOT_WORK
from drainhook.engines.verdict import Progress, Reading, Series, Signals, Verdict, with_signals
from drainhook.hook.stall import StallWatch
from drainhook.reading.rounds import combine_readings
from drainhook.reading.sources import EngineReader
from tests.support.loopback import sample

IDLE, BUSY, UNKNOWN = Verdict.IDLE, Verdict.BUSY, Verdict.UNKNOWN
SGLANG_IDLE = ("sglang:num_running_reqs 0", "sglang:num_queue_reqs 0")
ACTIVE = "sglang:http_requests_active"


def body(*lines: str) -> bytes:
    return "".join(line + "\n" for line in lines).encode()


def active(endpoint: str, value: float, method: str = "POST", name: str = ACTIVE) -> str:
    return f'{name}{{endpoint="{endpoint}",method="{method}"}} {value}'


# ---- SGLang's http_requests_active in the scan ----------------------------------


def test_the_server_only_sample_is_busy_with_the_servers_request() -> None:
    got = scan(sample("sglang-mp-dp2-server-only.txt"))
    assert (got.verdict, got.in_flight) == (BUSY, 1.0)
    assert got.signals == Signals(scheduler=0.0, server=1.0)
    assert sum(s.value for s in got.series) == 0  # the scheduler's gauges read 0


def test_the_count_is_the_larger_signal_not_their_sum() -> None:
    got = scan(sample("sglang-mp-dp2.txt"))  # scheduler 6, one POST in the server
    assert got.signals == Signals(scheduler=6.0, server=1.0)
    assert got.in_flight == 6.0


@pytest.mark.parametrize("endpoint", sorted(SGLANG_NOT_WORK))
def test_the_engines_own_read_only_endpoints_are_not_work(endpoint: str) -> None:
    """The hook's own scrape, the kubelet's probes, the load and info routes."""
    got = scan(body(*SGLANG_IDLE, active(endpoint, 3, "GET")))
    assert (got.verdict, got.in_flight) == (IDLE, 0.0)
    assert got.signals == Signals(scheduler=0.0, server=0.0)


@pytest.mark.parametrize(
    "endpoint",
    ["/v1/chat/completions", "/generate", "/v1/responses", "/encode", "/some/new/route"],
)
def test_every_other_endpoint_carries_work(endpoint: str) -> None:
    """An endpoint the list does not name counts: a new route, or a path no route
    matched, is never left out for being unknown."""
    lines = (*SGLANG_IDLE, active("/metrics", 1, "GET"), active(endpoint, 2))
    got = scan(body(*lines, active("/health", 1, "GET")))
    assert (got.verdict, got.in_flight) == (BUSY, 2.0)
    assert got.signals is not None and got.signals.server == 2.0


def test_the_server_count_sums_its_series_and_takes_the_underscore_spelling() -> None:
    lines = (
        "sglang_num_running_reqs 0",
        "sglang_num_queue_reqs 0",
        active("/v1/completions", 1, name="sglang_http_requests_active"),
        active("/v1/chat/completions", 2, name="sglang_http_requests_active"),
        "# TYPE sglang_http_requests_active gauge",
    )
    got = scan(body(*lines))
    assert (got.verdict, got.in_flight) == (BUSY, 3.0)


@pytest.mark.parametrize(("value", "why"), [("-1", "negative"), ("NaN", "nan"), ("+Inf", "inf")])
def test_a_server_count_that_is_not_a_count_is_doubt(value: str, why: str) -> None:
    got = scan(body("sglang:num_running_reqs 2", "sglang:num_queue_reqs 0", active("/x", value)))
    assert (got.verdict, got.in_flight) == (UNKNOWN, None)
    assert got.reason is not None and why in got.reason.lower()


def test_a_malformed_server_count_line_is_doubt() -> None:
    got = scan(body(*SGLANG_IDLE, ACTIVE + '{endpoint="/x" 1'))
    assert got.verdict is UNKNOWN and got.reason is not None
    assert "malformed sglang:http_requests_active line" in got.reason


def test_an_sglang_without_the_gauge_has_the_server_signal_missing() -> None:
    got = scan(sample("sglang-mp-pd-prefill-priority-idle.txt"))
    assert (got.verdict, got.in_flight) == (IDLE, 0.0)
    assert got.signals is not None
    assert got.signals.server is None
    assert [name for name, _ in got.signals.missing] == ["server"]
    assert got.warnings == ()  # missing is no warning: it is said once, by name


def test_the_gauge_is_read_with_the_progress_counters_off_and_pinned() -> None:
    got = scan(body(*SGLANG_IDLE, active("/generate", 1)), "sglang", progress=False)
    assert (got.verdict, got.in_flight) == (BUSY, 1.0)
    got = scan(body(*SGLANG_IDLE, active("/generate", 1)), "vllm")  # the other engine's
    assert got.verdict is UNKNOWN


def test_vllm_has_no_server_gauge_in_metrics() -> None:
    assert BY_NAME["vllm"].server is None
    got = scan(sample("vllm-http-plain-idle.txt"))
    assert got.signals == Signals(scheduler=0.0)


# ---- the rule itself -------------------------------------------------------------


@pytest.mark.parametrize(
    ("signals", "verdict", "total", "holding"),
    [
        (Signals(0.0, 0.0, 0.0), IDLE, 0.0, ()),
        (Signals(0.0, None, None), IDLE, 0.0, ()),
        (Signals(0.0, 1.0, None), BUSY, 1.0, ("server",)),
        (Signals(0.0, None, 1.0), BUSY, 1.0, ("connections",)),
        (Signals(3.0, 1.0, 2.0), BUSY, 3.0, ("scheduler", "server", "connections")),
        (Signals(1.0, 4.0, 0.0), BUSY, 4.0, ("scheduler", "server")),
    ],
)
def test_idle_only_when_every_signal_answered_reads_zero(
    signals: Signals, verdict: Verdict, total: float, holding: tuple[str, ...]
) -> None:
    base = Reading(IDLE, "vllm", 0.0, (), None, 1.0)
    got = with_signals(base, signals)
    assert (got.verdict, got.in_flight) == (verdict, total)
    assert signals.holding() == holding
    assert got.scheduler == signals.scheduler


def test_doubt_stays_doubt_whatever_the_signals_read() -> None:
    doubt = Reading.failed(UNKNOWN, "read timed out", 1.0)
    got = with_signals(doubt, Signals(0.0, 0.0, 0.0))
    assert (got.verdict, got.in_flight, got.reason) == (UNKNOWN, None, "read timed out")


def test_several_targets_sum_each_signal() -> None:
    def part(scheduler: float, server: float | None) -> Reading:
        series = (Series("sglang:num_queue_reqs", (("dp_rank", str(scheduler)),), scheduler),)
        plain = Reading(IDLE, "sglang", scheduler, series, None, 1.0)
        return with_signals(plain, Signals(scheduler, server))

    got = combine_readings([("a", part(0.0, 1.0)), ("b", part(2.0, 0.0))], answered={"a", "b"})
    assert got.signals is not None
    assert (got.signals.scheduler, got.signals.server) == (2.0, 1.0)
    assert (got.verdict, got.in_flight) == (BUSY, 2.0)
    got = combine_readings([("a", part(0.0, 1.0)), ("b", part(0.0, 2.0))], answered={"a", "b"})
    assert (got.verdict, got.in_flight) == (BUSY, 3.0)


# ---- /v1/loads stands in for the gauges only -------------------------------------


class _Fixed:
    def __init__(self, name: str, reading: Reading) -> None:
        self.name = name
        self._reading = reading
        self.reads = 0

    def read(self, timeout: float) -> Reading:
        self.reads += 1
        return self._reading

    def close(self) -> None:
        pass


def _loads(running: int) -> Reading:
    from drainhook.engines.loads import scan_loads

    entry = {"dp_rank": 0, "num_running_reqs": running, "num_waiting_reqs": 0}
    return Reading.from_scan(scan_loads(json.dumps({"loads": [entry]}).encode()), 1.0, "loads")


def test_the_servers_count_stands_beside_a_counted_v1_loads() -> None:
    metrics = Reading.from_scan(scan(sample("sglang-mp-dp2-server-only.txt")), 1.0, "metrics")
    reader = EngineReader(_Fixed("m", metrics), sides={"/v1/loads": lambda: _Fixed("l", _loads(0))})
    got = reader.read(1.0)
    assert got.source == "loads"
    assert got.signals is not None and (got.signals.scheduler, got.signals.server) == (0.0, 1.0)
    assert (got.verdict, got.in_flight) == (BUSY, 1.0)
    idle = Reading.from_scan(scan(sample("sglang-mp-dp2-idle.txt")), 1.0, "metrics")
    got = EngineReader(_Fixed("m", idle), sides={"/v1/loads": lambda: _Fixed("l", _loads(2))}).read(
        1.0
    )
    assert (got.verdict, got.in_flight) == (BUSY, 2.0)
    got = EngineReader(_Fixed("m", idle), sides={"/v1/loads": lambda: _Fixed("l", _loads(0))}).read(
        1.0
    )
    assert (got.verdict, got.in_flight) == (IDLE, 0.0)


# ---- the stall rule counts the scheduler's work only (CONTRACT §2b) ---------------

COUNTERS = (Series("vllm:generation_tokens_total", (), 100.0),)


def reading(scheduler: float, server: float | None = None, conns: float | None = None) -> Reading:
    plain = Reading(IDLE, "vllm", scheduler, (), None, 1.0, progress=Progress(COUNTERS))
    return with_signals(plain, Signals(scheduler, server, conns))


def test_work_only_the_server_or_the_connections_see_never_stalls() -> None:
    watch = StallWatch(10.0)
    reads = [reading(0.0, 1.0, 1.0) for _ in range(30)]
    assert all(r.verdict is BUSY for r in reads)
    assert [watch.observe(5.0 + i, r) for i, r in enumerate(reads)] == [None] * 30


def test_frozen_scheduler_work_stalls_beside_an_upload() -> None:
    """The scheduler's work frozen W: stalled, though a connection is still uploading
    (it would go to the frozen engine); the frozen work named is the scheduler's."""
    watch = StallWatch(10.0)
    found = [watch.observe(5.0 + i, reading(2.0, None, 3.0)) for i in range(12)]
    assert found[:10] == [None] * 10
    stall = found[10]
    assert stall is not None and stall.work == 2.0 and stall.in_flight == 3.0


def test_the_termination_message_names_the_signals_that_saw_the_work() -> None:
    from drainhook.hook.drain import Outcome, Result
    from drainhook.hook.termination import message

    held = reading(0.0, 1.0, 2.0)
    text = message(Result(Outcome.DEADLINE, 25.0, 20, held))
    assert "2 requests still in flight at SIGTERM (seen by: server, connections)" in text
    plain = reading(3.0)
    assert "3 requests still in flight at SIGTERM;" in message(
        Result(Outcome.DEADLINE, 25.0, 20, plain)
    )
