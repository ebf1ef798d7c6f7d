"""The latency histograms of tests/samples/latency/: engine bodies with known requests.

    .venv/bin/python scripts/latency_samples.py           rewrite them
    .venv/bin/python scripts/latency_samples.py --check   exit 1 when one differs

Each body is what prometheus_client (the library both engines use) writes for
the engine's own metric families, label names and default bucket bounds, after
observing a list of request latencies chosen here, so that every quantile and
every G can be computed by hand (tests/test_observe.py does, for each):

- vLLM: `vllm:e2e_request_latency_seconds`, labels model_name and engine (one
  series per DP engine), bounds 0.3 ... 7680 s (vllm/v1/metrics/buckets.py,
  REQUEST_LATENCY_BUCKETS); with the request_params_max_tokens (1-2-5 up to
  max_model_len), time_to_first_token and request_time_per_output_token
  histograms for the max_tokens bound where a sample says so.
- SGLang: `sglang:e2e_request_latency_seconds`, labels model_name and
  is_streaming (one series each), bounds 0.1 ... 2400 s
  (sglang/srt/metrics/collector.py, TokenizerMetricsCollector).

The `_created` timestamps prometheus_client writes are pinned to one value, so
that the files do not change from run to run. tests/test_observe.py fails when
a file is not what this script writes.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from drainhook.engines.gauges import BY_NAME

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "samples" / "latency"

# The e2e bounds are the engine table's, the ones plan --observe expects.
VLLM_E2E = BY_NAME["vllm"].latency.default_bounds
VLLM_TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
             1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
VLLM_ITL = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
            1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
SGLANG_E2E = BY_NAME["sglang"].latency.default_bounds
MAX_MODEL_LEN = 8192
VLLM_MODEL = "Qwen/Qwen3-8B"
SGLANG_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
CREATED = "1.7650000000000000e+09"


def build_1_2_5(maximum: int) -> list[float]:
    """vLLM's build_1_2_5_buckets: 1, 2, 5, 10, ... up to maximum."""
    found: list[float] = []
    exponent = 0
    while True:
        for m in (1, 2, 5):
            value = m * 10**exponent
            if value > maximum:
                return found
            found.append(value)
        exponent += 1


def many(*groups: tuple[int, float]) -> list[float]:
    """(count, value) pairs as a flat list of observations."""
    return [value for count, value in groups for _ in range(count)]


@dataclass(frozen=True)
class Sample:
    """One body: the engine, and per series (its label values) the latencies seen."""

    file: str
    engine: str
    e2e: dict[str, list[float]]  # series label value (engine index or is_streaming) -> latencies
    max_tokens: list[float] = field(default_factory=list)
    ttft: list[float] = field(default_factory=list)
    tpot: list[float] = field(default_factory=list)
    openmetrics: bool = False


SAMPLES: tuple[Sample, ...] = (
    # Chat traffic on two DP engines: most requests short, a thin tail to 25 s.
    Sample(
        "vllm-chat-dp2.txt",
        "vllm",
        {
            "0": many((800, 1.2), (200, 4.0), (45, 12.0), (2, 25.0)),
            "1": many((700, 1.2), (200, 4.0), (50, 12.0), (3, 25.0)),
        },
        max_tokens=many((1500, 256), (400, 1024), (100, 4096)),
        ttft=many((1997, 0.05), (3, 1.8)),
        tpot=many((2000, 0.02)),
    ),
    # Batch jobs running for minutes; two requests beyond the largest bound (7680 s).
    Sample(
        "vllm-long-tail-inf.txt",
        "vllm",
        {"0": many((1000, 600.0), (498, 3000.0), (2, 9000.0))},
    ),
    # A replica that served 40 requests: too few for a p99.9.
    Sample(
        "vllm-small-sample.txt",
        "vllm",
        {"0": many((30, 0.2), (9, 3.0), (1, 45.0))},
    ),
    # SGLang: streaming and non-streaming requests are two series of one family.
    Sample(
        "sglang-streaming.txt",
        "sglang",
        {
            "true": many((2900, 7.0), (100, 70.0)),
            "false": many((990, 0.5), (10, 150.0)),
        },
    ),
    # SGLang, short requests only (OpenMetrics, as its /metrics writes it when asked).
    Sample(
        "sglang-short-openmetrics.txt",
        "sglang",
        {"true": many((495, 0.15)), "false": many((5, 0.9))},
        openmetrics=True,
    ),
    # --window: two reads of one vLLM engine. The first holds an old tail (ten
    # 300 s requests); 2000 requests of 4 s come in between.
    Sample(
        "vllm-window-before.txt",
        "vllm",
        {"0": many((1000, 1.2), (10, 300.0))},
    ),
    Sample(
        "vllm-window-after.txt",
        "vllm",
        {"0": many((1000, 1.2), (10, 300.0), (2000, 4.0))},
    ),
    # The same engine restarted between the reads: its counts start again from 0.
    Sample(
        "vllm-window-after-restart.txt",
        "vllm",
        {"0": many((300, 4.0))},
    ),
)


def body(sample: Sample) -> bytes:
    """What the engine's /metrics would serve after these requests."""
    registry = CollectorRegistry()
    if sample.engine == "vllm":
        labels = ["model_name", "engine"]
        for name in ("vllm:num_requests_running", "vllm:num_requests_waiting"):
            gauge = Gauge(name, "gauge", labels, registry=registry)
            for engine in sample.e2e:
                gauge.labels(VLLM_MODEL, engine).set(0)
        e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            labels,
            buckets=VLLM_E2E,
            registry=registry,
        )
        for engine, latencies in sample.e2e.items():
            _observe(e2e.labels(VLLM_MODEL, engine), latencies)
        extras: Sequence[tuple[str, Sequence[float], list[float]]] = (
            ("vllm:request_params_max_tokens", build_1_2_5(MAX_MODEL_LEN), sample.max_tokens),
            ("vllm:time_to_first_token_seconds", VLLM_TTFT, sample.ttft),
            ("vllm:request_time_per_output_token_seconds", VLLM_ITL, sample.tpot),
        )
        for name, bounds, values in extras:
            if values:
                h = Histogram(name, name, labels, buckets=bounds, registry=registry)
                _observe(h.labels(VLLM_MODEL, "0"), values)
    else:
        labels = ["model_name"]
        for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs"):
            Gauge(name, "gauge", labels, registry=registry).labels(SGLANG_MODEL).set(0)
        e2e = Histogram(
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            ["model_name", "is_streaming"],
            buckets=SGLANG_E2E,
            registry=registry,
        )
        for streaming, latencies in sample.e2e.items():
            _observe(e2e.labels(SGLANG_MODEL, streaming), latencies)
    text = (generate_openmetrics if sample.openmetrics else generate_latest)(registry).decode()
    return re.sub(r"(_created\{[^}]*\}) \S+", rf"\1 {CREATED}", text).encode()


def _observe(child: object, values: list[float]) -> None:
    for value in values:
        child.observe(value)  # type: ignore[attr-defined]


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    OUT.mkdir(parents=True, exist_ok=True)
    for sample in SAMPLES:
        path = OUT / sample.file
        data = body(sample)
        if check:
            if not path.exists() or path.read_bytes() != data:
                stale.append(sample.file)
        else:
            path.write_bytes(data)
    if stale:
        print(f"stale: {', '.join(stale)}: run scripts/latency_samples.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
