"""Verdict time by body size, and one whole read of a 1 MiB body over loopback.

Target: a whole read (HTTP GET over loopback, body gathered, verdict) of a
1 MiB body in <= 15 ms, median over at least 50 reads.

Bodies: a real vLLM sample (vllm-http-plain.txt, busy with one request;
about 52 KiB, the "50 KiB" row) and the same padded with other families to
about 1 MiB and 16 MiB, as
verdict_speed.py pads it: the histogram families' series repeated for more
`engine` values. Only uncounted families grow, so every body keeps the
sample's verdict and stays inside the scanner's bounds on counted lines
(exposition.MAX_COUNTED_BYTES, MAX_SERIES), which a body padded with counted
series would hit instead (its verdict would then be unknown, by design).

    python benchmarks/verdict_sizes.py [--reads 100] [--json PATH]
"""

from __future__ import annotations

import statistics

from _bench import load_note, parser, table, write_json
from verdict_speed import pad, timed

from drainhook.engines.exposition import scan
from drainhook.reading.read import Reader
from drainhook.reading.target import parse_url
from tests.support.loopback import EXPECTED, Loopback, sample, serve

KIB = 1024
MIB = 1024 * KIB
SAMPLE = "vllm-http-plain.txt"
SIZES = {"50 KiB": 50 * KIB, "1 MiB": MIB, "16 MiB": 16 * MIB}
CALLS = {"50 KiB": 500, "1 MiB": 100, "16 MiB": 20}
TARGET_READ_MS = 15.0


def main() -> None:
    p = parser(__doc__.splitlines()[0], hook=False)
    p.add_argument("--reads", type=int, default=100, help="loopback reads of the 1 MiB body")
    args = p.parse_args()
    reads = max(50, args.reads)

    want = EXPECTED[SAMPLE]
    expected = (want["verdict"], want["in_flight"])
    real = sample(SAMPLE)
    results: dict[str, dict[str, object]] = {}
    rows = []
    for label, size in SIZES.items():
        # The sample itself is about 52 KiB: it stands for the 50 KiB body (pad
        # only grows a body, and would never get one under the sample's size).
        body = real if size <= len(real) else pad(real, size)
        got = scan(body)
        if (got.verdict.value, got.in_flight) != expected:
            raise SystemExit(f"{label}: {got} is not {expected}")
        times = timed(lambda body=body: scan(body), CALLS[label])
        med = statistics.median(times) * 1000
        results[label] = {
            "bytes": len(body),
            "calls": len(times),
            "scan_ms_best": min(times) * 1000,
            "scan_ms_median": med,
            "scan_ms_per_mib": med / (len(body) / MIB),
        }
        rows.append([label, len(body), len(times), min(times) * 1000, med, med / (len(body) / MIB)])

    body = pad(real, MIB)
    read_ms: list[float] = []
    with Loopback(serve(body)) as srv:
        reader = Reader(parse_url(srv.url))
        try:
            for _ in range(reads):
                reading = reader.read(2.0)
                if (reading.verdict.value, reading.in_flight) != expected:
                    raise SystemExit(f"loopback read: {reading}")
                read_ms.append(reading.read_ms)
        finally:
            reader.close()
    read_med = statistics.median(read_ms)
    met = read_med <= TARGET_READ_MS

    print(f"verdict by body size ({SAMPLE} padded, {want['verdict']}); {load_note()}")
    print(table(["body", "bytes", "calls", "scan best ms", "scan med ms", "ms/MiB"], rows))
    print(
        f"whole read over loopback, {len(body)} bytes, {reads} reads: "
        f"median {read_med:.2f} ms, best {min(read_ms):.2f}, worst {max(read_ms):.2f}; "
        f"target <= {TARGET_READ_MS:g} ms: {'met' if met else 'NOT met'}"
    )
    write_json(
        args.json,
        "verdict_sizes",
        {
            "params": {"sample": SAMPLE, "reads": reads},
            "scan": results,
            "read_1mib_ms": {
                "median": read_med,
                "best": min(read_ms),
                "worst": max(read_ms),
                "reads": reads,
            },
            "target_read_ms": TARGET_READ_MS,
            "met": met,
        },
    )


if __name__ == "__main__":
    main()
