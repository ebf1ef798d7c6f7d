"""The one rule from counted values to a verdict (drainhook.engines.verdict): the value
checks and the sum, and /metrics, /v1/loads and several targets all keeping it."""

from __future__ import annotations

import json
import math

import pytest

from drainhook.engines.exposition import scan
from drainhook.engines.loads import scan_loads
from drainhook.engines.verdict import Reading, Series, Verdict, count, value_problem
from drainhook.reading.rounds import combine_readings

HUGE = 1e308  # finite; two of them are not


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (math.nan, "g is nan"),
        (math.inf, "g is inf"),
        (-math.inf, "g is -inf"),
        (-1.0, "g is negative (-1)"),
        (-0.5, "g is negative (-0.5)"),
        (0.0, None),
        (-0.0, None),
        (HUGE, None),
    ],
)
def test_value_problem(value: float, problem: str | None) -> None:
    assert value_problem("g", value) == problem


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], (Verdict.IDLE, 0.0, None)),
        ([0.0, 0.0], (Verdict.IDLE, 0.0, None)),
        ([0.0, 2.0, 1.0], (Verdict.BUSY, 3.0, None)),
        ([1e-300], (Verdict.BUSY, 1e-300, None)),  # anything above 0 is work
        ([HUGE, HUGE], (Verdict.UNKNOWN, None, "counted total is not finite")),
        ([math.inf, -math.inf], (Verdict.UNKNOWN, None, "counted total is not finite")),
    ],
    ids=["none", "zeros", "busy", "tiny", "overflow", "inf-minus-inf"],
)
def test_count(values: list[float], expected: tuple[Verdict, float | None, str | None]) -> None:
    assert count(values) == expected


def exposition_body(*values: float) -> bytes:
    lines = [f'vllm:num_requests_running{{engine="{i}"}} {v!r}' for i, v in enumerate(values)]
    return ("\n".join([*lines, "vllm:num_requests_waiting 0"]) + "\n").encode()


def loads_body(*values: float) -> bytes:
    ranks = [
        {"dp_rank": i, "num_running_reqs": v, "num_waiting_reqs": 0} for i, v in enumerate(values)
    ]
    return json.dumps({"loads": ranks}).encode()


def round_of(*values: float) -> Reading:
    """Several targets, each one DP rank's engine holding one value."""
    parts = [
        (
            f"http://127.0.0.1:{8000 + i}/metrics",
            Reading(
                Verdict.BUSY,
                "vllm",
                v,
                (Series("vllm:num_requests_running", (("engine", str(i)),), v),),
                None,
                1.0,
            ),
        )
        for i, v in enumerate(values)
    ]
    return combine_readings(parts, set())


@pytest.mark.parametrize(
    ("values", "verdict", "total", "reason"),
    [
        ((0.0, 0.0), Verdict.IDLE, 0.0, None),
        ((2.0, 3.0), Verdict.BUSY, 5.0, None),
        ((HUGE, HUGE), Verdict.UNKNOWN, None, "counted total is not finite"),
    ],
    ids=["idle", "busy", "overflow"],
)
def test_the_three_counters_agree(
    values: tuple[float, ...], verdict: Verdict, total: float | None, reason: str | None
) -> None:
    found = [
        scan(exposition_body(*values)),
        scan_loads(loads_body(*values)),
        round_of(*values),
    ]
    for each in found:
        assert (each.verdict, each.in_flight, each.reason) == (verdict, total, reason)


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_both_scanners_say_the_same_about_a_bad_value(bad: float) -> None:
    text = scan(exposition_body(bad))
    loads = scan_loads(loads_body(bad))
    assert text.verdict is loads.verdict is Verdict.UNKNOWN
    assert text.reason == value_problem("vllm:num_requests_running", bad)
    assert loads.reason == value_problem("num_running_reqs", bad)
