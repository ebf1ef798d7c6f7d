"""The cost of each extra read of CONTRACT §2a, as a ratio to the /metrics read.

In process, against loopback servers (tests/support/loopback.py), interleaved, each
timed on the monotonic clock around the call the hook makes:

- `/metrics`: one read of an idle vLLM body as served (vllm-http-plain-idle.txt),
  a fresh connection, scanned with the progress counters (the hook's Reader);
- `GET /load`: one read of vLLM's `{"server_load": 0}` (Reader.read_with and
  parse_server_load, as the EngineReader does);
- `sock_diag`: one dump of the port's TCP sockets in ESTABLISHED, CLOSE_WAIT and LISTEN (IPv4
  and IPv6) with their tcp_info and the count for the port (connections.dump and
  a Watch that keeps each dump for the next, as the EngineReader makes it),
  with 0, 64 and 512 idle keep-alive connections open to the port besides (each
  end in this process); and apart, what listing the process's own sockets
  costs (own_inodes: /proc/self/fd, read only when a request is seen);
- the idle round of a vLLM target as `wait` reads it (/metrics, /load, one
  dump), against /metrics alone.

Every result is checked (idle, the counts 0) before it is kept.

    python benchmarks/signals.py [--runs 300] [--json PATH]
"""

from __future__ import annotations

import socket
import statistics
import time
from collections.abc import Callable

from _bench import load_note, parser, table, write_json

from drainhook.engines.server_load import ServerLoadScanner, parse_server_load
from drainhook.engines.verdict import Reading, Verdict
from drainhook.reading import connections
from drainhook.reading.assemble import target_reader
from drainhook.reading.config import ReadConfig
from drainhook.reading.read import Reader
from drainhook.reading.target import parse_url
from tests.support.loopback import Loopback, route, sample

IDLE = sample("vllm-http-plain-idle.txt")
LOAD = b'{"server_load": 0}'


def timed(call: Callable[[], object], check: Callable[[object], bool]) -> float:
    start = time.perf_counter()
    got = call()
    took = time.perf_counter() - start
    assert check(got), got
    return took


def idle(r: object) -> bool:
    return isinstance(r, Reading) and r.verdict is Verdict.IDLE


def hold_connections(port: int, n: int) -> list[socket.socket]:
    """n connections to port, each with one request answered: idle keep-alive ones
    (the route closes after answering: these send nothing, as a pool's spare)."""
    return [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]


def main() -> None:
    p = parser(__doc__.splitlines()[0], hook=False)
    p.add_argument("--runs", type=int, default=300)
    args = p.parse_args()
    print(f"# signals: {load_note()}, {args.runs} runs each, interleaved")
    with Loopback(route({"/metrics": IDLE, "/load": LOAD}), own_load=False) as srv:
        target = parse_url(srv.url)
        metrics = Reader(target)
        load = Reader(target.with_path("/load"), scanner=ServerLoadScanner())
        plain = ReadConfig(target=target, source="metrics", connections=False)
        full = ReadConfig(target=target)
        only_metrics = target_reader(plain, target)
        whole = target_reader(full, target)

        watch = connections.Watch()  # one, as the EngineReader's: each dump kept for the next

        def dump() -> int:  # as the EngineReader: its own sockets listed only on a find
            found = connections.dump(1.0, port=srv.port)
            return watch.count(found, srv.port, connections.own_inodes)

        def own() -> int:
            return len(connections.own_inodes())

        cases: dict[str, tuple[Callable[[], object], Callable[[object], bool]]] = {
            "/metrics": (lambda: metrics.read(1.0), idle),
            "GET /load": (
                lambda: load.read_with(1.0, parse_server_load),
                lambda r: getattr(r, "value", None) == 0.0,
            ),
            "sock_diag dump": (dump, lambda n: n == 0),
            "own sockets listed": (own, lambda n: isinstance(n, int) and n > 0),
            "round: /metrics only": (lambda: only_metrics.read(1.0), idle),
            "round: /metrics + /load + dump": (
                lambda: whole.read(1.0),
                lambda r: idle(r) and getattr(r, "signals", None) is not None,
            ),
        }
        results: dict[str, object] = {}
        rows = []
        for extra in (0, 64, 512):
            held = hold_connections(srv.port, extra)
            try:
                times: dict[str, list[float]] = {name: [] for name in cases}
                for _ in range(args.runs):
                    for name, (call, check) in cases.items():
                        times[name].append(timed(call, check))
            finally:
                for s in held:
                    s.close()
            base = statistics.median(times["/metrics"])
            for name, values in times.items():
                median = statistics.median(values)
                p90 = statistics.quantiles(values, n=10)[-1]
                rows.append((extra, name, median * 1e3, p90 * 1e3, median / base))
                results[f"{extra}:{name}"] = {"median_ms": median * 1e3, "p90_ms": p90 * 1e3}
            time.sleep(0.2)
        for reader in (metrics, load, only_metrics, whole):
            reader.close()
    headers = ("other conns", "read", "median ms", "p90 ms", "x /metrics")
    print(table(headers, [(e, n, f"{m:.3f}", f"{q:.3f}", f"{r:.2f}") for e, n, m, q, r in rows]))
    write_json(args.json, "signals", {"runs": args.runs, "results": results})


if __name__ == "__main__":
    main()
