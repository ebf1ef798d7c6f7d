"""Shapes that usually mean trouble: `probe` names them; the verdict stays the contract's."""

from __future__ import annotations

import json

from drainhook.exposition import scan
from drainhook.verdict import Verdict
from tests.conftest import Hook
from tests.loopback import Loopback, sample, serve

TWO_RUNS = b"""\
vllm:num_requests_running{engine="0",model_name="org/Old-7B"} 2.0
vllm:num_requests_running{engine="0",model_name="org/New-7B"} 0.0
vllm:num_requests_waiting{engine="0",model_name="org/Old-7B"} 0.0
vllm:num_requests_waiting{engine="0",model_name="org/New-7B"} 0.0
"""


def test_several_model_names_warn_of_a_reused_multiproc_dir() -> None:
    found = scan(TWO_RUNS)
    assert (found.verdict, found.in_flight) == (Verdict.BUSY, 2)  # still counted
    assert len(found.warnings) == 1
    assert "org/New-7B, org/Old-7B" in found.warnings[0]
    assert "PROMETHEUS_MULTIPROC_DIR" in found.warnings[0]


def test_one_model_name_gives_no_warning() -> None:
    assert scan(sample("vllm-single-dp2.txt")).warnings == ()
    assert scan(sample("sglang-mp-dp2.txt")).warnings == ()


def test_a_pinned_engine_that_does_not_match_warns() -> None:
    found = scan(sample("sglang-mp-dp2.txt"), "vllm")
    assert found.verdict is Verdict.UNKNOWN
    assert found.warnings == ("--engine vllm does not match the body, which has sglang gauges",)


def test_no_engine_gauges_at_all_warns() -> None:
    for body, engine in ((b"http_requests_total 3\n", "auto"), (b"up 1\n", "sglang")):
        found = scan(body, engine)
        assert found.verdict is Verdict.UNKNOWN
        assert "wrong port, or a routing proxy" in found.warnings[0]


def test_probe_prints_the_warnings(hook: Hook) -> None:
    with Loopback(serve(TWO_RUNS)) as srv:
        text = hook("probe", "--url", srv.url)
        as_json = hook("probe", "--json", "--url", srv.url)
    assert text.code == as_json.code == 1  # busy
    assert "warning    several model_name values" in text.stdout
    assert json.loads(as_json.stdout)["warnings"][0].startswith("several model_name values")


def test_wait_logs_each_warning_once(hook: Hook) -> None:
    # D = 1.5 s: 14 reads on the grid, at least 3 on a loaded machine.
    with Loopback(serve(TWO_RUNS)) as srv:
        run = hook(
            "wait", "--url", srv.url, "--settle", "0.1", "--interval", "0.1",
            "--grace", "2", "--exit-reserve", "0.5",
        )  # fmt: skip
    assert run.code == 3
    warned = [line for line in run.lines if line.startswith("drainhook warning=")]
    assert len(warned) == 1 and int(run.summary.split("reads=")[1].split()[0]) >= 3
