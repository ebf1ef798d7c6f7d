"""The engine table (CONTRACT §3) is the single source: docs/contract.md's gauge
table (its `gauges` part) says what it holds, docs/engines.md's /v1/loads table
(its `loads-fields` part) says which fields `--source loads` counts, and
`sample_kind` maps exactly its counted names (either separator) and nothing else."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from drainhook.engines.gauges import BY_NAME, ENGINE_NAMES, ENGINES, Engine, sample_kind
from tests.docparts import part

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / "docs" / "contract.md"
ENGINES_DOC = ROOT / "docs" / "engines.md"

ALL_COUNTED = [(e.name, n) for e in ENGINES for n in e.counted]


def _table_rows(text: str) -> list[list[str]]:
    """The cells of a markdown table's body rows (header and rule dropped)."""
    rows = [line for line in text.splitlines() if line.startswith("|")]
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows[2:]]


def _names(cell: str) -> set[str]:
    return set(re.findall(r"`([a-z]+:[a-z_]+)`", cell))


def test_contract_gauge_table_lists_the_engine_table() -> None:
    rows = _table_rows(part(CONTRACT, "gauges"))
    assert [row[0].lower() for row in rows] == list(ENGINE_NAMES)
    for row in rows:
        engine = BY_NAME[row[0].lower()]
        assert int(row[1]) == engine.default_port
        assert _names(row[2]) == set(engine.required)
        assert _names(row[3]) == set(engine.optional)
        if not engine.optional:
            assert row[3] == "—"


def test_engines_doc_loads_table_lists_the_loads_fields() -> None:
    """docs/engines.md "What counts": every /v1/loads field the code counts, whether
    it is required, and the /metrics gauge it stands for; nothing more."""
    rows = _table_rows(part(ENGINES_DOC, "loads-fields"))
    fields = [f for e in ENGINES for f in e.loads_fields]
    assert fields
    assert [row[0].strip("`") for row in rows] == [f.name for f in fields]
    for row, field in zip(rows, fields, strict=True):
        assert row[1] == ("yes" if field.required else "when present"), field.name
        assert field.gauge in _names(row[2]), field.name
        assert counted_name(field.gauge) is not None, field.gauge


def counted_name(raw: str) -> tuple[Engine, str] | None:
    """sample_kind, for counted gauges only."""
    hit = sample_kind(raw)
    return (hit[0], hit[1]) if hit is not None and hit[2] == "counted" else None


def test_engine_table_shape() -> None:
    assert len(set(ENGINE_NAMES)) == len(ENGINES)
    for engine in ENGINES:
        assert engine.counted == engine.required + engine.optional
        assert len(set(engine.counted)) == len(engine.counted)
        assert len(engine.required) >= 1
        for name in engine.counted:
            # The scanner finds candidates by this prefix alone.
            assert name.startswith(f"{engine.prefix}:num_"), name


@pytest.mark.parametrize(("engine", "name"), ALL_COUNTED)
def test_counted_name_maps_both_separators(engine: str, name: str) -> None:
    underscored = name.replace(":", "_", 1)
    for raw in (name, underscored):
        hit = counted_name(raw)
        assert hit is not None, raw
        assert (hit[0].name, hit[1]) == (engine, name)


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "vllm",
        "vllm:",
        "vllm_",
        "vllm:num_requests_waiting_by_reason",
        "vllm_num_requests_waiting_by_reason",
        "vllm:num_requests_kv_fetch_by_stage",
        "vllm:num_requests_running_total",
        "vllm:num_requests_runnin",
        "vllm:num_requests_running:",
        "vllm::num_requests_running",
        "vllm__num_requests_running",
        "vllmnum_requests_running",
        "vllm-num_requests_running",
        "xvllm:num_requests_running",
        "_vllm:num_requests_running",
        "VLLM:num_requests_running",
        "vllm:NUM_REQUESTS_RUNNING",
        "vllm:num_running_reqs",
        "sglang:num_requests_running",
        "sglang:num_decode_host_receive_queue_reqs",
        "sglang:num_retracted_reqs",
        "sglang_num_paused_reqs",
        "sglang:num_queue_reqs_by_reason",
        "sglang:num_prefill_prealloc_queue_reqs_total",
        "sglang:num_queue_reqs{",
        "num_requests_running",
        "vllm:num_requests_running ",
    ],
)
def test_counted_name_rejects_look_alikes(raw: str) -> None:
    assert counted_name(raw) is None


def test_engines_doc_lists_the_endpoints_that_carry_no_work() -> None:
    """docs/engines.md's list of the SGLang endpoints left out of the server's own
    count (CONTRACT §2a) is the gauge table's, written once in the code."""
    from drainhook.engines.gauges import SGLANG_NOT_WORK

    rows = _table_rows(part(ENGINES_DOC, "server-not-work"))
    assert [row[0].strip("`") for row in rows] == sorted(SGLANG_NOT_WORK)
    gauge = BY_NAME["sglang"].server
    assert gauge is not None and gauge.not_work is SGLANG_NOT_WORK
    assert sample_kind("sglang_http_requests_active") == (BY_NAME["sglang"], gauge.name, "server")
