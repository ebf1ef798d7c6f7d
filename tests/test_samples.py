"""Real /metrics bodies (tests/samples, kinds `generated` and `captured`) give the
verdict, engine and in-flight total tests/samples/expected.json records.

Each body is scanned directly and also served over real loopback HTTP and read
with the Reader, as the hook reads it; the read must cost exactly one
connection. The SGLang bodies its HTTP server sends gzipped are also served so.
"""

from __future__ import annotations

import gzip
import math

import pytest

from drainhook.engines.exposition import MetricsScanner, scan
from drainhook.engines.verdict import Reading, Scan, Verdict
from drainhook.reading.read import Reader
from drainhook.reading.target import parse_url
from tests.loopback import EXPECTED, SAMPLES, Loopback, sample, samples_of, serve

KINDS = {"generated", "captured", "built"}
NAMES = samples_of("generated", "captured")
# The generator's provenance records how the engine's HTTP route encoded the body.
GZIPPED = [n for n in NAMES if "content-encoding='gzip'" in EXPECTED[n]["provenance"]]


def assert_expected(got: Scan | Reading, name: str) -> None:
    want = EXPECTED[name]
    assert (got.engine, got.verdict.value, got.in_flight) == (
        want["engine"],
        want["verdict"],
        want["in_flight"],
    ), got.reason
    if got.verdict is Verdict.UNKNOWN:
        assert got.reason
    else:
        assert got.reason is None
        assert got.in_flight is not None and got.signals is not None
        # The scheduler's count is its series' sum; the total, the larger of it
        # and the server's own count (CONTRACT §2a), where the body has one.
        scheduler = math.fsum(s.value for s in got.series)
        assert got.signals.scheduler is not None
        assert math.isclose(got.signals.scheduler, scheduler)
        server = got.signals.server
        assert math.isclose(got.in_flight, max(scheduler, server or 0.0))
        if got.engine == "vllm":
            assert server is None  # vLLM's is GET /load, not in /metrics


def read_once(body: bytes, headers: dict[str, str] | None = None, engine: str = "auto") -> Reading:
    """Serve body on loopback and read it once with the hook's Reader."""
    with Loopback(serve(body, headers=headers)) as srv:
        reader = Reader(parse_url(srv.url), scanner=MetricsScanner(engine))
        try:
            reading = reader.read(1.0)
        finally:
            reader.close()
        assert srv.connections == 1
    assert reading.read_ms > 0
    return reading


def test_every_sample_has_an_expectation_with_provenance() -> None:
    """One manifest for every body in tests/samples, each with where it came from."""
    bodies = {p.name for p in SAMPLES.glob("*.txt")}
    assert bodies == set(EXPECTED)
    for name, entry in EXPECTED.items():
        assert set(entry) == {"engine", "in_flight", "kind", "provenance", "verdict"}, name
        assert entry["kind"] in KINDS, name
        assert len(entry["provenance"]) > 40, name
        assert (entry["in_flight"] is None) == (entry["verdict"] == "unknown"), name
    # Every verdict a real body can give is represented, and both engines.
    assert {EXPECTED[n]["verdict"] for n in NAMES} == {"idle", "busy", "unknown"}
    assert {EXPECTED[n]["engine"] for n in NAMES} == {"vllm", "sglang", None}
    assert GZIPPED


def test_samples_readme_lists_every_sample_with_its_verdict() -> None:
    """tests/samples/README.md's table says what the manifest says, file by file."""
    rows = {}
    for line in (SAMPLES / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) >= 5:
            rows[cells[0].strip("`")] = cells[1:5]
    assert set(rows) == set(EXPECTED)
    for name, (kind, engine, verdict, count) in rows.items():
        want = EXPECTED[name]
        assert kind == want["kind"], name
        assert engine == (want["engine"] or "—"), name
        assert verdict == want["verdict"], name
        assert count == ("—" if want["in_flight"] is None else f"{want['in_flight']:g}"), name


@pytest.mark.parametrize("name", NAMES)
def test_sample_scanned(name: str) -> None:
    assert_expected(scan(sample(name)), name)


@pytest.mark.parametrize("name", NAMES)
def test_sample_read_over_loopback(name: str) -> None:
    assert_expected(read_once(sample(name)), name)


@pytest.mark.parametrize("name", GZIPPED)
def test_gzipped_sample_read_over_loopback(name: str) -> None:
    body = gzip.compress(sample(name))
    assert_expected(read_once(body, headers={"Content-Encoding": "gzip"}), name)


@pytest.mark.parametrize("name", [n for n in NAMES if EXPECTED[n]["engine"] is not None])
def test_sample_pinned_to_its_engine(name: str) -> None:
    assert_expected(scan(sample(name), EXPECTED[name]["engine"]), name)


@pytest.mark.parametrize(
    ("name", "pinned", "missing"),
    [
        ("vllm-single-dp2.txt", "sglang", ("sglang:num_running_reqs", "sglang:num_queue_reqs")),
        (
            "vllm-http-plain-idle.txt",
            "sglang",
            ("sglang:num_running_reqs", "sglang:num_queue_reqs"),
        ),
        ("sglang-mp-dp2.txt", "vllm", ("vllm:num_requests_running", "vllm:num_requests_waiting")),
        (
            "sglang-http-openmetrics-idle.txt",
            "vllm",
            ("vllm:num_requests_running", "vllm:num_requests_waiting"),
        ),
    ],
)
def test_sample_pinned_to_the_other_engine(
    name: str, pinned: str, missing: tuple[str, ...]
) -> None:
    """`--engine` pins: the other engine's gauges are not read, so the required ones are missing."""
    got = scan(sample(name), pinned)
    assert (got.verdict, got.engine, got.in_flight, got.series) == (
        Verdict.UNKNOWN,
        pinned,
        None,
        (),
    )
    assert got.reason is not None and "required gauge missing" in got.reason
    for gauge in missing:
        assert gauge in got.reason


def test_pinned_engine_over_loopback() -> None:
    reading = read_once(sample("vllm-single-dp2.txt"), engine="sglang")
    assert (reading.verdict, reading.engine, reading.in_flight) == (Verdict.UNKNOWN, "sglang", None)
    assert reading.reason is not None and "required gauge missing" in reading.reason
