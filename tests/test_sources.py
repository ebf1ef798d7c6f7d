"""SGLang's live count (`--source auto`, the default; drainhook.reading.sources): /metrics,
and /v1/loads on the same listener when the body is SGLang's.

First the rules with scripted readers and a fake clock (no waiting); then the
hook end to end against real loopback servers whose /metrics and /v1/loads
answer per path, counting the requests each path saw.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from drainhook.engines.loads import scan_loads
from drainhook.engines.verdict import Reading, Series, Verdict, engine_shown
from drainhook.reading.sources import STALE_METRICS, EngineReader
from tests.conftest import HOOK_LATE, SPAWN_LATE, late
from tests.support.logs import fields, hook_lines
from tests.support.loopback import Behaviour, Loopback, read_request, response_bytes
from tests.support.process import Hook, Run

SAMPLES = Path(__file__).resolve().parent / "samples"
STALE = (SAMPLES / "sglang-all-schedulers-tp4.txt").read_bytes()  # /metrics still says 6
SGLANG_IDLE = (SAMPLES / "sglang-pre05-model-name-idle.txt").read_bytes()
VLLM_IDLE = (SAMPLES / "vllm-external-lb-rank3-idle.txt").read_bytes()


def loads(*ranks: tuple[int, int]) -> bytes:
    entries = [
        {"dp_rank": i, "num_running_reqs": run, "num_waiting_reqs": wait}
        for i, (run, wait) in enumerate(ranks)
    ]
    return json.dumps({"loads": entries}).encode()


# ---- the rules, with scripted readers ----------------------------------------------


def sglang(total: float) -> Reading:
    series = (Series("sglang:num_running_reqs", (("tp_rank", "0"),), total),)
    verdict = Verdict.BUSY if total else Verdict.IDLE
    return Reading(verdict, "sglang", total, series, None, 3.0, source="metrics")


def vllm(total: float) -> Reading:
    series = (Series("vllm:num_requests_running", (("engine", "0"),), total),)
    verdict = Verdict.BUSY if total else Verdict.IDLE
    return Reading(verdict, "vllm", total, series, None, 3.0, source="metrics")


def live(total: float) -> Reading:
    series = (Series("num_running_reqs", (("dp_rank", "0"),), total),)
    verdict = Verdict.BUSY if total else Verdict.IDLE
    return Reading(verdict, "sglang", total, series, None, 1.0, source="loads")


def failed(verdict: Verdict, reason: str, status: int | None = None) -> Reading:
    return Reading.failed(verdict, reason, 1.0, source="loads", status=status)


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


class Scripted:
    """A reader that takes `takes` fake seconds and gives its readings in turn."""

    def __init__(self, clock: Clock, readings: Sequence[Reading], takes: float = 0.0) -> None:
        self.clock = clock
        self.takes = takes
        self.timeouts: list[float] = []
        self.name = "http://127.0.0.1:30000/metrics"

        self.readings = list(readings)

    def read(self, timeout: float) -> Reading:
        self.timeouts.append(timeout)
        self.clock.now += min(self.takes, timeout)
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]

    def close(self) -> None:
        pass


def auto(
    metrics: list[Reading],
    live_: Sequence[Reading],
    *,
    takes: float = 0.0,
    engine: str = "auto",
) -> tuple[EngineReader, Scripted, Scripted]:
    clock = Clock()
    m, lo = Scripted(clock, metrics, takes), Scripted(clock, live_)
    reader = EngineReader(m, sides={"/v1/loads": lambda: lo}, engine=engine, clock=clock)  # type: ignore[dict-item]
    return reader, m, lo


def test_a_valid_loads_body_is_counted_instead_within_the_same_timeout() -> None:
    reader, metrics, live_reader = auto([sglang(6)], [live(0)], takes=0.3)
    reading = reader.read(1.0)
    assert metrics.timeouts == [1.0]
    assert (reading.verdict, reading.in_flight, reading.source) == (Verdict.IDLE, 0, "loads")
    assert live_reader.timeouts == [pytest.approx(0.7)]  # what /metrics left of the read's 1 s
    assert reading.read_ms == pytest.approx(300.0)
    assert reading.warnings == ()


def test_a_vllm_body_is_never_followed_by_a_loads_read() -> None:
    reader, _, live_reader = auto([vllm(2)], [live(0)])
    reading = reader.read(1.0)
    assert (reading.verdict, reading.in_flight, reading.source) == (Verdict.BUSY, 2, "metrics")
    assert live_reader.timeouts == []


def test_a_body_that_names_no_engine_is_not_followed_either() -> None:
    none = Reading(Verdict.UNKNOWN, None, None, (), "no vllm or sglang request gauges", 1.0)
    reader, _, live_reader = auto([none], [live(0)])
    assert reader.read(1.0) is none and live_reader.timeouts == []


def test_a_pinned_engine_follows_only_a_body_with_its_series() -> None:
    # --engine sglang names any 2xx body SGLang's: a sidecar's gets no /v1/loads read.
    sidecar = Reading(Verdict.UNKNOWN, "sglang", None, (), "required gauge missing", 1.0)
    assert engine_shown(sidecar, "sglang") is None and engine_shown(sidecar, "auto") == "sglang"
    reader, _, live_reader = auto([sidecar], [live(0)], engine="sglang")
    assert reader.read(1.0) is sidecar and live_reader.timeouts == []


@pytest.mark.parametrize("status", [401, 403, 404])
def test_401_403_404_keep_metrics_in_charge_and_are_asked_again(status: int) -> None:
    no = failed(Verdict.UNKNOWN, f"HTTP {status}", status)
    reader, _, live_reader = auto([sglang(6), sglang(0), sglang(0)], [no, no, live(2)])
    first, second, third = reader.read(1.0), reader.read(1.0), reader.read(1.0)
    assert (first.verdict, first.in_flight, first.source) == (Verdict.BUSY, 6, "metrics")
    assert (second.verdict, second.in_flight) == (Verdict.IDLE, 0)
    # Asked each read: a worker restarted behind the port that now answers counts.
    assert (third.verdict, third.in_flight, third.source) == (Verdict.BUSY, 2, "loads")
    assert len(live_reader.timeouts) == 3
    assert first.warnings == second.warnings  # one text: the log shows it once
    (warning,) = first.warnings
    assert warning.startswith(f"/v1/loads answered HTTP {status} (")
    assert ("--api-key-file" in warning) == (status != 404)


def test_a_body_that_is_not_sglangs_keeps_metrics_in_charge_while_it_never_counted() -> None:
    """Missing, not doubt (CONTRACT §2a): a /v1/loads that is not a load report."""
    html = Reading.from_scan(scan_loads(b"<html>"), 1.0, "loads")
    reader, _, live_reader = auto([sglang(6), sglang(0)], [html, live(3)])
    first, second = reader.read(1.0), reader.read(1.0)
    assert (first.in_flight, first.source) == (6, "metrics")
    assert (second.verdict, second.in_flight, second.source) == (Verdict.BUSY, 3, "loads")
    assert len(live_reader.timeouts) == 2
    assert first.warnings == (
        f"/v1/loads is not SGLang's ({html.reason}): counting {STALE_METRICS}",
    )
    assert html.reason is not None and html.reason.startswith("not a load report: not JSON")


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (failed(Verdict.UNKNOWN, "HTTP 404", 404), "/v1/loads answered HTTP 404 ("),
        (Reading.from_scan(scan_loads(b"<html>"), 1.0, "loads"), "/v1/loads is not SGLang's ("),
    ],
    ids=["404", "html"],
)
def test_after_a_count_what_is_not_a_count_is_doubt(answer: Reading, why: str) -> None:
    """Before: one such answer turned /v1/loads off for the rest of the run, and the
    stale gauges released the engine (CONTRACT §2a: after its first count, doubt)."""
    reader, _, live_reader = auto([sglang(0)], [live(3), answer, live(0)])
    first, second, third = reader.read(1.0), reader.read(1.0), reader.read(1.0)
    assert (first.verdict, first.in_flight) == (Verdict.BUSY, 3)
    assert (second.verdict, second.in_flight) == (Verdict.UNKNOWN, None)
    assert second.reason is not None and second.reason.startswith(why)
    assert second.reason.endswith(" after a count: doubt")
    assert (third.verdict, third.source) == (Verdict.IDLE, "loads")
    assert len(live_reader.timeouts) == 3


def doubt(reason: str) -> Reading:
    """A 2xx /v1/loads body that is SGLang's but gives no count."""
    return Reading(Verdict.UNKNOWN, "sglang", None, (), reason, 1.0, source="loads")


@pytest.mark.parametrize(
    ("no_count", "why"),
    [
        (failed(Verdict.UNKNOWN, "HTTP 503", 503), "HTTP 503"),
        (failed(Verdict.UNKNOWN, "read timed out: timed out"), "read timed out"),
        (failed(Verdict.UNREACHABLE, "connection refused"), "connection refused"),
        (doubt("loads list is empty (no rank)"), "loads list is empty"),
        (doubt("num_running_reqs is nan"), "num_running_reqs is nan"),
    ],
    ids=["5xx", "timeout", "refused", "empty", "nan"],
)
def test_any_other_failure_is_doubt_and_asked_again(no_count: Reading, why: str) -> None:
    """Doubt (CONTRACT §2a): the read is unknown, whatever the gauges (which can be
    30 s old) say; /v1/loads is asked again on the next read."""
    reader, _, live_reader = auto([sglang(0)], [no_count, live(0)])
    first, second = reader.read(1.0), reader.read(1.0)
    assert (first.verdict, first.in_flight) == (Verdict.UNKNOWN, None)
    assert first.reason == f"/v1/loads gave no count ({why}): doubt"
    assert (second.verdict, second.source, second.warnings) == (Verdict.IDLE, "loads", ())
    assert len(live_reader.timeouts) == 2


def test_no_time_left_for_loads_is_doubt() -> None:
    reader, _, live_reader = auto([sglang(0)], [live(0)], takes=2.0)
    reading = reader.read(1.0)
    assert (reading.verdict, reading.reason) == (
        Verdict.UNKNOWN, "/v1/loads: no time left before D: doubt"
    )  # fmt: skip
    assert live_reader.timeouts == []


# ---- end to end: the hook against real servers ------------------------------------

HANG = None
Reply = tuple[int, bytes] | None


def per_path(replies: dict[str, Sequence[Reply]], seen: list[str]) -> Behaviour:
    """The nth request of a path gets its nth reply (the last repeats): a status
    and body, or HANG (read the request, never answer); 404 for any other path.
    Each request's path is appended to `seen`."""
    lock = threading.Lock()
    served: dict[str, int] = {}

    def behaviour(conn: socket.socket) -> None:
        head = read_request(conn)
        parts = head.split(b" ", 2)
        path = parts[1].decode("latin-1") if len(parts) == 3 else ""
        with lock:
            seen.append(path)
            nth = served.get(path, 0)
            served[path] = nth + 1
        script = replies.get(path, [(404, b"not found\n")])
        reply = script[min(nth, len(script) - 1)]
        if reply is HANG:
            conn.settimeout(None)
            with contextlib.suppress(OSError):
                while conn.recv(65536):
                    pass
            return
        status, body = reply
        conn.sendall(response_bytes(body, status, "OK" if status == 200 else "No"))

    return behaviour


SETTLE, INTERVAL = 0.2, 0.2
TIMELINE = (
    "--settle",
    str(SETTLE),
    "--interval",
    str(INTERVAL),
    "--grace",
    "4",
    "--exit-reserve",
    "1",
)
D = 3.0


def warnings(run: Run) -> list[str]:
    """The warnings about the reads (not the timeline's, which `wait` logs at its start)."""
    lines = hook_lines(run.lines)
    return [fields(line)["warning"] for line in lines if line.startswith("drainhook warning=")]


def test_stale_metrics_and_live_loads_drain_at_s_plus_a_quarter_i(hook: Hook) -> None:
    """The rehearsal's sglang-lag: /metrics still says 6 (republished every 30 s
    while idle), /v1/loads says 0. The default drains at S + I/4 (the connection
    signal read that zero too: the quick confirmation); --source metrics holds to D."""
    seen: list[str] = []
    replies: dict[str, Sequence[Reply]] = {
        "/metrics": [(200, STALE)],
        "/v1/loads": [(200, loads((0, 0)))],
    }
    with Loopback(per_path(replies, seen)) as srv:
        start = time.monotonic()
        run = hook("wait", "--port", str(srv.port), *TIMELINE)
        took = time.monotonic() - start
        pinned = hook("wait", "--port", str(srv.port), "--source", "metrics", *TIMELINE)
    assert run.code == 0, run.stderr
    end = fields(run.summary)
    assert (end["outcome"], end["reads"], end["in_flight"]) == ("drained", "2", "0")
    quick = SETTLE + INTERVAL / 4
    assert quick <= float(end["elapsed"]) < late(quick, HOOK_LATE, run.starved)
    assert took < late(quick, SPAWN_LATE, run.starved)  # not at D
    assert all("source=loads" in line for line in run.lines if " read=" in line)
    # Each read: /metrics, then /v1/loads on the same listener; then --source metrics alone.
    assert seen[:4] == ["/metrics", "/v1/loads"] * 2
    assert set(seen[4:]) == {"/metrics"}
    assert pinned.code == 3 and fields(pinned.summary)["in_flight"] == "6"


@pytest.mark.reads
@pytest.mark.parametrize("status", [401, 403, 404])
def test_loads_refused_keeps_metrics_in_charge_and_says_so_once(hook: Hook, status: int) -> None:
    seen: list[str] = []
    replies: dict[str, Sequence[Reply]] = {
        "/metrics": [(200, STALE), (200, SGLANG_IDLE)],
        "/v1/loads": [(status, b'{"error": "no"}')],
    }
    with Loopback(per_path(replies, seen)) as srv:
        run = hook("wait", "--port", str(srv.port), *TIMELINE)
    assert run.code == 0, run.stderr  # drained by /metrics: never ended by /v1/loads
    end = fields(run.summary)
    assert (end["outcome"], end["reads"]) == ("drained", "3")
    assert seen.count("/v1/loads") == 3 and seen.count("/metrics") == 3  # asked each read
    (said,) = warnings(run)  # once, not every read
    assert said.startswith(f"/v1/loads answered HTTP {status}")
    reads = [fields(line) for line in run.lines if " read=" in line]
    assert [r["in_flight"] for r in reads] == ["6", "0", "0"]
    assert {r["source"] for r in reads} == {"metrics"}


def test_loads_in_doubt_holds_each_read_and_is_asked_again(hook: Hook) -> None:
    """Before: a 503 or an empty list fell back to /metrics' stale count."""
    seen: list[str] = []
    replies: dict[str, Sequence[Reply]] = {
        "/metrics": [(200, SGLANG_IDLE)],
        "/v1/loads": [(503, b"busy"), (200, b'{"loads": []}'), (200, loads((0, 0)))],
    }
    with Loopback(per_path(replies, seen)) as srv:
        run = hook("wait", "--port", str(srv.port), "--log-reads", "all", *TIMELINE)
    assert run.code == 0, run.stderr
    reads = [fields(line) for line in run.lines if " read=" in line]
    assert [(r["verdict"], r.get("source")) for r in reads] == [
        ("unknown", None),
        ("unknown", None),
        ("idle", "loads"),
        ("idle", "loads"),
    ]
    assert reads[0]["reason"] == "/v1/loads gave no count (HTTP 503): doubt"
    assert reads[1]["reason"] == "/v1/loads gave no count (loads list is empty): doubt"
    assert seen == ["/metrics", "/v1/loads"] * 4


@pytest.mark.reads
def test_a_hanging_loads_costs_its_read_timeout_holds_and_never_passes_d(hook: Hook) -> None:
    """A /v1/loads that never answers is doubt: each read waits it out within its own
    read timeout (0.3 s) and is unknown; the hook ends at D, not after it."""
    seen: list[str] = []
    replies: dict[str, Sequence[Reply]] = {"/metrics": [(200, SGLANG_IDLE)], "/v1/loads": [HANG]}
    with Loopback(per_path(replies, seen)) as srv:
        run = hook("wait", "--port", str(srv.port), "--read-timeout", "0.3", *TIMELINE)
    assert run.code == 3, run.stderr
    end = fields(run.summary)
    assert end["outcome"] == "deadline" and end["reason"].startswith("/v1/loads gave no count")
    assert D - 0.05 <= float(end["elapsed"]) < late(D, HOOK_LATE, run.starved)
    reads = [fields(line) for line in run.lines if " read=" in line]
    assert all(float(r["read_ms"]) <= 0.45 * 1000 for r in reads)
    # Each read asks /metrics, then /v1/loads; D may cut the last between the two.
    loads, metrics = seen.count("/v1/loads"), seen.count("/metrics")
    assert loads >= 4 and metrics - loads in (0, 1), seen


def test_a_vllm_body_never_triggers_a_loads_read(hook: Hook) -> None:
    seen: list[str] = []
    replies: dict[str, Sequence[Reply]] = {
        "/metrics": [(200, VLLM_IDLE)],
        "/v1/loads": [(200, loads((5, 0)))],  # would say busy if it were read
    }
    with Loopback(per_path(replies, seen)) as srv:
        run = hook("wait", "--port", str(srv.port), *TIMELINE)
        probe = hook("probe", "--port", str(srv.port), "--json")
    assert run.code == 0 and fields(run.summary)["reads"] == "2"
    assert json.loads(probe.stdout)["source"] == "metrics"
    assert seen == ["/metrics"] * 3


def test_probe_shows_which_source_decided(hook: Hook) -> None:
    seen: list[str] = []
    replies: dict[str, Sequence[Reply]] = {
        "/metrics": [(200, STALE)],
        "/v1/loads": [(200, loads((1, 0), (0, 0)))],
    }
    with Loopback(per_path(replies, seen)) as srv:
        text = hook("probe", "--port", str(srv.port))
        obj = json.loads(hook("probe", "--port", str(srv.port), "--json").stdout)
    rows = dict(line.split(None, 1) for line in text.stdout.splitlines() if line[:1] != " ")
    assert text.code == 1 and (rows["source"], rows["in_flight"]) == ("loads", "1")
    assert (obj["source"], obj["verdict"], obj["in_flight"], obj["engine"]) == (
        "loads",
        "busy",
        1,
        "sglang",
    )
    assert [s["name"] for s in obj["series"]] == ["num_running_reqs", "num_waiting_reqs"] * 2
    assert seen == ["/metrics", "/v1/loads"] * 2
