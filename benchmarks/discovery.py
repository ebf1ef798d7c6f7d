"""Listener discovery's cost: from the refused read of the configured target to
the found engine's first read, with 1, 8 and 64 listeners in the Pod.

Each case runs in a new, empty network namespace (tests/podns.py): one engine
(an idle vLLM body on 0.0.0.0:8123) and sidecars on other ports, half
answering 404 and half a 200 with a mesh proxy's own metrics (about 2 KB, no
engine gauges). The configured target, 127.0.0.1:8000, has no listener.

Inside, each repetition reads the configured target with the hook's Reader
(refused), then runs discovery's search (drainhook.discover.search: /proc,
the candidate plan, every read at once with a Reader each). Timed from the
refused read's return:

- `engine read`: the engine's read answered (the hook knows where the work is);
- `search`: the search returned, every listener's read over (the hook can
  drain: it needs every engine listener, so it waits for every read);
- `listing`: reading /proc/net/tcp{,6} and planning the reads;
- baseline, the same run: one Reader read of the engine alone.

A fourth case has 64 listeners of which one never answers: the search then
lasts one read timeout (here 1 s), the bound the contract allows within D.
Until the hook discovers by itself this measures the routine, not `wait`;
the hook's end-to-end run will replace it.

    .venv/bin/python benchmarks/discovery.py [--reps 20] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

from _bench import load_note, parser, stats_ms, table, write_json

from tests.podns import Server, engine, hanging, netns, run_pod, sidecar

ENGINE_PORT = 8123
CONFIGURED = 8000
READ_TIMEOUT = 1.0
BODY = "vllm-external-lb-rank3-idle.txt"
MESH_METRICS = "".join(
    f'envoy_cluster_upstream_rq_total{{cluster_name="outbound|{p}||svc.ns.svc"}} {p}\n'
    for p in range(9000, 9030)
)


def pod(listeners: int, *, hang: bool = False) -> list[Server]:
    """The engine and listeners - 1 sidecars (and one hanging listener more)."""
    servers = [engine("engine", ENGINE_PORT, BODY)]
    for i in range(listeners - 1):
        port = 15000 + i
        if i % 2:
            servers.append(sidecar(f"sidecar-{port}", port, 200, MESH_METRICS))
        else:
            servers.append(sidecar(f"sidecar-{port}", port))
    if hang:
        servers.append(hanging("hanging", 9999))
    return servers


def inside(reps: int) -> dict[str, Any]:
    """Run in the namespace: `reps` searches, each after a refused read."""
    from drainhook.discover import search
    from drainhook.listeners import candidates, read_listeners
    from drainhook.read import Reader
    from drainhook.target import parse_url
    from drainhook.verdict import Reading, Verdict

    engine_url = f"http://127.0.0.1:{ENGINE_PORT}/metrics"
    configured = parse_url(f"http://127.0.0.1:{CONFIGURED}/metrics")
    out: dict[str, list[float]] = {"engine": [], "search": [], "listing": [], "baseline": []}
    tried = 0

    class Timed:
        """A Reader that notes when the engine's read answered."""

        def __init__(self, url: str, answered: list[float]) -> None:
            self._reader = Reader(parse_url(url))
            self._url = url
            self._answered = answered

        def read(self, timeout: float) -> Reading:
            reading = self._reader.read(timeout)
            if self._url == engine_url:
                self._answered.append(time.monotonic())
            return reading

        def close(self) -> None:
            self._reader.close()

    for _ in range(reps):
        first = Reader(configured)
        refused = first.read(READ_TIMEOUT)
        first.close()
        t_refused = time.monotonic()
        assert refused.verdict is Verdict.UNREACHABLE, refused.reason
        answered: list[float] = []
        found = search(
            lambda url, a=answered: Timed(url, a),  # type: ignore[misc]
            read_timeout=READ_TIMEOUT,
            until=t_refused + 25.0,
            exclude=[(configured.host, configured.port)],
        )
        t_done = time.monotonic()
        assert [t.url for t in found.found] == [engine_url], found.describe()
        assert found.found[0].reading is not None
        assert found.found[0].reading.verdict is Verdict.IDLE
        tried = len(found.tried)
        out["engine"].append(answered[0] - t_refused)
        out["search"].append(t_done - t_refused)
        start = time.monotonic()
        candidates(read_listeners(), exclude=[(configured.host, configured.port)])
        out["listing"].append(time.monotonic() - start)
        alone = Reader(parse_url(engine_url))
        start = time.monotonic()
        assert alone.read(READ_TIMEOUT).verdict is Verdict.IDLE
        out["baseline"].append(time.monotonic() - start)
        alone.close()
    return {"tried": tried, **out}


def main() -> None:
    p = parser(__doc__.splitlines()[0], hook=False)
    p.add_argument("--reps", type=int, default=20, help="searches per case (default 20)")
    p.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.inside:  # in the namespace run_pod made
        print(json.dumps(inside(args.reps)))
        return
    prefix = netns()
    if prefix is None:
        sys.exit("needs a new network namespace (unshare -n, or unshare -rn)")
    print(f"discovery: {args.reps} searches per case; {load_note()}\n")
    cases = [("1", pod(1)), ("8", pod(8)), ("64", pod(64)), ("64, 1 hanging", pod(63, hang=True))]
    rows, results = [], {}
    for label, servers in cases:
        command = [sys.executable, __file__, "--inside", "--reps", str(args.reps)]
        run = run_pod(servers, command, prefix=prefix, timeout=600)
        if run.code != 0:
            sys.exit(f"case {label}: exit {run.code}\n{run.stderr}")
        got = json.loads(run.stdout)
        reads = sum(len(log.requests) for log in run.servers.values())
        # Every listener read once per search (but the engine, read once more as the baseline).
        assert reads == args.reps * (len(servers) + 1), (label, reads)
        stats = {k: stats_ms(got[k]) for k in ("engine", "search", "listing", "baseline")}
        ratio = statistics.median(got["search"]) / statistics.median(got["baseline"])
        results[label] = {"listeners": len(servers), "tried": got["tried"], **stats, "ratio": ratio}
        rows.append(
            [
                label,
                got["tried"],
                stats["engine"]["median"],
                stats["engine"]["p90"],
                stats["search"]["median"],
                stats["search"]["p90"],
                stats["search"]["max"],
                stats["listing"]["median"],
                stats["baseline"]["median"],
                round(ratio, 1),
            ]
        )
    headers = [
        "listeners",
        "read",
        "engine read med",
        "p90",
        "search med",
        "p90",
        "max",
        "listing med",
        "1 read (baseline)",
        "search / baseline",
    ]
    print(table(headers, [[f"{c:.1f}" if isinstance(c, float) else c for c in r] for r in rows]))
    print("\nms from the refused read's return; `read`: listeners read per search.")
    write_json(args.json, "discovery", {"reps": args.reps, "cases": results})


if __name__ == "__main__":
    main()
