"""`drainhook probe` end to end: one read of a real loopback server, its text and its
`--json` object (CONTRACT §4, a stable interface), and its exit code (§5)."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SPAWN_LATE, late
from tests.support.loopback import EXPECTED, Loopback, hang, route, sample, serve
from tests.support.process import Hook, Run

PROBE_EXIT = {"idle": 0, "busy": 1, "unknown": 3, "unreachable": 4}
# CONTRACT §4's fields, `source` (what was counted: metrics or loads; null unless
# idle or busy) and `warnings` (shapes that usually mean trouble; a list, often
# empty); `targets` is added only when several targets are read, `discovered`
# only when listener discovery ran. `signals` (each signal's own count, CONTRACT
# §2a; null unless idle or busy) and `held_by` (the signals that read work).
JSON_KEYS = {
    "schema", "target", "engine", "verdict", "reason", "in_flight", "series", "read_ms", "source",
    "warnings", "progress", "waiting_outside", "signals", "held_by",
}  # fmt: skip
COUNTED_PREFIXES = ("vllm:num_requests_", "sglang:num_")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def probe_json(run: Run) -> dict[str, Any]:
    out = run.stdout.strip()
    assert "\n" not in out, "probe --json prints one object on one line"
    obj: dict[str, Any] = json.loads(out)
    assert set(obj) == JSON_KEYS
    assert obj["schema"] == 1
    assert isinstance(obj["read_ms"], (int, float)) and obj["read_ms"] >= 0
    for s in obj["series"]:
        assert set(s) == {"name", "labels", "value"}
        assert s["name"].startswith(COUNTED_PREFIXES)
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in s["labels"].items())
        assert isinstance(s["value"], (int, float))
    if obj["verdict"] in ("idle", "busy"):
        assert obj["reason"] is None
        assert isinstance(obj["in_flight"], (int, float))
        # A whole count is a JSON integer (`3`, not `3.0`), as the text view prints it.
        if obj["in_flight"] == int(obj["in_flight"]):
            assert isinstance(obj["in_flight"], int), out
    else:
        assert isinstance(obj["reason"], str) and obj["reason"]
        assert obj["in_flight"] is None
    return obj


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_probe_json_on_each_sample(hook: Hook, name: str) -> None:
    """Each sample served on /metrics alone (404 elsewhere): an SGLang body is
    followed by one /v1/loads read (--source auto), whose 404 keeps /metrics in
    charge and says so; any other body by none."""
    expected = EXPECTED[name]
    heads: list[bytes] = []
    with Loopback(route({"/metrics": sample(name)}, heads)) as srv:
        url = srv.url
        run = hook("probe", "--url", url, "--json")
    obj = probe_json(run)
    assert run.code == PROBE_EXIT[expected["verdict"]], run.stderr
    assert run.stderr == ""
    sglang = expected["engine"] == "sglang"
    paths = [h.split(b" ")[1] for h in heads]
    assert paths == ([b"/metrics", b"/v1/loads"] if sglang else [b"/metrics"])
    if obj["verdict"] in ("idle", "busy"):
        assert obj["source"] == "metrics"
    loads_404 = [w for w in obj["warnings"] if w.startswith("/v1/loads answered HTTP 404")]
    assert len(loads_404) == (1 if sglang else 0)
    assert obj["target"] == url
    assert obj["verdict"] == expected["verdict"]
    assert obj["engine"] == expected["engine"]
    assert obj["in_flight"] == expected["in_flight"]
    values = [s["value"] for s in obj["series"]]
    if expected["verdict"] == "idle":
        assert values and all(v == 0 for v in values)
    if expected["verdict"] == "busy" and name.endswith("-server-only.txt"):
        # Only the HTTP server holds the request (CONTRACT §2a): the gauges read 0.
        assert values and all(v == 0 for v in values)
    elif expected["verdict"] == "busy":
        # Series that differ only in tp_rank count once (their max): the sum is >= total.
        assert sum(values) >= expected["in_flight"] > 0


@pytest.mark.parametrize("name", ["vllm-single-dp2.txt", "sglang-mp-pd-prefill-priority-idle.txt"])
def test_probe_text_shows_the_target_the_verdict_and_every_series(hook: Hook, name: str) -> None:
    with Loopback(serve(sample(name))) as srv:
        url = srv.url
        text = hook("probe", "--url", url)
        obj = probe_json(hook("probe", "--url", url, "--json"))
    expected = EXPECTED[name]
    assert text.code == PROBE_EXIT[expected["verdict"]], text.stderr
    rows = dict(line.split(None, 1) for line in text.stdout.splitlines() if line[:1] != " ")
    assert rows["target"] == url
    assert rows["engine"] == expected["engine"]
    assert rows["verdict"] == expected["verdict"]
    assert rows["in_flight"] == str(int(expected["in_flight"]))
    assert rows["series"] == str(len(obj["series"]))
    lines = text.stdout.splitlines()

    def block(header: str) -> list[str]:
        """The indented lines under a header row."""
        start = next((i for i, line in enumerate(lines) if line.startswith(header + " ")), None)
        if start is None:  # no such rows (an engine that exports no progress counter)
            return []
        rest = [*lines[start + 1 :], ""]
        return [
            line.strip() for line in rest[: next(i for i, x in enumerate(rest) if x[:1] != " ")]
        ]

    series_lines = block("series")
    assert len(series_lines) == len(obj["series"]) > 0
    # Then each progress counter series (CONTRACT §2b), summed by name in the JSON.
    progress: dict[str, float] = {}
    for line in block("progress"):
        name = line.split("{")[0].split()[0]
        progress[name] = progress.get(name, 0.0) + float(line.split()[-1])
    assert progress == obj["progress"]
    for line, s in zip(series_lines, obj["series"], strict=True):
        assert line.startswith(s["name"] + "{")
        for key, value in s["labels"].items():
            assert f'{key}="{value}"' in line
        assert line.split()[-1] == f"{s['value']:g}"


def test_probe_of_a_prefill_member_skips_the_per_priority_breakdown(hook: Hook) -> None:
    with Loopback(serve(sample("sglang-mp-pd-prefill-priority.txt"))) as srv:
        obj = probe_json(hook("probe", "--url", srv.url, "--json"))
    assert obj["in_flight"] == 8
    assert {s["labels"].get("priority") for s in obj["series"]} == {""}


def test_probe_engine_pinned_to_the_other_engine_is_unknown(hook: Hook) -> None:
    with Loopback(serve(sample("vllm-http-plain.txt"))) as srv:
        run = hook("probe", "--url", srv.url, "--json", "--engine", "sglang")
    assert run.code == 3
    obj = probe_json(run)
    assert obj["verdict"] == "unknown"
    assert obj["in_flight"] is None


def test_probe_of_a_hung_listener_is_unknown_within_the_read_timeout(hook: Hook) -> None:
    with Loopback(hang) as srv:
        run = hook("probe", "--url", srv.url, "--json", "--read-timeout", "0.3")
    assert run.code == 3, run.stderr
    obj = probe_json(run)
    assert obj["verdict"] == "unknown"
    assert "timed out" in obj["reason"]
    assert obj["engine"] is None
    assert obj["series"] == []
    assert 250 <= obj["read_ms"] <= 550  # the read timeout, not the 1 s default
    assert run.elapsed <= late(0.3, SPAWN_LATE, run.starved)  # the read timeout, not the default
    assert srv.connections == 1


@pytest.mark.parametrize(
    ("status", "verdict", "code"),
    [(302, "unknown", 3), (404, "unknown", 3), (503, "unknown", 3), (429, "unknown", 3)],
)
def test_probe_non_2xx_is_unknown(hook: Hook, status: int, verdict: str, code: int) -> None:
    """CONTRACT §2: every non-2xx is unknown; a 3xx or 4xx from a target that never
    answered 2xx (probe's one read) is named a wrong target."""
    with Loopback(serve(b"", status, "Nope", {"Location": "/elsewhere"})) as srv:
        run = hook("probe", "--url", srv.url, "--json")
    assert run.code == code, run.stderr
    obj = probe_json(run)
    assert obj["verdict"] == verdict
    assert str(status) in obj["reason"]
    assert obj["reason"].startswith("misconfigured: ") is (status < 429)
    assert obj["engine"] is None and obj["series"] == []
    assert srv.connections == 1


def test_probe_connection_refused_is_unreachable(hook: Hook) -> None:
    run = hook("probe", "--port", str(free_port()))
    assert run.code == 4, run.stderr
    rows = dict(line.split(None, 1) for line in run.stdout.splitlines())
    assert rows["verdict"] == "unreachable"
    assert "refused" in rows["reason"]
    # Nothing answered: only the rows that mean something (no engine, count, series).
    assert list(rows) == ["target", "verdict", "reason", "read_ms"]


def test_probe_target_never_shows_userinfo(hook: Hook, tmp_path: Path) -> None:
    with Loopback(serve(sample("vllm-http-plain-idle.txt"))) as srv:
        url = srv.url
        secret_url = url.replace("://", "://scraper:s3cr3t@")
        as_json = hook("probe", "--url", secret_url, "--json")
        as_text = hook("probe", "--url", secret_url)
    assert (as_json.code, as_text.code) == (0, 0)
    assert probe_json(as_json)["target"] == url
    for run in (as_json, as_text):
        assert "s3cr3t" not in run.stdout + run.stderr
        assert "scraper" not in run.stdout + run.stderr


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(("--bogus",), id="unknown-flag"),
        pytest.param(("--url", "ftp://127.0.0.1/metrics"), id="bad-scheme"),
        pytest.param(("--read-timeout", "soon"), id="bad-duration"),
        pytest.param(("--engine", "triton"), id="bad-engine"),
    ],
)
def test_probe_usage_error_exits_2(hook: Hook, args: tuple[str, ...]) -> None:
    run = hook("probe", *args)
    assert run.code == 2
    assert run.stdout == ""
    assert len(run.lines) == 1, run.stderr
    assert "Traceback" not in run.stderr
