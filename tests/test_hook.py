"""The hook's run (drainhook.hook.run): a config in, an outcome and an exit code
out; the readers it assembles; and `probe`'s one read. In this process,
against real loopback servers on a shrunken timeline."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from drainhook.engines.exposition import ACCEPT, MetricsScanner
from drainhook.engines.loads import LoadsScanner
from drainhook.engines.verdict import Verdict
from drainhook.hook.config import EXIT_ALLOWANCE, WaitConfig
from drainhook.hook.probe import run_probe
from drainhook.hook.run import run_wait
from drainhook.reading import gone
from drainhook.reading.assemble import reader_for, scanner_for
from drainhook.reading.config import ReadConfig
from drainhook.reading.target import parse_url
from tests.conftest import HOOK_LATE, READ_LATE, late
from tests.support.loopback import Loopback, route, sample, sequence, serve
from tests.support.process import run_delay

D = 0.6  # the deadline of config(): G 2 s - R 1.4 s
IDLE = sample("vllm-single-dp2-idle.txt")
BUSY = sample("vllm-single-dp2.txt")  # in_flight 6
SGLANG_IDLE = sample("sglang-mp-dp2-idle.txt")
LOADS_BUSY = json.dumps({"loads": [{"dp_rank": 0, "num_running_reqs": 2, "num_waiting_reqs": 1}]})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def config(url: str, exit_zero: bool = False) -> WaitConfig:
    """D = 0.6 s: settle 0.05 s, a read every 0.05 s."""
    return WaitConfig(
        reach=ReadConfig(target=parse_url(url), read_timeout=0.3),
        settle=0.05,
        interval=0.05,
        grace=2.0,
        exit_reserve=1.4,
        log_format="json",
        exit_zero=exit_zero,
    )


# -- the readers --------------------------------------------------------------


def test_the_scanner_follows_the_source() -> None:
    target = parse_url("http://127.0.0.1:8000/metrics")
    assert scanner_for(ReadConfig(target=target, engine="sglang")) == MetricsScanner("sglang")
    assert scanner_for(ReadConfig(target=target, source="loads", engine="sglang")) == LoadsScanner()


SGLANG_LOADS_IDLE = json.dumps(
    {"loads": [{"dp_rank": 0, "num_running_reqs": 0, "num_waiting_reqs": 0}]}
).encode()


@pytest.mark.parametrize(
    ("fields", "body", "paths", "source", "server", "connections"),
    [
        # --source metrics, no connections: /metrics alone
        ({"source": "metrics", "connections": False}, IDLE, ["/metrics"], "metrics", None, None),
        # --source auto: SGLang's /v1/loads counted in its scheduler's stead
        ({"connections": False}, SGLANG_IDLE, ["/metrics", "/v1/loads"], "loads", 0, None),
        # --source auto: vLLM's /load, the server's count
        ({"connections": False}, IDLE, ["/metrics", "/load"], "metrics", 0, None),
        # an engine named: its own side source
        (
            {"connections": False, "engine": "sglang"},
            SGLANG_IDLE,
            ["/metrics", "/v1/loads"],
            "loads",
            0,
            None,
        ),
        # in the Pod (loopback): the connection signal after the HTTP reads
        ({"source": "metrics"}, IDLE, ["/metrics"], "metrics", None, 0),
    ],
)
def test_a_target_reads_its_engines_side_source_and_the_connections(
    fields: dict[str, object],
    body: bytes,
    paths: list[str],
    source: str,
    server: float | None,
    connections: float | None,
) -> None:
    heads: list[bytes] = []
    routes = {"/metrics": body, "/v1/loads": SGLANG_LOADS_IDLE, "/load": b'{"server_load": 0}'}
    with Loopback(route(routes, heads), own_load=False) as srv:
        reach = ReadConfig(target=parse_url(srv.url), **fields)  # type: ignore[arg-type]
        reader = reader_for(reach)
        try:
            reading = reader.read(1.0)
        finally:
            reader.close()
    assert [h.split()[1].decode() for h in heads] == paths
    assert (reading.verdict, reading.in_flight, reading.source) == (Verdict.IDLE, 0, source)
    assert reader.name == reach.display
    signals = reading.signals
    assert (signals.server if signals else None) == server
    if connections is None:
        assert signals is None or signals.connections is None
    else:  # counted, or missing with its reason where sock_diag is not offered
        assert signals is not None
        assert signals.connections == connections or "connections" in dict(signals.missing)


def test_several_targets_are_read_as_one_round() -> None:
    heads: list[bytes] = []
    with Loopback(route({"/metrics": BUSY}, heads)) as a, Loopback(route({"/metrics": IDLE})) as b:
        reach = ReadConfig(
            target=parse_url(a.url), more=(parse_url(b.url),), source="metrics", connections=False
        )
        reader = reader_for(reach)
        try:
            reading = reader.read(1.0)
        finally:
            reader.close()
    assert reader.name == f"{reach.target.display},{reach.more[0].display}"
    assert (reading.verdict, reading.in_flight, len(reading.parts)) == (Verdict.BUSY, 6, 2)


@pytest.mark.parametrize(
    ("source", "body", "accept", "in_flight"),
    [("metrics", BUSY, ACCEPT, 6), ("loads", LOADS_BUSY.encode(), "application/json", 3)],
)
def test_the_reader_asks_for_and_scans_its_source(
    source: str, body: bytes, accept: str, in_flight: int
) -> None:
    heads: list[bytes] = []
    path = "/v1/loads" if source == "loads" else "/metrics"
    with Loopback(route({path: body}, heads)) as srv:
        reach = ReadConfig(target=parse_url(f"http://127.0.0.1:{srv.port}{path}"), source=source)
        reader = reader_for(reach)
        try:
            reading = reader.read(1.0)
        finally:
            reader.close()
    assert (reading.verdict, reading.in_flight) == (Verdict.BUSY, in_flight)
    assert f"accept: {accept}".encode() in heads[0].lower()


# -- wait ---------------------------------------------------------------------


def summary(err: str) -> dict[str, object]:
    found: dict[str, object] = json.loads(err.splitlines()[-1])
    assert found["event"] == "summary"
    return found


def test_the_loop_ends_before_d_by_the_exit_allowance() -> None:
    """The loop's deadline leaves the process EXIT_ALLOWANCE to be gone by D; a D
    of 0 stays 0, and the logged deadline (config.deadline) stays D."""
    reach = ReadConfig(target=parse_url("http://127.0.0.1:9/metrics"))
    assert 0 < EXIT_ALLOWANCE <= 0.05
    busy = WaitConfig(reach=reach, grace=30.0, exit_reserve=5.0)
    assert busy.deadline == 25.0
    assert busy.timeline().deadline == pytest.approx(25.0 - EXIT_ALLOWANCE)
    assert WaitConfig(reach=reach, grace=5.0, exit_reserve=5.0).timeline().deadline == 0.0


def test_wait_drains_on_the_second_idle_read(capfd: pytest.CaptureFixture[str]) -> None:
    with Loopback(sequence(serve(BUSY), serve(IDLE))) as srv:
        start = time.monotonic()
        code = run_wait(config(srv.url), start)
        took = time.monotonic() - start
    end = summary(capfd.readouterr().err)
    assert code == 0
    assert (end["outcome"], end["reads"], end["in_flight"]) == ("drained", 3, 0)
    assert srv.connections == 3
    # It returned on the confirmation (S + 2 I = 0.15 s), not at the deadline.
    assert took < late(0.15, HOOK_LATE)


def test_wait_runs_to_the_deadline_while_busy(capfd: pytest.CaptureFixture[str]) -> None:
    with Loopback(serve(BUSY)) as srv:
        start = time.monotonic()
        code = run_wait(config(srv.url), start)
        took = time.monotonic() - start
    end = summary(capfd.readouterr().err)
    assert code == 3
    assert (end["outcome"], end["in_flight"], end["exit"]) == ("deadline", 6, 3)
    # It ends EXIT_ALLOWANCE before D, so that its process is gone by D.
    assert D - EXIT_ALLOWANCE <= end["elapsed"] <= late(D, HOOK_LATE)  # type: ignore[operator]
    assert took >= D - EXIT_ALLOWANCE


def shown(monkeypatch: pytest.MonkeyPatch, found: gone.Found) -> list[float]:
    """What /proc shows of the engine (drainhook.reading.gone), set; the checks' bounds."""
    asked: list[float] = []
    monkeypatch.setattr(gone, "engine_gone", lambda until: asked.append(until) or found)
    return asked


def test_wait_ends_at_once_when_unreachable_and_gone(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    asked = shown(monkeypatch, gone.Found(True, "nothing listens in this network namespace"))
    waited = run_delay()
    start = time.monotonic()
    code = run_wait(config(f"http://127.0.0.1:{free_port()}/metrics"), start)
    end = summary(capfd.readouterr().err)
    assert code == 4
    assert (end["outcome"], end["reads"], len(asked)) == ("unreachable", 1, 1)
    assert (
        end["reason"]
        == "connection refused; the engine is gone: nothing listens in this network namespace"
    )
    # At the first read, after the settle (0.05 s): one refused connect.
    assert time.monotonic() - start < late(0.05, READ_LATE, run_delay() - waited)


def test_wait_holds_to_d_when_refused_while_the_engine_listens_elsewhere(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """CONTRACT §2: a wrong port is doubt, held to D like the blind sleep, read every
    I, and ends `misconfigured` (exit 6); the summary names what listens and the fix."""
    held = "TCP ports 8001 listen here (held: 8001 by pid 7 (vllm))"
    asked = shown(monkeypatch, gone.Found(False, held))
    start = time.monotonic()
    code = run_wait(config(f"http://127.0.0.1:{free_port()}/metrics"), start)
    took = time.monotonic() - start
    end = summary(capfd.readouterr().err)
    assert (code, end["outcome"]) == (6, "misconfigured")
    assert (
        end["reason"]
        == f"misconfigured: connection refused; {held}: point --port or --url at the engine"
    )
    assert took >= D - EXIT_ALLOWANCE
    assert end["reads"] == len(asked) >= 2  # read every I (0.05 s) until D (0.6 s)


def test_exit_zero_maps_the_deadline_to_0(capfd: pytest.CaptureFixture[str]) -> None:
    with Loopback(serve(BUSY)) as srv:
        code = run_wait(config(srv.url, exit_zero=True), time.monotonic())
    end = summary(capfd.readouterr().err)
    assert (code, end["outcome"], end["exit"]) == (0, "deadline", 0)


# -- probe --------------------------------------------------------------------


@pytest.mark.parametrize(("body", "code"), [(IDLE, 0), (BUSY, 1)])
def test_probe_reads_once(body: bytes, code: int) -> None:
    with Loopback(serve(body)) as srv:
        shown, got = run_probe(ReadConfig(target=parse_url(srv.url)), as_json=True)
        assert srv.connections == 1
    assert got == code
    assert json.loads(shown)["verdict"] == ("idle" if code == 0 else "busy")


def test_probe_both_reads_each_source_and_exits_by_metrics() -> None:
    paths = {"/metrics": SGLANG_IDLE, "/v1/loads": LOADS_BUSY.encode()}
    with Loopback(route(paths)) as srv:
        reach = ReadConfig(target=parse_url(srv.url), source="both", engine="sglang")
        shown, code = run_probe(reach, as_json=True)
    both = json.loads(shown)
    assert code == 0  # /metrics: idle
    assert (both["verdict"], both["loads"]["verdict"], both["loads"]["in_flight"]) == (
        "idle",
        "busy",
        3,
    )
    assert both["loads"]["target"].endswith("/v1/loads")


@pytest.mark.parametrize(
    ("gone_", "code", "verdict"), [(True, 4, "unreachable"), (False, 3, "unknown")]
)
def test_probe_refused_is_unreachable_only_when_gone(
    monkeypatch: pytest.MonkeyPatch, gone_: bool, code: int, verdict: str
) -> None:
    shown(monkeypatch, gone.Found(gone_, "TCP ports 8001 listen here"))
    target = parse_url(f"http://127.0.0.1:{free_port()}")
    assert target.path == "/metrics"  # a URL with no path reads /metrics (CONTRACT §2)
    said, got = run_probe(ReadConfig(target=target), True)
    assert got == code
    assert json.loads(said)["verdict"] == verdict
    assert ("misconfigured" in json.loads(said)["reason"]) is (not gone_)


def test_after_a_signal_the_hook_ends_without_waiting_on_its_reader(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """A signal whose handler raised just after the HTTP pool took its own lock (the
    pool's `with` not yet begun) leaves that lock held: a close would wait on it for
    ever (seen under qemu-user, the summary written, the process never gone). The
    hook ends with 143 and its summary, and never closes the reader after a signal."""
    from drainhook.hook import run as hook
    from drainhook.hook.drain import Interrupted

    held = threading.Lock()
    closed: list[bool] = []

    class Interrupting:
        name = "http://127.0.0.1:9/metrics"

        def read(self, timeout: float) -> object:
            held.acquire()  # as the pool's lock, whose release never comes
            raise Interrupted(15)

        def close(self) -> None:
            closed.append(True)
            held.acquire(timeout=2)

    monkeypatch.setattr(hook, "hook_reader", lambda *_a, **_k: Interrupting())
    code = run_wait(config("http://127.0.0.1:9/metrics"), time.monotonic())
    end = summary(capfd.readouterr().err)
    assert (code, end["outcome"], closed) == (143, "interrupted", [])
