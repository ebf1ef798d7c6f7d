"""Listener discovery's cost, end to end: the hook (`drainhook wait`, as a
subprocess, inside a Pod) from its refused read of the configured target to
the first read of the engine it finds, with 1, 8 and 64 listeners in the Pod.

Each case runs in a new, empty network namespace (tests/support/podns.py): one engine
(an idle vLLM body on 0.0.0.0:8123) and sidecars on other ports, half
answering 404 and half a 200 with a mesh proxy's own metrics (about 2 KB, no
engine gauges). Inside, a driver runs the hook `--reps` times with the
configured target 127.0.0.1:8000 (nothing listens there: refused), and as
many times with the engine's own port (no search: the baseline), alternating,
each with `--settle 0 --interval 0.2` and KUBERNETES_SERVICE_HOST set (the
moved one with `--discover`, which a Pod no longer turns on by itself). From
the hook's own `discovery` log line:

- `found`: from the refused read's return to the found engine's read
  answered (the hook knows where the work is);
- `search`: to the search's end, every listener's read over: the hook's
  first read, from which it drains (it needs every engine listener);

and from the driver, spawn to exit of each hook (both drain at S + I, so the
difference is what the search adds to the hook's exit). The baseline's read
is one read of the engine alone (`read 1`, the baseline's first read).

A fourth case has 64 listeners of which one never answers: the search then
lasts one read timeout (1 s), the bound the contract allows within D, and the
hook's second read is due at once after it.

    .venv/bin/python benchmarks/discovery.py [--reps 20] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

from _bench import clean_env, load_note, parser, run_hook, stats_ms, table, write_json

from tests.support.podns import Server, engine, hanging, netns, run_pod, sidecar

ENGINE_PORT = 8123
CONFIGURED = 8000
BODY = "vllm-external-lb-rank3-idle.txt"
MESH_METRICS = "".join(
    f'envoy_cluster_upstream_rq_total{{cluster_name="outbound|{p}||svc.ns.svc"}} {p}\n'
    for p in range(9000, 9030)
)
TIMELINE = ("--settle", "0", "--interval", "0.2", "--grace", "30", "--exit-reserve", "5")
IN_POD = {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}


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


def _log_fields(line: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in line.split()[1:] if "=" in part)


def inside(reps: int) -> dict[str, Any]:
    """Run in the namespace: `reps` hooks that discover, `reps` that do not."""
    env = {**clean_env(), **IN_POD}
    out: dict[str, list[float]] = {
        "found": [],
        "search": [],
        "wall": [],
        "baseline_read": [],
        "baseline_wall": [],
    }
    tried = 0
    for _ in range(reps):
        moved = run_hook(["wait", "--port", str(CONFIGURED), "--discover", *TIMELINE], env)
        assert moved.code == 0 and moved.summary["reads"] == "2", moved.stderr
        (line,) = [x for x in moved.stderr.splitlines() if " discovery " in x]
        found = _log_fields(line)
        assert found["found"] == f"http://127.0.0.1:{ENGINE_PORT}/metrics", moved.stderr
        tried = int(found["tried"])
        out["found"].append(float(found["found_ms"]) / 1000.0)
        out["search"].append(float(found["search_ms"]) / 1000.0)
        out["wall"].append(moved.wall)
        plain = run_hook(["wait", "--port", str(ENGINE_PORT), *TIMELINE], env)
        assert plain.code == 0 and plain.summary["reads"] == "2", plain.stderr
        assert " discovery " not in plain.stderr
        out["baseline_read"].append(float(plain.reads[0]["read_ms"]) / 1000.0)
        out["baseline_wall"].append(plain.wall)
    return {"tried": tried, **out}


def main() -> None:
    p = parser(__doc__.splitlines()[0], hook=False)
    p.add_argument("--reps", type=int, default=20, help="hooks per case and kind (default 20)")
    p.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.inside:  # in the namespace run_pod made
        print(json.dumps(inside(args.reps)))
        return
    prefix = netns()
    if prefix is None:
        sys.exit("needs a new network namespace (unshare -n, or unshare -rn)")
    print(f"discovery, end to end: {args.reps} hooks per case and kind; {load_note()}\n")
    cases = [("1", pod(1)), ("8", pod(8)), ("64", pod(64)), ("64, 1 hanging", pod(63, hang=True))]
    rows, results = [], {}
    for label, servers in cases:
        command = [sys.executable, __file__, "--inside", "--reps", str(args.reps)]
        run = run_pod(servers, command, prefix=prefix, timeout=900)
        if run.code != 0:
            sys.exit(f"case {label}: exit {run.code}\n{run.stderr}")
        got = json.loads(run.stdout)
        # The engine: 2 reads a hook, both kinds; every other listener once per search.
        assert len(run.servers["engine"].requests) == 4 * args.reps, label
        for name, log in run.servers.items():
            if name != "engine":
                assert len(log.requests) == args.reps, (label, name, len(log.requests))
        keys = ("found", "search", "wall", "baseline_read", "baseline_wall")
        stats = {k: stats_ms(got[k]) for k in keys}
        ratio = statistics.median(got["search"]) / statistics.median(got["baseline_read"])
        added = statistics.median(got["wall"]) - statistics.median(got["baseline_wall"])
        results[label] = {
            "listeners": len(servers),
            "tried": got["tried"],
            **stats,
            "search_over_one_read": ratio,
            "exit_added_ms": round(added * 1000.0, 2),
        }
        rows.append(
            [
                label,
                got["tried"],
                stats["found"]["median"],
                stats["found"]["p90"],
                stats["search"]["median"],
                stats["search"]["p90"],
                stats["search"]["max"],
                stats["baseline_read"]["median"],
                round(ratio, 1),
                stats["wall"]["median"],
                stats["baseline_wall"]["median"],
                round(added * 1000.0, 1),
            ]
        )
    headers = [
        "listeners",
        "read",
        "found med",
        "p90",
        "search med",
        "p90",
        "max",
        "1 read (baseline)",
        "search / 1 read",
        "exit med",
        "baseline exit med",
        "exit added",
    ]
    print(table(headers, [[f"{c:.1f}" if isinstance(c, float) else c for c in r] for r in rows]))
    print(
        "\nms; found/search from the refused read's return (the hook's discovery line);"
        "\nexit: spawn to exit of the hook (S = 0, I = 0.2 s); `read`: listeners read per search."
    )
    write_json(args.json, "discovery", {"reps": args.reps, "cases": results})


if __name__ == "__main__":
    main()
