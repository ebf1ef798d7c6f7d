"""Fuzzing the two body scanners: whatever the bytes, no exception, and a
verdict that keeps its promises (CONTRACT §2): idle, busy or unknown; a total
only with idle or busy, equal to the sum of the counted series, zero exactly
when idle; a reason exactly when unknown.

Inputs: random bytes, and the tests/samples bodies mutated (bytes flipped,
cut short, lines duplicated or dropped, label sets and values corrupted);
random JSON and mutated real /v1/loads bodies for `scan_loads`. Derandomized
and small, for CI; benchmarks/fuzz.py runs 100,000 inputs.
"""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drainhook.engines.exposition import scan
from drainhook.engines.loads import scan_loads
from drainhook.engines.verdict import Verdict
from drainhook.reading.read import Reader
from drainhook.reading.target import parse_url
from tests.support.fuzzing import CORRUPTIONS, LOADS, check
from tests.support.loopback import EXPECTED, Loopback, sample, serve

FAST = settings(
    max_examples=400,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
NAMES = sorted(EXPECTED)
BODIES = {n: sample(n) for n in NAMES}
ENGINES = ("auto", "vllm", "sglang")


def mutate(data: st.DataObject, body: bytes) -> bytes:
    """A few random edits of body, each one of the kinds below."""
    out = bytearray(body)
    for _ in range(data.draw(st.integers(1, 4), "edits")):
        kind = data.draw(st.sampled_from(["flip", "cut", "dup", "drop", "corrupt"]), "kind")
        if not out:
            break
        at = data.draw(st.integers(0, len(out) - 1), "at")
        if kind == "flip":
            out[at] ^= 1 << data.draw(st.integers(0, 7), "bit")
        elif kind == "cut":
            del out[at:]
        elif kind in ("dup", "drop"):
            start = out.rfind(b"\n", 0, at) + 1
            end = out.find(b"\n", at)
            end = len(out) if end < 0 else end + 1
            line = bytes(out[start:end])
            if kind == "dup":
                out[start:start] = line * data.draw(st.integers(1, 50), "times")
            else:
                del out[start:end]
        else:
            width = data.draw(st.integers(0, 8), "width")
            out[at : at + width] = data.draw(st.sampled_from(CORRUPTIONS), "with")
    return bytes(out)


@FAST
@given(st.binary(max_size=4096), st.sampled_from(ENGINES))
def test_random_bytes(body: bytes, engine: str) -> None:
    check(scan(body, engine))


@FAST
@given(st.data(), st.sampled_from(NAMES), st.sampled_from(ENGINES))
def test_mutated_samples(data: st.DataObject, name: str, engine: str) -> None:
    check(scan(mutate(data, BODIES[name]), engine))


@FAST
@given(st.binary(max_size=2048))
def test_loads_random_bytes(body: bytes) -> None:
    check(scan_loads(body))


KEYS = (
    *("loads", "dp_rank", "num_running_reqs", "num_waiting_reqs", "queues", "grammar"),
    *("disaggregation", "prefill_inflight_queue_reqs", "x"),
)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**30), 10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(KEYS),
            inner,
            max_size=5,
        )
    ),
    max_leaves=20,
)


@FAST
@given(JSON)
def test_loads_random_json(document: object) -> None:
    check(scan_loads(json.dumps(document).encode()))


@FAST
@given(st.data())
def test_loads_mutated(data: st.DataObject) -> None:
    check(scan_loads(mutate(data, LOADS)))


def _fuzzed_bodies(count: int) -> list[bytes]:
    """Seeded mutations of the samples, for the loopback case."""
    rng = random.Random(20260112)
    bodies = []
    for _ in range(count):
        out = bytearray(BODIES[rng.choice(NAMES)])
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(out))
            choice = rng.random()
            if choice < 0.4:
                out[at] ^= 1 << rng.randrange(8)
            elif choice < 0.6:
                del out[at:]
            else:
                out[at : at + rng.randint(0, 8)] = rng.choice(CORRUPTIONS)
            if not out:
                out = bytearray(b"\n")
        bodies.append(bytes(out))
    return bodies


@pytest.mark.parametrize("body", _fuzzed_bodies(6), ids=lambda b: f"{len(b)}B")
def test_fuzzed_body_over_loopback(body: bytes) -> None:
    with Loopback(serve(body)) as srv:
        reader = Reader(parse_url(srv.url))
        try:
            reading = reader.read(1.0)
        finally:
            reader.close()
        assert srv.connections == 1
    check(reading)
    assert reading.verdict is not Verdict.UNREACHABLE  # a 2xx answer was read
    want = scan(body)
    assert (reading.verdict, reading.in_flight) == (want.verdict, want.in_flight)
