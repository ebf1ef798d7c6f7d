"""SGLang's /v1/loads (`--source loads`): `scan_loads` on bodies shaped as SGLang's
own code builds them (docs/engines.md names the commits), hostile bodies, and
`read_api_key` for `--api-key-file`.

Each busy case asserts a total that only the right fields give: a scanner that
also counted the disaggregation copies of the waiting queues, `queues.waiting`,
`num_total_reqs` or `aggregate` would give a larger one.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from drainhook.engines.gauges import BY_NAME
from drainhook.engines.loads import MAX_RANKS, MAX_VALUES, scan_loads
from drainhook.engines.verdict import Scan, Verdict
from drainhook.errors import UsageError
from drainhook.reading.auth import API_KEY_MAX_BYTES, read_api_key
from tests.support.loopback import Loopback, route
from tests.support.process import base_env


def rank_2026_01(dp_rank: int, running: int, waiting: int, **disagg: int) -> dict[str, Any]:
    """One entry as PR #16976 (January 2026) serves it: dataclasses.asdict of
    GetLoadsReqOutput without None values and without its timestamp, plus
    num_total_reqs; `prefill_prealloc_queue_reqs` names the bootstrap queue."""
    d = {
        "mode": "null",
        "prefill_prealloc_queue_reqs": 0,
        "prefill_inflight_queue_reqs": 0,
        "decode_prealloc_queue_reqs": 0,
        "decode_transfer_queue_reqs": 0,
        "decode_retracted_queue_reqs": 0,
        "kv_transfer_speed_gb_s": 0.0,
        "kv_transfer_latency_ms": 0.0,
    }
    d.update(disagg)
    return {
        "dp_rank": dp_rank,
        "num_running_reqs": running,
        "num_waiting_reqs": waiting,
        "num_used_tokens": 1024 * running,
        "max_total_num_tokens": 500000,
        "token_usage": 0.0021,
        "gen_throughput": 41.25,
        "cache_hit_rate": 0.5,
        "utilization": 0.25,
        "max_running_requests": 4096,
        "memory": {
            "weight_gb": 15.25,
            "kv_cache_gb": 48.0,
            "graph_gb": 0.5,
            "token_capacity": 500000,
        },
        "disaggregation": d,
        "queues": {"waiting": waiting, "grammar": 0, "paused": 0, "retracted": 0},
        "num_total_reqs": running + waiting,
    }


def body_2026_01(*ranks: dict[str, Any]) -> bytes:
    """The PR #16976 response: dp_rank_count, loads and an aggregate."""
    loads = list(ranks)
    return json.dumps(
        {
            "timestamp": "2026-01-12T10:30:00.123456+00:00",
            "version": "0.5.8",
            "dp_rank_count": len(loads),
            "loads": loads,
            "aggregate": {
                "total_running_reqs": sum(r["num_running_reqs"] for r in loads),
                "total_waiting_reqs": sum(r["num_waiting_reqs"] for r in loads),
                "total_reqs": sum(r["num_total_reqs"] for r in loads),
                "avg_token_usage": 0.0021,
                "avg_throughput": 41.25,
                "avg_utilization": 0.25,
            },
        }
    ).encode()


def rank_latest(
    dp_rank: int, running: int, waiting: int, grammar: int = 0, **disagg: Any
) -> dict[str, Any]:
    """One entry as LoadSnapshot.to_dict builds it on main (v1_loads.py at
    0564b5215b33): timestamp kept, no num_total_reqs, the bootstrap queue
    renamed, queues.prealloc_ready added."""
    d: dict[str, Any] = {
        "mode": "null",
        "prefill_bootstrap_queue_reqs": 0,
        "prefill_inflight_queue_reqs": 0,
        "decode_prealloc_queue_reqs": 0,
        "decode_transfer_queue_reqs": 0,
        "decode_retracted_queue_reqs": 0,
        "kv_transfer_speed_gb_s": 0.0,
        "kv_transfer_latency_ms": 0.0,
    }
    d.update(disagg)
    return {
        "timestamp": 1768213800.25,
        "dp_rank": dp_rank,
        "num_running_reqs": running,
        "num_waiting_reqs": waiting,
        "num_waiting_uncached_tokens": 0,
        "num_used_tokens": 0,
        "num_total_tokens": 0,
        "num_active_tokens": 0,
        "max_total_num_tokens": 500000,
        "max_running_requests": 4096,
        "token_usage": 0.0,
        "gen_throughput": 0.0,
        "cache_hit_rate": 0.0,
        "utilization": 0.0,
        "total_prefill_uncached_tokens": 123456,
        "total_prefill_busy_us": 9876543,
        "disaggregation": d,
        "queues": {
            "waiting": waiting,
            "grammar": grammar,
            "paused": 0,
            "retracted": 3,
            "prealloc_ready": 0,
        },
    }


def body_latest(*ranks: dict[str, Any]) -> bytes:
    return json.dumps(
        {
            "timestamp": "2026-07-31T08:00:00.000001+00:00",
            "version": "0.5.23",
            "accelerator": "NVIDIA H200",
            "num_accelerators": 8,
            "loads": list(ranks),
        }
    ).encode()


def assert_scan(got: Scan, verdict: Verdict, in_flight: float | None) -> None:
    assert (got.verdict, got.engine, got.in_flight) == (verdict, "sglang", in_flight), got.reason
    if verdict is Verdict.UNKNOWN:
        assert got.reason and "\n" not in got.reason
    else:
        assert got.reason is None
        assert got.in_flight == math.fsum(s.value for s in got.series)


# ---- the engine table holds the mapping -------------------------------------


def test_loads_fields_are_defined_once_on_the_sglang_engine() -> None:
    sglang = BY_NAME["sglang"]
    names = {f.name: f.gauge for f in sglang.loads_fields}
    assert names == {
        "num_running_reqs": "sglang:num_running_reqs",
        "num_waiting_reqs": "sglang:num_queue_reqs",
        "queues.grammar": "sglang:num_grammar_queue_reqs",
        "disaggregation.prefill_inflight_queue_reqs": "sglang:num_prefill_inflight_queue_reqs",
    }
    assert {f.name for f in sglang.loads_fields if f.required} == {
        "num_running_reqs",
        "num_waiting_reqs",
    }
    # Every gauge a field stands for is one the /metrics scanner counts.
    assert {f.gauge for f in sglang.loads_fields} <= set(sglang.counted)
    assert BY_NAME["vllm"].loads_fields == ()


# ---- real shapes ------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "verdict", "in_flight"),
    [
        pytest.param(body_2026_01(rank_2026_01(0, 0, 0)), Verdict.IDLE, 0.0, id="2026-01-idle"),
        pytest.param(
            body_2026_01(rank_2026_01(0, 5, 2), rank_2026_01(1, 0, 1)),
            Verdict.BUSY,
            8.0,
            id="2026-01-dp2-busy",
        ),
        pytest.param(
            # Prefill: num_waiting_reqs already holds the bootstrap queue (4 of
            # its 6); the inflight queue (KV still being pulled) is not in it.
            body_2026_01(
                rank_2026_01(
                    0,
                    0,
                    6,
                    mode="prefill",
                    prefill_prealloc_queue_reqs=4,
                    prefill_inflight_queue_reqs=3,
                )
            ),
            Verdict.BUSY,
            9.0,
            id="2026-01-prefill",
        ),
        pytest.param(
            # Decode: prealloc + transfer + retracted are inside num_waiting_reqs.
            body_2026_01(
                rank_2026_01(
                    0,
                    2,
                    7,
                    mode="decode",
                    decode_prealloc_queue_reqs=3,
                    decode_transfer_queue_reqs=2,
                    decode_retracted_queue_reqs=1,
                )
            ),
            Verdict.BUSY,
            9.0,
            id="2026-01-decode",
        ),
        pytest.param(
            body_latest(rank_latest(0, 0, 0), rank_latest(1, 0, 0)),
            Verdict.IDLE,
            0.0,
            id="latest-idle",
        ),
        pytest.param(
            body_latest(
                rank_latest(0, 1, 0, grammar=2),
                rank_latest(1, 0, 0, mode="prefill", prefill_inflight_queue_reqs=1),
            ),
            Verdict.BUSY,
            4.0,
            id="latest-grammar-and-inflight",
        ),
        pytest.param(
            # ?include=core: no sections at all; the optional fields are absent.
            json.dumps(
                {"loads": [{"dp_rank": 0, "num_running_reqs": 0, "num_waiting_reqs": 3}]}
            ).encode(),
            Verdict.BUSY,
            3.0,
            id="include-core",
        ),
        pytest.param(
            # The gRPC bridge's shape: a bare list of rank entries.
            json.dumps([{"dp_rank": 0, "num_running_reqs": 0, "num_waiting_reqs": 0}]).encode(),
            Verdict.IDLE,
            0.0,
            id="bare-list",
        ),
    ],
)
def test_real_shapes(body: bytes, verdict: Verdict, in_flight: float) -> None:
    assert_scan(scan_loads(body), verdict, in_flight)


def test_series_carry_field_names_and_dp_rank() -> None:
    got = scan_loads(body_latest(rank_latest(0, 2, 1), rank_latest(3, 0, 0, grammar=1)))
    assert [(s.name, s.labels, s.value) for s in got.series] == [
        ("num_running_reqs", (("dp_rank", "0"),), 2.0),
        ("num_waiting_reqs", (("dp_rank", "0"),), 1.0),
        ("queues.grammar", (("dp_rank", "0"),), 0.0),
        ("disaggregation.prefill_inflight_queue_reqs", (("dp_rank", "0"),), 0.0),
        ("num_running_reqs", (("dp_rank", "3"),), 0.0),
        ("num_waiting_reqs", (("dp_rank", "3"),), 0.0),
        ("queues.grammar", (("dp_rank", "3"),), 1.0),
        ("disaggregation.prefill_inflight_queue_reqs", (("dp_rank", "3"),), 0.0),
    ]
    assert got.in_flight == 4.0


def test_rank_without_a_usable_dp_rank_is_labelled_by_position() -> None:
    body = json.dumps(
        [
            {"num_running_reqs": 1, "num_waiting_reqs": 0},
            {"dp_rank": True, "num_running_reqs": 0, "num_waiting_reqs": 0},
            {"dp_rank": 10**100, "num_running_reqs": 0, "num_waiting_reqs": 0},
        ]
    ).encode()
    got = scan_loads(body)
    assert {s.labels for s in got.series} == {(("dp_rank", str(i)),) for i in range(3)}
    assert_scan(got, Verdict.BUSY, 1.0)


def test_float_counts_and_integers_are_read_alike() -> None:
    a = scan_loads(b'{"loads": [{"num_running_reqs": 2, "num_waiting_reqs": 0}]}')
    b = scan_loads(b'{"loads": [{"num_running_reqs": 2.0, "num_waiting_reqs": 0e0}]}')
    assert a == b
    assert_scan(a, Verdict.BUSY, 2.0)


# ---- hostile and malformed bodies -------------------------------------------

OK = {"dp_rank": 0, "num_running_reqs": 0, "num_waiting_reqs": 0}


def _with(**fields: Any) -> bytes:
    return json.dumps({"loads": [{**OK, **fields}]}).encode()


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"", "an empty or cut body"),  # a 204, or a close before the body
        (b"  \n", "an empty or cut body"),
        (b"# HELP sglang:num_running_reqs\nsglang:num_running_reqs 0\n", "not JSON"),
        (b'{"loads": [', "an empty or cut body"),  # an HTTP/1.0 body cut by a close
        (b'[{"dp_rank": 0, "num_runn', "an empty or cut body"),
        (b"<html><body>502 Bad Gateway</body></html>", "not JSON"),
        (b"\xff\xfe\x00garbage", "not JSON"),
        (b"null", "not an object or a list"),
        (b"0", "not an object or a list"),
        (b'"loads"', "not an object or a list"),
        (b"{}", "no loads list"),
        (b'{"loads": {"0": {}}}', "no loads list"),
        (b'{"loads": []}', "empty"),
        (b"[]", "empty"),
        (b'{"loads": [0]}', "rank entry 0 is not an object"),
        (b'{"loads": [{"num_running_reqs": 0}]}', "required field missing: num_waiting_reqs"),
        (b'{"loads": [{"num_waiting_reqs": 0}]}', "required field missing: num_running_reqs"),
        (_with(num_running_reqs=None), "required field missing: num_running_reqs"),
        (b'{"loads": [{"num_running_reqs": NaN, "num_waiting_reqs": 0}]}', "is nan"),
        (b'{"loads": [{"num_running_reqs": Infinity, "num_waiting_reqs": 0}]}', "is inf"),
        (b'{"loads": [{"num_running_reqs": -Infinity, "num_waiting_reqs": 0}]}', "is -inf"),
        (b'{"loads": [{"num_running_reqs": 1e999, "num_waiting_reqs": 0}]}', "is inf"),
        (
            b'{"loads": [{"num_running_reqs": ' + b"9" * 5000 + b', "num_waiting_reqs": 0}]}',
            "is inf",
        ),
        (_with(num_waiting_reqs=-1), "negative"),
        (_with(num_waiting_reqs="3"), "not a number"),
        (_with(num_waiting_reqs=True), "not a number"),
        (_with(num_waiting_reqs=[1]), "not a number"),
        (_with(queues={"grammar": -2}), "queues.grammar is negative"),
        (_with(queues={"grammar": "x"}), "queues.grammar is not a number"),
        (_with(queues=[0, 1]), "queues is not an object"),
        (_with(disaggregation={"prefill_inflight_queue_reqs": math.nan}), "is nan"),
        (b"[" * 100_000 + b"]" * 100_000, "JSON nested too deep"),
        (json.dumps({"loads": [OK] * (MAX_RANKS + 1)}).encode(), f"more than {MAX_RANKS}"),
        (b"[" + b"0," * MAX_VALUES + b"0]", f"more than {MAX_VALUES} JSON values"),
    ],
)
def test_malformed_is_unknown(body: bytes, reason: str) -> None:
    """Unknown, always; a body that is no load report at all names no engine (the
    signal is then missing, CONTRACT §2a), one that is SGLang's but cannot be counted
    names SGLang (doubt)."""
    got = scan_loads(body)
    not_loads = reason in ("not JSON", "not an object or a list", "no loads list")
    assert (got.reason or "").startswith("not a load report: ") is not_loads
    assert (got.verdict, got.engine, got.in_flight) == (
        Verdict.UNKNOWN, None if not_loads else "sglang", None
    )  # fmt: skip
    assert got.reason is not None and reason in got.reason and "\n" not in got.reason
    assert got.series == ()


def test_one_bad_rank_makes_the_whole_body_unknown() -> None:
    """An idle rank does not outvote a rank whose count cannot be read."""
    got = scan_loads(
        body_latest(rank_latest(0, 0, 0), {**rank_latest(1, 0, 0), "num_running_reqs": -1})
    )
    assert_scan(got, Verdict.UNKNOWN, None)


def test_finite_counts_whose_sum_overflows_are_unknown() -> None:
    got = scan_loads(_with(num_running_reqs=1e308, num_waiting_reqs=1e308))
    assert_scan(got, Verdict.UNKNOWN, None)
    assert got.reason == "counted total is not finite"


def test_exactly_max_ranks_is_read() -> None:
    ranks = [{**OK, "dp_rank": i} for i in range(MAX_RANKS)]
    ranks[-1]["num_waiting_reqs"] = 1
    assert_scan(scan_loads(json.dumps({"loads": ranks}).encode()), Verdict.BUSY, 1.0)


def test_other_buffers_are_accepted() -> None:
    body = body_latest(rank_latest(0, 1, 1))
    for buf in (bytearray(body), memoryview(body)):
        assert_scan(scan_loads(buf), Verdict.BUSY, 2.0)


# ---- --api-key-file ---------------------------------------------------------

SECRET = "sk-drainhook-0123456789abcdef"


def test_api_key_is_read_and_stripped(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_text(f"  {SECRET}\n")
    assert read_api_key(path) == SECRET


def test_api_key_through_a_secret_volume_symlink(tmp_path: Path) -> None:
    """A mounted Secret's file is a symlink into ..data/: it is followed."""
    (tmp_path / "..data").mkdir()
    (tmp_path / "..data" / "api-key").write_text(SECRET)
    (tmp_path / "api-key").symlink_to("..data/api-key")
    assert read_api_key(tmp_path / "api-key") == SECRET


def _refused(path: Path, words: str) -> None:
    with pytest.raises(UsageError) as info:
        read_api_key(path)
    message = str(info.value)
    assert words in message and str(path) in message
    assert "\n" not in message and SECRET not in message and "sk-" not in message


def test_api_key_file_missing(tmp_path: Path) -> None:
    _refused(tmp_path / "nope", "No such file")


def test_api_key_file_is_a_directory(tmp_path: Path) -> None:
    _refused(tmp_path, "not a regular file")


def test_api_key_file_is_a_fifo_without_a_writer(tmp_path: Path) -> None:
    """Refused at once: a FIFO's plain open would block until a writer came."""
    path = tmp_path / "fifo"
    os.mkfifo(path)
    _refused(path, "not a regular file")


def test_api_key_file_is_a_device() -> None:
    _refused(Path("/dev/zero"), "not a regular file")


def test_api_key_file_too_large(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_text(SECRET + "x" * API_KEY_MAX_BYTES)
    _refused(path, f"over {API_KEY_MAX_BYTES} bytes")


def test_api_key_file_at_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_text("k" * API_KEY_MAX_BYTES)
    assert read_api_key(path) == "k" * API_KEY_MAX_BYTES


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"", "is empty"),
        (b" \n\t\n", "is empty"),
        (SECRET.encode() + b"\nsecond-line", "control character"),
        (SECRET.encode() + b"\r\nX-Injected: 1", "control character"),
        (SECRET.encode() + b"\x00", "control character"),
        ("sk-clé".encode(), "not ASCII"),
    ],
)
def test_api_key_file_unusable(tmp_path: Path, content: bytes, words: str) -> None:
    path = tmp_path / "key"
    path.write_bytes(content)
    _refused(path, words)


# Root without capabilities: the bounding set emptied, an exec'd root process
# gets none (no CAP_DAC_OVERRIDE), so file modes apply to it as to any uid.
DROP_CAPABILITIES = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--"]


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=60, env=base_env(), check=False
    )


def test_api_key_file_unreadable(entry: list[str], tmp_path: Path) -> None:
    """A key file the hook's user may not read (a Secret mounted 0600 for another
    uid): `--api-key-file` is a usage error naming the file and the cause, with
    no key in it. As root the hook runs without capabilities (setpriv), against
    a 0600 file of uid 65534; the same run with them reads the key (the control)."""
    path = tmp_path / "key"
    path.write_text(SECRET)
    path.chmod(0o600)
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)
        if shutil.which("setpriv") is None:
            pytest.skip("setpriv is not installed: root cannot be made to lack CAP_DAC_OVERRIDE")
        prefix = DROP_CAPABILITIES
    else:
        path.chmod(0)
        prefix = []
    heads: list[bytes] = []
    with Loopback(route({"/v1/loads": json.dumps({"loads": [OK]}).encode()}, heads)) as srv:
        argv = [
            *entry,
            "probe",
            "--source",
            "loads",
            "--url",
            f"http://127.0.0.1:{srv.port}/v1/loads",
        ]
        argv += ["--api-key-file", str(path)]
        denied = _run([*prefix, *argv])
        control = _run(argv) if prefix else None
    assert denied.returncode == 2, denied.stderr
    assert denied.stdout == ""
    (line,) = denied.stderr.splitlines()
    assert "--api-key-file" in line and str(path) in line
    assert "not readable" in line or "Permission denied" in line, line
    assert SECRET not in line and "sk-" not in line
    if control is not None:
        assert control.returncode == 0, control.stderr
        assert len(heads) == 1 and f"bearer {SECRET}".encode() in heads[0].lower()
    else:
        assert heads == []


def test_a_body_too_large_to_parse_before_the_deadline_is_unknown() -> None:
    body = json.dumps(
        {"loads": [{**OK, "dp_rank": i, "pad": "x" * 400} for i in range(4000)]}
    ).encode()  # about 1.7 MiB: some 140 ms to parse at the budgeted rate
    now = 100.0
    late = scan_loads(body, until=now + 0.05, clock=lambda: now)
    assert (late.verdict, late.in_flight) == (Verdict.UNKNOWN, None)
    assert late.reason is not None and "no time left to parse" in late.reason
    in_time = scan_loads(body, until=now + 1.0, clock=lambda: now)
    assert (in_time.verdict, in_time.in_flight) == (Verdict.IDLE, 0)


def test_a_body_over_the_byte_cap_is_unknown_before_parsing() -> None:
    body = b'{"loads": [' + b" " * (4 * 1024 * 1024) + b"]}"
    found = scan_loads(body)
    assert found.verdict is Verdict.UNKNOWN
    assert found.reason is not None and "over 4 MiB" in found.reason
