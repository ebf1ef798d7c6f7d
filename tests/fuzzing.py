"""What the fuzz tests and benchmarks/fuzz.py share: a /v1/loads body to mutate,
the byte strings a mutation puts in, and the promises every verdict keeps."""

from __future__ import annotations

import json
import math

from drainhook.engines.verdict import Reading, Scan, Verdict

LOADS = json.dumps(
    {
        "timestamp": "2026-01-12T10:30:00+00:00",
        "version": "0.5.8",
        "dp_rank_count": 2,
        "loads": [
            {
                "dp_rank": r,
                "num_running_reqs": 2 * r,
                "num_waiting_reqs": 1,
                "disaggregation": {"mode": "prefill", "prefill_inflight_queue_reqs": r},
                "queues": {"waiting": 1, "grammar": 0, "paused": 0, "retracted": 0},
                "num_total_reqs": 2 * r + 1,
            }
            for r in range(2)
        ],
    }
).encode()

# Replacements that hit what the scanners read: values, label and JSON syntax, names.
CORRUPTIONS = (
    b"NaN",
    b"-1",
    b"+Inf",
    b"1e309",
    b'"',
    b"\\",
    b"{",
    b"}",
    b",",
    b"=",
    b"\x00",
    b"\xff",
    b"\r",
    b"#",
    b" ",
    b"[",
    b"]",
    b"null",
    b"true",
    b"vllm:num_requests_running",
    b"sglang_num_queue_reqs",
    b'priority="1"',
    b'tp_rank="9"',
    b'"num_waiting_reqs": ',
)


def check(got: Scan | Reading) -> None:
    """Raise AssertionError when a verdict breaks its promises (CONTRACT §2)."""
    assert got.verdict in (Verdict.IDLE, Verdict.BUSY, Verdict.UNKNOWN, Verdict.UNREACHABLE)
    if got.verdict in (Verdict.IDLE, Verdict.BUSY):
        assert got.reason is None
        assert got.in_flight is not None and math.isfinite(got.in_flight)
        scheduler = math.fsum(s.value for s in got.series)
        if got.signals is None:
            assert got.in_flight == scheduler
        else:  # CONTRACT §2a: the largest signal, each finite and >= 0
            assert got.signals.scheduler == scheduler
            shown = [got.signals.scheduler, got.signals.server, got.signals.connections]
            values = [v for v in shown if v is not None]
            assert all(math.isfinite(v) and v >= 0 for v in values)
            assert got.in_flight == max(values)
        assert (got.in_flight == 0) == (got.verdict is Verdict.IDLE)
        assert all(math.isfinite(s.value) and s.value >= 0 for s in got.series)
    else:
        assert got.in_flight is None
        assert got.reason and "\n" not in got.reason
