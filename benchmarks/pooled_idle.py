"""An idle engine with pooled keep-alive connections: what the connection signal
(CONTRACT §2a) costs its release, against the same engine with none.

Each size of pool is N connections to the serving port, each holding one request
that was answered at once (as a router's pool or a health checker leaves them:
most answered within the kernel's tick, a tie of the ages that the Watch reads
from the counters). The hook (`python -m drainhook wait`) runs RUNS times per
size, the sizes interleaved, against a keep-alive loopback server
(tests/support/conn_scenes.py) serving an idle vLLM body and no /load. Every run
is checked: drained after two idle reads, the connection signal answering 0.
Rows: the hook's elapsed past S + I/4 (its release), the two reads' read_ms, and
the ratio of each median to the pool of 0.

With `--checks`, routers' health checkers work the pools while the hook runs:
one quick request every 5 ms on each pool, its connections in turn, each
answered at once (after a dump that saw the connection answered, one data
segment in and its answer, most in one tick: a health check, which must not
hold the idle engine); a dump that catches a check in flight reads it busy, so
a run then ends on its last two reads, idle.

    python benchmarks/pooled_idle.py [--runs 10] [--sizes 0,64,512] [--checks] [--json PATH]
"""

from __future__ import annotations

import socket
import statistics
import threading

from _bench import load_note, parser, run_hook, table, write_json

from tests.support import conn_scenes


def pool(port: int, size: int) -> list[socket.socket]:
    """`size` connections, each with one request answered, left open."""
    return [conn_scenes.client(port, conn_scenes.QUICK, read_first=True) for _ in range(size)]


def check(sockets: list[socket.socket], stop: threading.Event) -> None:
    """Health checks on one pool, a connection every 5 ms in turn, until `stop`."""
    while sockets and not stop.is_set():
        for s in sockets:
            s.sendall(conn_scenes.QUICK)
            conn_scenes.answer(s)
            if stop.wait(0.005):
                return


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--sizes", default="0,64,512")
    p.add_argument("--settle", type=float, default=0.3)
    p.add_argument("--interval", type=float, default=0.2)
    p.add_argument("--checks", action="store_true", help="health checks on the pools meanwhile")
    args = p.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")]
    release = args.settle + args.interval / 4
    checks = ", health checks meanwhile" if args.checks else ""
    print(f"# pooled_idle: {load_note()}, {args.runs} runs a size, interleaved{checks}")
    servers = {n: conn_scenes.server() for n in sizes}
    held = {n: pool(port, n) for n, port in servers.items()}
    stop = threading.Event()
    for sockets in held.values() if args.checks else ():
        threading.Thread(target=check, args=(sockets, stop), daemon=True).start()
    elapsed: dict[int, list[float]] = {n: [] for n in sizes}
    reads: dict[int, list[float]] = {n: [] for n in sizes}
    timeline = ["--settle", str(args.settle), "--interval", str(args.interval)]
    for _ in range(args.runs):
        for n, port in servers.items():
            url = f"http://127.0.0.1:{port}/metrics"
            run = run_hook(["wait", "--url", url, *timeline], hard_exit=args.hard_exit)
            # With checks, a dump may catch one in flight (real work for a moment).
            ok = run.code == 0 and (len(run.reads) == 2 or args.checks)
            if not ok or any(r.get("connections") != "0" for r in run.reads[-2:]):
                raise SystemExit(f"pool {n}: not drained on two idle reads:\n{run.stderr}")
            elapsed[n].append((run.elapsed - release) * 1000.0)
            reads[n] += [float(r["read_ms"]) for r in run.reads]
    stop.set()
    rows, results = [], {}
    base = statistics.median(elapsed[sizes[0]]), statistics.median(reads[sizes[0]])
    for n in sizes:
        e, r = statistics.median(elapsed[n]), statistics.median(reads[n])
        worst = max(elapsed[n])
        rows.append(
            (n, f"{e:.1f}", f"{worst:.1f}", f"{r:.2f}", f"{e / base[0]:.2f}", f"{r / base[1]:.2f}")
        )
        results[str(n)] = {"elapsed_past_ms": elapsed[n], "read_ms": reads[n]}
    for sockets in held.values():
        for s in sockets:
            s.close()
    headers = ("pool", "past S+I/4 ms", "max ms", "read ms", "x pool 0", "read x pool 0")
    print(table(headers, rows))
    write_json(
        args.json, "pooled_idle", {"runs": args.runs, "checks": args.checks, "results": results}
    )


if __name__ == "__main__":
    main()
