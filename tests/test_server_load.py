"""vLLM's `GET /load` (CONTRACT §2a, the server's own count): the body's rules,
the reader beside /metrics against real loopback servers, and `wait` held by it.

A case for each answer /load can give: a count (counted with the scheduler's,
the larger wins), 404 (a vLLM without the route: asked no more), a body that is
no /load answer (a server answering every path alike: asked no more), doubt (a
negative or non-numeric count: unknown), and a failure for one read (a 503:
missing for that read, asked again).
"""

from __future__ import annotations

import json

import pytest

from drainhook.engines.server_load import ServerLoad, parse_server_load
from drainhook.engines.verdict import Verdict
from drainhook.reading.assemble import target_reader
from drainhook.reading.config import ReadConfig
from drainhook.reading.target import parse_url
from tests.support.logs import fields, timed_out
from tests.support.loopback import Loopback, response_bytes, sample
from tests.support.process import Hook

IDLE = sample("vllm-http-plain-idle.txt")
BUSY = sample("vllm-http-plain.txt")  # running 1

NO_ROUTE = (
    "a vLLM without the /load route: vLLM 0.9 or newer, with "
    "--enable-server-load-tracking, counts it"
)


@pytest.mark.parametrize(
    ("body", "want"),
    [
        (b'{"server_load": 0}', ServerLoad(0.0)),
        (b'{"server_load": 3}', ServerLoad(3.0)),
        (b'{"server_load": 2.0, "other": 1}', ServerLoad(2.0)),
        (b'{"server_load": -1}', ServerLoad(doubt="server_load is negative (-1)")),
        (b'{"server_load": "1"}', ServerLoad(doubt="server_load is not a number")),
        (b'{"server_load": true}', ServerLoad(doubt="server_load is not a number")),
        (b'{"server_load": 1e999}', ServerLoad(doubt="server_load is inf")),
        (b'{"load": 1}', ServerLoad(absent="no server_load in the body")),
        (b"[1]", ServerLoad(absent="no server_load in the body")),
        (IDLE, ServerLoad(absent="not JSON")),
        (b"<html>ok</html>", ServerLoad(absent="not JSON")),
        (b"", ServerLoad(doubt="an empty or cut body")),  # a 204, or a close before it
        (b'{"server_load"', ServerLoad(doubt="an empty or cut body")),  # cut by a close
        (b' {"server_load": 3', ServerLoad(doubt="an empty or cut body")),
        (b"x" * 70000, ServerLoad(absent="a body of 70000 bytes is not a /load answer")),
    ],
)
def test_a_load_body(body: bytes, want: ServerLoad) -> None:
    assert parse_server_load(body) == want


def by_path(replies: dict[str, list[tuple[int, bytes]]], seen: list[str]):  # type: ignore[no-untyped-def]
    """Each path's replies in turn (the last repeats); every request path in `seen`."""
    served: dict[str, int] = {}

    def behaviour(conn):  # type: ignore[no-untyped-def]
        from tests.support.loopback import read_request

        head = read_request(conn)
        path = head.split(b" ")[1].decode() if head.count(b" ") >= 2 else ""
        seen.append(path)
        nth = served.get(path, 0)
        served[path] = nth + 1
        answers = replies.get(path, [(404, b"not found\n")])
        status, body = answers[min(nth, len(answers) - 1)]
        conn.sendall(response_bytes(body, status, "X"))

    return behaviour


def reads(replies: dict[str, list[tuple[int, bytes]]], n: int, **config: object) -> tuple:  # type: ignore[type-arg]
    seen: list[str] = []
    with Loopback(by_path(replies, seen), own_load=False) as srv:
        reach = ReadConfig(target=parse_url(srv.url), connections=False, **config)  # type: ignore[arg-type]
        reader = target_reader(reach, reach.target)
        try:
            got = [reader.read(2.0) for _ in range(n)]
        finally:
            reader.close()
    return got, seen


def load(n: float) -> tuple[int, bytes]:
    return 200, json.dumps({"server_load": n}).encode()


def test_an_idle_scheduler_with_a_request_in_the_server_is_busy() -> None:
    got, seen = reads({"/metrics": [(200, IDLE)], "/load": [load(1), load(0)]}, 2)
    assert [(r.verdict, r.in_flight) for r in got] == [(Verdict.BUSY, 1.0), (Verdict.IDLE, 0.0)]
    assert got[0].signals is not None and got[0].signals.holding() == ("server",)
    assert seen == ["/metrics", "/load"] * 2


def test_a_busy_read_asks_no_load_but_probe_does() -> None:
    got, seen = reads({"/metrics": [(200, BUSY)], "/load": [load(5)]}, 1)
    assert (got[0].verdict, got[0].in_flight) == (Verdict.BUSY, 1.0)
    assert seen == ["/metrics"]
    got, seen = reads({"/metrics": [(200, BUSY)], "/load": [load(5)]}, 1, every_signal=True)
    assert (got[0].in_flight, seen) == (5.0, ["/metrics", "/load"])
    assert got[0].signals is not None and (got[0].signals.scheduler, got[0].signals.server) == (
        1.0,
        5.0,
    )


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (
            (404, b"not found\n"),
            f"/load answered HTTP 404 ({NO_ROUTE})",
        ),
        ((200, IDLE), "/load is not vLLM's (not JSON)"),
    ],
)
def test_no_load_route_is_missing_and_asked_again(answer: tuple[int, bytes], why: str) -> None:
    """Missing while it has never counted (the others decide); asked again each read,
    so a /load that starts answering (a worker restarted behind the port) counts."""
    replies = {"/metrics": [(200, IDLE)], "/load": [answer, answer, load(2)]}
    got, seen = reads(replies, 3)
    assert [(r.verdict, r.in_flight) for r in got] == [
        (Verdict.IDLE, 0.0), (Verdict.IDLE, 0.0), (Verdict.BUSY, 2.0)
    ]  # fmt: skip
    assert seen == ["/metrics", "/load"] * 3
    for r in got[:2]:
        assert r.signals is not None and r.signals.server is None
        assert r.signals.missing == (("server", why),)


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (
            (404, b"not found\n"),
            f"/load answered HTTP 404 ({NO_ROUTE})",
        ),
        ((403, b"forbidden\n"), "/load answered HTTP 403 (vLLM's --api-key guards it; "),
        ((200, b"<html>proxy</html>"), "/load is not vLLM's (not JSON)"),
        ((200, b'{"ok": true}'), "/load is not vLLM's (no server_load in the body)"),
    ],
)
def test_after_a_count_what_is_not_a_count_is_doubt(answer: tuple[int, bytes], why: str) -> None:
    """Before: one such answer turned /load off for the rest of the run, and the
    gauges alone released an engine whose server still held 3 (CONTRACT §2a)."""
    replies = {"/metrics": [(200, IDLE)], "/load": [load(3), answer, load(0)]}
    got, seen = reads(replies, 3)
    assert [(r.verdict, r.in_flight) for r in got] == [
        (Verdict.BUSY, 3.0), (Verdict.UNKNOWN, None), (Verdict.IDLE, 0.0)
    ]  # fmt: skip
    assert got[1].reason is not None and got[1].reason.startswith(why)
    assert got[1].reason.endswith(" after a count: doubt")
    assert seen == ["/metrics", "/load"] * 3


def test_a_negative_load_is_doubt() -> None:
    got, seen = reads({"/metrics": [(200, IDLE)], "/load": [load(-1), load(0)]}, 2)
    assert (got[0].verdict, got[0].in_flight) == (Verdict.UNKNOWN, None)
    assert got[0].reason == "/load: server_load is negative (-1): doubt"
    assert got[1].verdict is Verdict.IDLE  # asked again: a count then
    assert seen == ["/metrics", "/load"] * 2


def test_a_failing_load_is_doubt_for_that_read_and_asked_again() -> None:
    """Before: `missing`, and the gauges alone read idle while the server held work."""
    got, seen = reads({"/metrics": [(200, IDLE)], "/load": [(503, b"busy"), load(2)]}, 2)
    assert (got[0].verdict, got[0].in_flight) == (Verdict.UNKNOWN, None)
    assert got[0].reason == "/load gave no count (HTTP 503): doubt"
    assert (got[1].verdict, got[1].in_flight) == (Verdict.BUSY, 2.0)
    assert seen == ["/metrics", "/load"] * 2


def test_sglang_and_a_pinned_metrics_source_never_ask_load() -> None:
    sglang = sample("sglang-mp-dp2-idle.txt")
    _, seen = reads({"/metrics": [(200, sglang)], "/load": [load(1)]}, 1)
    assert "/load" not in seen
    _, seen = reads({"/metrics": [(200, IDLE)], "/load": [load(1)]}, 1, source="metrics")
    assert seen == ["/metrics"]


@pytest.mark.reads
def test_wait_holds_while_load_counts_a_request(hook: Hook) -> None:
    """/metrics idle throughout; /load 1, 1, 1 then 0: drained on reads 4 and 5."""
    seen: list[str] = []
    replies = {"/metrics": [(200, IDLE)], "/load": [load(1), load(1), load(1), load(0)]}
    with Loopback(by_path(replies, seen), own_load=False) as srv:
        run = hook(
            "wait", "--url", srv.url, "--settle", "0.2", "--interval", "0.1",
            "--grace", "3", "--exit-reserve", "0.5", timeout=15,
        )  # fmt: skip
    assert run.code == 0, run.stderr
    lines = [fields(line) for line in run.lines if " read=" in line]
    assert [(r["verdict"], r["in_flight"]) for r in lines] == [
        ("busy", "1"),
        ("busy", "1"),
        ("busy", "1"),
        ("idle", "0"),
        ("idle", "0"),
    ]
    assert fields(run.summary)["reads"] == "5"
    assert seen.count("/load") == 5


# ---- what probe and the log say of each signal (CONTRACT §2a, §4) -----------------------


def test_probe_shows_each_signal_apart_and_which_held(hook: Hook) -> None:
    """An SGLang whose gauges read 0 while its HTTP server holds a request: busy 1,
    from the server signal; `probe --json` adds `signals` and `held_by`."""
    seen: list[str] = []
    body = sample("sglang-mp-dp2-server-only.txt")
    with Loopback(by_path({"/metrics": [(200, body)]}, seen)) as srv:
        run = hook("probe", "--url", srv.url, "--json")
        text = hook("probe", "--url", srv.url)
    assert run.code == 1, run.stderr
    obj = json.loads(run.stdout)
    assert (obj["verdict"], obj["in_flight"], obj["held_by"]) == ("busy", 1, ["server"])
    assert obj["signals"]["scheduler"] == 0 and obj["signals"]["server"] == 1
    assert obj["signals"]["connections"] == 0  # the probe's own connection is not counted
    assert obj["signals"]["missing"] == {}
    rows = dict(line.split(None, 1) for line in text.stdout.splitlines() if line[:1] != " ")
    assert rows["signals"] == "scheduler=0 server=1 connections=0"  # as wait and JSON say it
    assert rows["held_by"] == "server"


@pytest.mark.reads
def test_the_read_lines_and_the_summary_say_which_signal_held(hook: Hook) -> None:
    """Held to D by the server's count alone; a missing signal said once."""
    seen: list[str] = []
    replies = {"/metrics": [(200, IDLE)], "/load": [load(2)]}
    with Loopback(by_path(replies, seen), own_load=False) as srv:
        run = hook(
            "wait", "--url", srv.url, "--settle", "0.1", "--interval", "0.1",
            "--grace", "2.5", "--exit-reserve", "0.5", timeout=15,
        )  # fmt: skip
    assert run.code == 3, run.stderr
    # A read cut short by D on a loaded machine is unknown, and held by no signal; so
    # is a read whose /load leg found no time left or timed out (a CI run saw one):
    # the server signal is missing for that read alone, and a line says why.
    reads = [fields(line) for line in run.lines if " read=" in line]
    reads = [r for r in reads if not timed_out(r)]
    answered = [r for r in reads if "server" in r]
    if len(answered) < len(reads):
        said = [fields(line) for line in run.lines if " missing=" in line]
        assert [m["signal"] for m in said] == ["server"] * len(said) and said, run.stderr
    assert len(answered) >= 3
    for r in answered:
        assert (r["verdict"], r["in_flight"], r["held_by"]) == ("busy", "2", "server")
        assert (r["scheduler"], r["server"]) == ("0", "2")
        assert r["connections"] == "0"  # dumped on a busy read too: each one's history
    summary = fields(run.summary)
    assert (summary["outcome"], summary["held_by"]) == ("deadline", "server")


@pytest.mark.reads
def test_a_missing_signal_is_said_once(hook: Hook) -> None:
    with Loopback(by_path({"/metrics": [(200, IDLE)]}, []), own_load=False) as srv:
        run = hook(
            "wait", "--url", srv.url, "--settle", "0.1", "--interval", "0.1", "--confirm", "4",
            "--grace", "3", "--exit-reserve", "0.5", "--log-format", "json",
            timeout=15,
        )  # fmt: skip
    assert run.code == 0, run.stderr
    events = [json.loads(line) for line in run.lines]
    assert all(e.pop("logger") == "drainhook" and e.pop("time") for e in events)
    said = [e for e in events if e["event"] == "signal"]
    assert said == [
        {
            "event": "signal",
            "signal": "server",
            "missing": f"/load answered HTTP 404 ({NO_ROUTE})",
            "target": None,
        }
    ]
    reads = [e for e in events if e["event"] == "read"]
    assert len(reads) == 4
    assert all(e["server"] is None and e["scheduler"] == 0 for e in reads)
