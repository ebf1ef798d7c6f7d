"""`plan --observe` on a 16 MiB body: time to the recommendation against the same
body's verdict time, in one process.

Body: what a vLLM server with many DP engines writes, built with prometheus_client
(the library vLLM uses) from vLLM's own histogram families, label names and
bucket bounds: for each engine the e2e latency histogram and every other
request histogram (queue, inference, prefill, decode, TTFT, inter-token, per-
request TPOT, prompt/generation/max tokens, n, iteration tokens) with a few
observations, and the running/waiting gauges; engines are added until the
body is just under 16 MiB (--max-body). The e2e family, the one the
recommendation needs, is then about a fifteenth of the body, as in a real
scrape.

Timed on the same bytes, alternating, each the median of its calls:

- verdict: `exposition.scan(body)`, what `wait` does with each read;
- recommendation: `observe.from_bodies` (the e2e family scanned, checked and
  summed) then `observe.recommend`, what `plan --observe` does with a read.

Then both through a real read of the same body over loopback (`Reader.read` and
`Reader.read_with`, body gathered, scanned), median of --reads each.

Each result is checked (the verdict and total; the requests counted and G),
so that no number comes from a run that went wrong.

    python benchmarks/observe_speed.py [--calls 20] [--reads 20] [--json PATH]
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from _bench import load_note, parser, table, write_json
from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest

from drainhook.engines.exposition import scan
from drainhook.engines.gauges import BY_NAME
from drainhook.engines.verdict import Reading
from drainhook.planning import plan as planning
from drainhook.planning.histogram import recommend, scan_families
from drainhook.planning.observe import from_bodies
from drainhook.reading.read import Reader
from drainhook.reading.target import parse_url
from scripts.latency_samples import VLLM_ITL, VLLM_TTFT
from tests.support.loopback import Loopback, serve

MIB = 1024 * 1024
SIZE = 16 * MIB - 64 * 1024  # just under --max-body's default
E2E = BY_NAME["vllm"].latency.default_bounds
TOKENS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)  # 1-2-5 up to 8192
FAMILIES = {
    "vllm:e2e_request_latency_seconds": (E2E, (1.2, 4.0, 25.0)),
    "vllm:request_queue_time_seconds": (E2E, (0.01, 0.2, 3.0)),
    "vllm:request_inference_time_seconds": (E2E, (1.0, 3.5, 20.0)),
    "vllm:request_prefill_time_seconds": (E2E, (0.05, 0.1, 0.5)),
    "vllm:request_decode_time_seconds": (E2E, (1.0, 3.0, 19.0)),
    "vllm:time_to_first_token_seconds": (VLLM_TTFT, (0.05, 0.07, 1.8)),
    "vllm:inter_token_latency_seconds": (VLLM_ITL, (0.02, 0.02, 0.03)),
    "vllm:request_time_per_output_token_seconds": (VLLM_ITL, (0.02, 0.02, 0.03)),
    "vllm:request_prompt_tokens": (TOKENS, (120, 800, 3000)),
    "vllm:request_generation_tokens": (TOKENS, (100, 256, 1024)),
    "vllm:request_max_num_generation_tokens": (TOKENS, (256, 1024, 4096)),
    "vllm:request_params_max_tokens": (TOKENS, (256, 1024, 4096)),
    "vllm:request_params_n": ((1, 2, 5, 10, 20), (1, 1, 1)),
    "vllm:iteration_tokens_total": ((1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192,
                                     16384), (64, 512, 2048)),
}  # fmt: skip
MODEL = "Qwen/Qwen3-8B"


def build(engines: int) -> bytes:
    registry = CollectorRegistry()
    labels = ["model_name", "engine"]
    gauges = [Gauge(n, n, labels, registry=registry)
              for n in ("vllm:num_requests_running", "vllm:num_requests_waiting")]  # fmt: skip
    hists = {n: Histogram(n, n, labels, buckets=b, registry=registry)
             for n, (b, _) in FAMILIES.items()}  # fmt: skip
    for e in range(engines):
        for g in gauges:
            g.labels(MODEL, str(e)).set(0)
        for name, (_, values) in FAMILIES.items():
            child = hists[name].labels(MODEL, str(e))
            for v in values:
                child.observe(v)
    return generate_latest(registry)


def body_of(size: int) -> tuple[bytes, int]:
    """The largest body under size, and its engines."""
    per = len(build(2)) - len(build(1))
    engines = max(1, size // per)
    data = build(engines)
    while len(data) > size:
        engines -= 1
        data = build(engines)
    return data, engines


def timed(fn: Callable[[], object], calls: int) -> list[float]:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    p = parser(__doc__.splitlines()[0], hook=False)
    p.add_argument("--calls", type=int, default=20, help="timed calls of each, in memory")
    p.add_argument("--reads", type=int, default=20, help="timed loopback reads of each")
    args = p.parse_args()

    body, engines = body_of(SIZE)
    config = planning.wait_config()
    # What the recommendation must be: 3 requests per engine at 1.2, 4 and 25 s; the
    # p99.9 is in (20, 30]: G = ceil(5 + 30 + 5) = 40.
    expected_requests, expected_g = 3 * engines, 40

    e2e = "vllm:e2e_request_latency_seconds"

    def verdict() -> object:
        got = scan(body)
        assert (got.verdict.value, got.in_flight) == ("idle", 0), got
        return got

    def recommendation() -> object:
        rec = recommend(config, from_bodies([("bench", body)]), 0.999)
        assert rec.grace == expected_g, rec
        return rec

    observed = from_bodies([("bench", body)])
    assert observed.requests == expected_requests, observed.requests
    e2e_lines = scan_families(body, [e2e])[e2e].read_bytes

    verdict_t: list[float] = []
    observe_t: list[float] = []
    for _ in range(args.calls):  # alternating, so that all see the same machine
        verdict_t += timed(verdict, 1)
        observe_t += timed(recommendation, 1)
    v_med, o_med = statistics.median(verdict_t) * 1000, statistics.median(observe_t) * 1000

    read_v: list[float] = []
    read_o: list[float] = []
    with Loopback(serve(body)) as srv:
        reader = Reader(parse_url(srv.url))
        try:
            for _ in range(args.reads):
                start = time.perf_counter()
                got = reader.read(5.0)
                read_v.append(time.perf_counter() - start)
                assert got.verdict.value == "idle", got
                start = time.perf_counter()
                found = reader.read_with(5.0, lambda b, _until: from_bodies([("read", b)]))
                assert not isinstance(found, Reading), found
                recommend(config, found, 0.999)
                read_o.append(time.perf_counter() - start)
                assert found.requests == expected_requests
        finally:
            reader.close()
    rv_med, ro_med = statistics.median(read_v) * 1000, statistics.median(read_o) * 1000

    rows = [
        ["verdict (scan)", f"{min(verdict_t) * 1000:.1f}", f"{v_med:.1f}", "1.00"],
        ["recommendation", f"{min(observe_t) * 1000:.1f}", f"{o_med:.1f}", f"{o_med / v_med:.2f}"],
        ["read + verdict", f"{min(read_v) * 1000:.1f}", f"{rv_med:.1f}", "1.00"],
        ["read + recommendation", f"{min(read_o) * 1000:.1f}", f"{ro_med:.1f}",
         f"{ro_med / rv_med:.2f}"],
    ]  # fmt: skip
    print(
        f"plan --observe on a {len(body) / MIB:.2f} MiB body ({engines} vLLM engines, "
        f"{len(FAMILIES)} histogram families each; e2e lines {e2e_lines / MIB:.2f} MiB, "
        f"{expected_requests} requests, G = {expected_g}); {load_note()}"
    )
    print(table(["", "best ms", "median ms", "x verdict"], rows))
    write_json(
        args.json,
        "observe_speed",
        {
            "params": {"calls": args.calls, "reads": args.reads},
            "body_bytes": len(body),
            "engines": engines,
            "e2e_line_bytes": e2e_lines,
            "verdict_ms": {"median": v_med, "best": min(verdict_t) * 1000},
            "recommendation_ms": {"median": o_med, "best": min(observe_t) * 1000},
            "ratio": o_med / v_med,
            "read_verdict_ms": {"median": rv_med, "best": min(read_v) * 1000},
            "read_recommendation_ms": {"median": ro_med, "best": min(read_o) * 1000},
            "read_ratio": ro_med / rv_med,
        },
    )


if __name__ == "__main__":
    main()
