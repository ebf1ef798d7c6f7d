"""`--source loads` (SGLang's /v1/loads), `--api-key-file`, and `probe --source both`,
end to end against real loopback servers."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.logs import events
from tests.support.loopback import Loopback, route, sample, sequence, serve
from tests.support.process import NO_HOLD, Hook

TIMELINE = ("--settle", "0.2", "--interval", "0.1", "--grace", "2.5", "--exit-reserve", "0.5")
KEY = "sk-drain-Zq81"


def loads(*ranks: tuple[int, int]) -> bytes:
    entries = [
        {"dp_rank": i, "num_running_reqs": run, "num_waiting_reqs": wait}
        for i, (run, wait) in enumerate(ranks)
    ]
    return json.dumps({"timestamp": "2026-11-30T00:00:00Z", "loads": entries}).encode()


STALE_METRICS = sample("sglang-mp-dp2.txt")  # what a lagging /metrics still says: 6


def test_wait_source_loads_reads_v1_loads_and_drains(hook: Hook) -> None:
    busy, idle = loads((2, 1), (0, 0)), loads((0, 0), (0, 0))
    heads: list[bytes] = []
    paths = {"/v1/loads": busy, "/metrics": STALE_METRICS}
    with Loopback(route(paths, heads)) as srv:
        first = hook("wait", "--source", "loads", "--port", str(srv.port), *TIMELINE)
        paths["/v1/loads"] = idle
        second = hook("wait", "--source", "loads", "--port", str(srv.port), *TIMELINE)
    # Busy by /v1/loads (3, never /metrics' 6) at every read; a read the load or the
    # deadline cut short is unknown ("timed out"), which holds the hook just the same.
    assert first.code == 3 and "outcome=deadline" in first.summary
    reads = [line for line in first.lines if " read=" in line]
    assert any("in_flight=3 " in line for line in reads), first.stderr
    for line in reads:
        assert "verdict=busy in_flight=3 " in line or "timed out" in line, line
    assert second.code == 0 and "reads=2" in second.summary  # /metrics (6) is never read
    assert heads and all(h.startswith(b"GET /v1/loads ") for h in heads), heads
    assert all(b"accept: application/json" in h.lower() for h in heads), heads


def test_api_key_file_is_sent_and_never_shown(hook: Hook, tmp_path: Path) -> None:
    key_file = tmp_path / "api-key"
    key_file.write_text(KEY + "\n")
    heads: list[bytes] = []
    with Loopback(route({"/v1/loads": loads((0, 0))}, heads)) as srv:
        run = hook(
            "wait", "--source", "loads", "--port", str(srv.port), "--api-key-file",
            str(key_file), "--log-format", "json", *TIMELINE,
        )  # fmt: skip
    assert run.code == 0, run.stderr
    assert all(f"authorization: bearer {KEY}".lower().encode() in h.lower() for h in heads)
    assert KEY not in run.stderr + run.stdout


def test_a_missing_api_key_file_is_a_usage_error(hook: Hook, tmp_path: Path) -> None:
    run = hook("wait", "--source", "loads", "--api-key-file", str(tmp_path / "nope"), *NO_HOLD)
    assert run.code == 2 and len(run.lines) == 1
    assert "--api-key-file" in run.stderr


def test_an_unauthorized_loads_read_is_a_wrong_target_held_to_d(hook: Hook) -> None:
    """A key the engine needs (CONTRACT §2): held to D, named with the fix."""
    with Loopback(serve(b'{"error": "Unauthorized"}', status=401, reason="Unauthorized")) as srv:
        url = f"http://127.0.0.1:{srv.port}/v1/loads"
        short = ("--settle", "0.2", "--interval", "0.2", "--grace", "3", "--exit-reserve", "1")
        run = hook("wait", "--source", "loads", "--url", url, "--log-format", "json", *short)
    assert run.code == 6
    (summary,) = events(run.stderr, "summary")
    assert (summary["outcome"], summary["exit"]) == ("misconfigured", 6)
    assert summary["reason"] == "misconfigured: HTTP 401: the engine wants a key: --api-key-file"


def test_loads_cannot_be_pinned_to_vllm_and_both_is_for_probe(hook: Hook) -> None:
    pinned = hook("wait", "--source", "loads", "--engine", "vllm", *NO_HOLD)
    both = hook("wait", "--source", "both", *NO_HOLD)
    assert (pinned.code, both.code) == (2, 2)
    assert "cannot read vLLM" in pinned.stderr
    assert "'both' is not one of 'auto', 'metrics', 'loads'" in both.stderr


def test_probe_shows_both_sources_side_by_side(hook: Hook) -> None:
    paths = {"/metrics": STALE_METRICS, "/v1/loads": loads((0, 0), (0, 0))}
    with Loopback(route(paths)) as srv:
        text = hook("probe", "--source", "both", "--port", str(srv.port))
        as_json = hook("probe", "--source", "both", "--json", "--port", str(srv.port))
    assert text.code == as_json.code == 1  # the exit code follows /metrics: busy
    table = text.stdout.splitlines()[:3]
    assert table[1].split()[:3] == ["metrics", "busy", "6"]
    assert table[2].split()[:3] == ["loads", "idle", "0"]
    obj = json.loads(as_json.stdout)
    assert (obj["verdict"], obj["in_flight"]) == ("busy", 6)
    assert (obj["loads"]["verdict"], obj["loads"]["in_flight"]) == ("idle", 0)
    assert obj["loads"]["target"].endswith("/v1/loads")
    assert obj["loads"]["engine"] == "sglang"


def test_loads_busy_then_idle_resets_confirmation(hook: Hook) -> None:
    bodies = [loads((1, 0)), loads((0, 0)), loads((0, 1)), loads((0, 0))]
    with Loopback(sequence(*(serve(b) for b in bodies))) as srv:
        url = f"http://127.0.0.1:{srv.port}/v1/loads"
        run = hook("wait", "--source", "loads", "--url", url, *TIMELINE)
    assert run.code == 0, run.stderr
    assert "reads=5" in run.summary and srv.connections == 5
