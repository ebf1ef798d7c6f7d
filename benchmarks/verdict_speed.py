"""Verdict from a body: drainhook's scanner against prometheus_client's parser.

Targets: <= 5 ms per MiB, and at least 20 times faster than
`prometheus_client.parser.text_string_to_metric_families` on the same body.

Bodies: a real vLLM sample as served (vllm-http-plain.txt, about 52 KiB, busy
with one request running), and the same sample padded to about 1 MiB and
16 MiB. The padding is what makes real bodies large: histogram families with
many label sets. Every histogram family of the sample (buckets, _sum,
_count) gets its series repeated for more `engine` label values, written in
place inside its family as prometheus_client would write them; the counted
gauges are left as they are, so every body keeps the sample's verdict.

Both sides are timed in one run on the same body: the scanner on the bytes
(as the hook reads them), the parser on the decoded str (decoding not
counted), fully consumed (every family and every sample). Both results are
checked: the scanner's verdict and total, and the parser's sum of the same
gauges.

    python benchmarks/verdict_speed.py [--repeat 1.0] [--json PATH]
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable

from _bench import load_note, parser, table, write_json
from prometheus_client.parser import text_string_to_metric_families

from drainhook.engines.exposition import scan
from drainhook.engines.gauges import sample_kind
from tests.support.loopback import EXPECTED, sample

MIB = 1024 * 1024
SAMPLE = "vllm-http-plain.txt"
TARGET_MS_PER_MIB = 5.0
TARGET_RATIO = 20.0


def pad(body: bytes, size: int) -> bytes:
    """The body with its histogram families' series repeated for more engines, up to size."""
    lines = body.decode().split("\n")
    per_engine = sum(len(line) + 2 for line in _histogram_series(lines))
    extra = max(0, (size - len(body)) // per_engine)
    padded = _repeat(lines, extra)
    while len(padded) > size:  # engine numbers with more digits: one fewer
        extra -= 1
        padded = _repeat(lines, extra)
    return padded


def _histogram_series(lines: list[str]) -> list[str]:
    family_type = ""
    found = []
    for line in lines:
        if line.startswith("# TYPE "):
            family_type = line.split()[-1]
        elif family_type == "histogram" and 'engine="0"' in line:
            found.append(line)
    return found


def _repeat(lines: list[str], extra: int) -> bytes:
    """Each histogram family's engine="0" series, repeated for engines 1..extra at its end."""
    out: list[str] = []
    held: list[str] = []
    family_type = ""

    def flush() -> None:
        for engine in range(1, extra + 1):
            out.extend(h.replace('engine="0"', f'engine="{engine}"') for h in held)
        held.clear()

    for line in lines:
        if line.startswith("# HELP ") or not line:
            flush()
        if line.startswith("# TYPE "):
            family_type = line.split()[-1]
        elif family_type == "histogram" and 'engine="0"' in line:
            held.append(line)
        out.append(line)
    flush()
    return "\n".join(out).encode()


def timed(fn: Callable[[], object], runs: int) -> list[float]:
    """Seconds per call, `runs` calls, with the collector paused as timeit does."""
    times = []
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(runs):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    finally:
        if enabled:
            gc.enable()
    return times


def prometheus_total(text: str, engine: str) -> tuple[float, int]:
    """Sum of the counted gauges by prometheus_client, and how many samples it produced."""
    total, count = 0.0, 0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            count += 1
            hit = sample_kind(s.name)
            if hit is not None and hit[2] == "counted" and hit[0].name == engine:
                total += s.value
    return total, count


def consume(text: str) -> int:
    """Parse text fully: every family, every sample."""
    return sum(len(family.samples) for family in text_string_to_metric_families(text))


def main() -> None:
    p = parser(__doc__.splitlines()[0], hook=False)
    p.add_argument(
        "--repeat", type=float, default=1.0, help="scale the number of timed calls (0.2 = quick)"
    )
    args = p.parse_args()

    expected = EXPECTED[SAMPLE]
    real = sample(SAMPLE)
    bodies = {"sample": real, "1 MiB": pad(real, MIB), "16 MiB": pad(real, 16 * MIB)}
    # (scanner calls, parser calls) per body
    calls = {"sample": (500, 30), "1 MiB": (100, 5), "16 MiB": (20, 3)}

    results: dict[str, dict[str, object]] = {}
    per_mib: dict[str, float] = {}
    ratios: dict[str, float] = {}
    rows = []
    for name, body in bodies.items():
        text = body.decode()
        got = scan(body)
        total, samples = prometheus_total(text, expected["engine"])
        if (got.verdict.value, got.engine, got.in_flight) != (
            expected["verdict"],
            expected["engine"],
            expected["in_flight"],
        ) or total != expected["in_flight"]:
            raise SystemExit(f"{name}: scan {got}, prometheus_client total {total}: not {expected}")
        n_scan, n_prom = (max(1, round(n * args.repeat)) for n in calls[name])
        t_scan = timed(lambda body=body: scan(body), n_scan)
        t_prom = timed(lambda text=text: consume(text), n_prom)
        mib = len(body) / MIB
        scan_med, prom_med = statistics.median(t_scan), statistics.median(t_prom)
        result = {
            "bytes": len(body),
            "samples": samples,
            "verdict": got.verdict.value,
            "in_flight": got.in_flight,
            "scan_runs": n_scan,
            "scan_ms_best": min(t_scan) * 1000,
            "scan_ms_median": scan_med * 1000,
            "scan_ms_per_mib": scan_med * 1000 / mib,
            "prometheus_runs": n_prom,
            "prometheus_ms_best": min(t_prom) * 1000,
            "prometheus_ms_median": prom_med * 1000,
            "prometheus_ms_per_mib": prom_med * 1000 / mib,
            "ratio_median": prom_med / scan_med,
            "ratio_best": min(t_prom) / min(t_scan),
        }
        results[name] = result
        per_mib[name] = scan_med * 1000 / mib
        ratios[name] = prom_med / scan_med
        rows.append(
            [
                name,
                f"{len(body) / 1024:.0f}",
                samples,
                result["scan_ms_best"],
                result["scan_ms_median"],
                result["scan_ms_per_mib"],
                result["prometheus_ms_median"],
                result["prometheus_ms_per_mib"],
                f"{result['ratio_median']:.0f}x",
            ]
        )

    print(
        f"verdict speed: drainhook scan (bytes) vs prometheus_client parser (str, fully consumed); "
        f"{SAMPLE} -> {expected['verdict']} {expected['in_flight']:g}; {load_note()}; milliseconds"
    )
    headers = ["body", "KiB", "samples", "scan best", "scan med", "scan/MiB"]
    headers += ["prom med", "prom/MiB", "ratio"]
    print(table(headers, rows))
    worst_per_mib = max(per_mib[n] for n in bodies if n != "sample")
    worst_ratio = min(ratios.values())
    met_speed = worst_per_mib <= TARGET_MS_PER_MIB
    met_ratio = worst_ratio >= TARGET_RATIO
    print(
        f"target: <= {TARGET_MS_PER_MIB:g} ms/MiB (1, 16 MiB): worst {worst_per_mib:.2f}, "
        f"{'met' if met_speed else 'NOT met'}; >= {TARGET_RATIO:g}x prometheus_client: "
        f"worst {worst_ratio:.0f}x, {'met' if met_ratio else 'NOT met'}"
    )
    write_json(
        args.json,
        "verdict_speed",
        {
            "params": {"repeat": args.repeat, "sample": SAMPLE},
            "targets": {"ms_per_mib": TARGET_MS_PER_MIB, "ratio": TARGET_RATIO},
            "met": {"ms_per_mib": met_speed, "ratio": met_ratio},
            "bodies": results,
        },
    )


if __name__ == "__main__":
    main()
