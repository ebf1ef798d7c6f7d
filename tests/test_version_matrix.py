"""The version matrix: one body per engine shape drainhook must read (tests/samples,
kind `built`; provenance per file in its expected.json and README.md), each
giving its engine, verdict and in-flight total both scanned directly and read
over real loopback HTTP by the hook's Reader, in one connection.

Each busy total is one a broken scanner would miss: V0's swapped requests,
`*_by_reason`, SGLang's priority breakdown and per-TP-rank duplicates would
each add to it; the old prealloc name and the gateway's `_` names would each
take from it.
"""

from __future__ import annotations

import math

import pytest

from drainhook.engines.exposition import scan
from drainhook.engines.verdict import Reading, Scan, Verdict
from drainhook.reading.read import Reader
from drainhook.reading.target import parse_url
from tests.support.loopback import EXPECTED, Loopback, samples_of, serve
from tests.support.loopback import sample as body

NAMES = samples_of("built")


def assert_expected(got: Scan | Reading, name: str) -> None:
    want = EXPECTED[name]
    assert (got.engine, got.verdict.value, got.in_flight) == (
        want["engine"],
        want["verdict"],
        want["in_flight"],
    ), got.reason
    assert got.reason is None
    assert got.in_flight is not None
    assert math.isclose(got.in_flight, math.fsum(s.value for s in got.series))


def test_the_matrix_covers_both_engines_idle_and_busy() -> None:
    # Every body in tests/samples has a manifest entry: tests/test_samples.py.
    assert len(NAMES) >= 12
    assert {EXPECTED[n]["engine"] for n in NAMES} == {"vllm", "sglang"}
    assert {EXPECTED[n]["verdict"] for n in NAMES} == {"idle", "busy"}


@pytest.mark.parametrize("name", NAMES)
def test_scanned(name: str) -> None:
    assert_expected(scan(body(name)), name)


@pytest.mark.parametrize("name", NAMES)
def test_scanned_pinned_to_its_engine(name: str) -> None:
    assert_expected(scan(body(name), EXPECTED[name]["engine"]), name)


@pytest.mark.parametrize("name", NAMES)
def test_read_over_loopback(name: str) -> None:
    with Loopback(serve(body(name))) as srv:
        reader = Reader(parse_url(srv.url))
        try:
            reading = reader.read(1.0)
        finally:
            reader.close()
        assert srv.connections == 1
    assert reading.read_ms > 0
    assert_expected(reading, name)


@pytest.mark.parametrize(
    ("name", "kept"),
    [
        # One series per tp_rank-free label set: the largest.
        (
            "sglang-all-schedulers-tp4.txt",
            {"sglang:num_running_reqs": 4.0, "sglang:num_queue_reqs": 2.0},
        ),
        # The priority="" totals only.
        (
            "sglang-priority-unified.txt",
            {"sglang:num_running_reqs": 2.0, "sglang:num_queue_reqs": 1.0},
        ),
        # The gateway's `_` names are the canonical gauges.
        (
            "sglang-grpc-gateway-openmetrics.txt",
            {"sglang:num_running_reqs": 0.0, "sglang:num_queue_reqs": 3.0},
        ),
        # The old name is counted under its own name.
        ("sglang-old-prefill-prealloc.txt", {"sglang:num_prefill_prealloc_queue_reqs": 2.0}),
        # Swapped (V0) and by-reason (V1) are not counted at all.
        (
            "vllm-v0-swapped.txt",
            {"vllm:num_requests_running": 2.0, "vllm:num_requests_waiting": 3.0},
        ),
        (
            "vllm-v1-by-reason.txt",
            {"vllm:num_requests_running": 1.0, "vllm:num_requests_waiting": 2.0},
        ),
    ],
)
def test_series_kept(name: str, kept: dict[str, float]) -> None:
    got = scan(body(name))
    by_name: dict[str, list[float]] = {}
    for s in got.series:
        by_name.setdefault(s.name, []).append(s.value)
    for gauge, value in kept.items():
        assert by_name[gauge] == [value]
    assert not any(n.endswith(("_swapped", "_by_reason")) for n in by_name)


def test_external_lb_rank_keeps_its_global_engine_label() -> None:
    got = scan(body("vllm-external-lb-rank2.txt"))
    assert {dict(s.labels)["engine"] for s in got.series} == {"2"}
    assert got.verdict is Verdict.BUSY
