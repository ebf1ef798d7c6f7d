"""The Pod-namespace harness (tests/support/podns.py) proved on what exists before the hook
discovers anything itself: the namespace holds exactly the test's listeners,
the hook reads a server there, SO_REUSEPORT pairs share their connections, the
harness refuses a namespace that is not empty; and listener discovery's own
search (drainhook.reading.discovery.search.search, with the hook's Reader) finds the engine
among sidecars, a hanging listener and one that speaks no HTTP, in time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from drainhook.reading.discovery.listeners import MAX_READS
from tests.conftest import POD_LATE, late
from tests.support.podns import (
    ROOT,
    Pod,
    PodError,
    Reply,
    Server,
    engine,
    hanging,
    netns,
    run_pod,
    sidecar,
)
from tests.support.process import base_env

IDLE = "vllm-external-lb-rank3-idle.txt"  # engine vllm, idle (tests/samples/expected.json)
BUSY = "vllm-api-server-count-3.txt"  # engine vllm, busy, in flight 7
SGLANG_IDLE = "sglang-pre05-model-name-idle.txt"

LIST = """
import json
from drainhook.reading.discovery.listeners import candidates, read_listeners
found = read_listeners()
print(json.dumps({
    "listeners": sorted([str(l.address), l.port] for l in found),
    "urls": list(candidates(found).urls()),
}))
"""

SEARCH = """
import json, sys, time
from drainhook.reading.discovery.search import search
from drainhook.reading.read import Reader
from drainhook.reading.target import parse_url
left, exclude, timeout = float(sys.argv[1]), json.loads(sys.argv[2]), float(sys.argv[3])
start = time.monotonic()
found = search(lambda url: Reader(parse_url(url)), read_timeout=timeout, until=start + left,
               exclude=[tuple(e) for e in exclude])
print(json.dumps({
    "elapsed": time.monotonic() - start,
    "found": [[t.url, t.reading.engine, t.reading.verdict.value, t.reading.in_flight]
              for t in found.found],
    "tried": {t.url: t.why for t in found.tried},
    "not_read": list(found.not_read), "left_out": list(found.left_out),
    "describe": found.describe(),
}))
"""


def python(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]


def test_the_namespace_holds_exactly_the_tests_listeners(pod_command: Pod) -> None:
    servers = [
        engine("vllm", 8000, IDLE, sockets=2),  # two API servers, SO_REUSEPORT
        Server("v6only", "::", 8000, v6only=True),
        engine("sglang", 30000, SGLANG_IDLE, host="127.0.0.1"),
        Server("v6loop", "::1", 30001),
        sidecar("mesh", 15090, host="::"),
        Server("mapped", "::ffff:127.0.0.1", 9000),
        hanging("second-loopback", 7000, host="127.0.0.2"),
    ]
    run = pod_command(servers, python(LIST))
    assert run.code == 0, run.stderr
    out = run.json()
    assert out["listeners"] == sorted(
        [
            ["0.0.0.0", 8000],
            ["::", 8000],
            ["127.0.0.1", 30000],
            ["::1", 30001],
            ["::", 15090],
            ["127.0.0.1", 9000],
            ["127.0.0.2", 7000],
        ]
    )
    assert out["urls"] == [
        "http://127.0.0.2:7000/metrics",
        "http://127.0.0.1:8000/metrics",
        "http://127.0.0.1:9000/metrics",
        "http://[::1]:15090/metrics",
        "http://127.0.0.1:30000/metrics",
        "http://[::1]:30001/metrics",
    ]
    assert all(log.requests == () for log in run.servers.values())  # listing reads nothing


def test_probe_reads_the_tests_engine_by_its_port(pod: Pod) -> None:
    servers = [engine("engine", 0, BUSY), sidecar("mesh", 15021)]
    run = pod(servers, "probe", "--url", "http://127.0.0.1:{port:engine}/metrics", "--json")
    assert run.code == 1, run.stderr  # busy
    out = run.json()
    assert (out["engine"], out["verdict"], out["in_flight"]) == ("vllm", "busy", 7)
    assert out["target"] == f"http://127.0.0.1:{run.ports['engine']}/metrics"
    assert run.servers["engine"].paths == ["/metrics"]
    assert "accept: text/plain;version=0.0.4" in run.servers["engine"].requests[0].head.lower()
    assert run.servers["mesh"].requests == ()
    assert 0 < run.servers["engine"].requests[0].t < run.elapsed


def test_wait_drains_on_the_nth_reply_and_env_ports_are_substituted(pod: Pod) -> None:
    replies = [Reply(sample=BUSY), Reply(sample=IDLE)]
    servers = [Server("engine", "127.0.0.1", 0, {"/metrics": replies})]
    run = pod(
        servers,
        "wait",
        *("--settle", "0", "--interval", "0.1", "--grace", "30"),
        env={"DRAINHOOK_PORT": "{port:engine}"},
    )
    assert run.code == 0, run.stderr
    assert "outcome=drained" in run.summary
    assert run.servers["engine"].paths == ["/metrics"] * 3  # busy, idle, idle
    times = [r.t for r in run.servers["engine"].requests]
    # The confirming read I/4 after the first idle one: the connection signal read 0 too.
    assert times == sorted(times) and times[2] - times[1] >= 0.1 / 4 - 0.001


def test_reuseport_sockets_share_one_port(pod_command: Pod) -> None:
    connect = """
import sys, urllib.error, urllib.request
for _ in range(40):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/x", timeout=5)
    except urllib.error.HTTPError as exc:
        assert exc.code == 404
"""
    run = pod_command([Server("pair", "0.0.0.0", 8000, sockets=2)], python(connect, "8000"))
    assert run.code == 0, run.stderr
    per_socket = run.servers["pair"].connections
    assert len(per_socket) == 2 and sum(per_socket) == 40
    assert min(per_socket) > 0  # the kernel spread them (all 40 on one: 2 in 10^12)
    sockets = [r.socket for r in run.servers["pair"].requests]
    assert (sockets.count(0), sockets.count(1)) == per_socket


def test_servers_start_and_stop_on_time(pod_command: Pod) -> None:
    poll = """
import socket, sys, time
seen = []
end = time.monotonic() + 2.0
while time.monotonic() < end:
    try:
        socket.create_connection(("127.0.0.1", 8000), timeout=1).close()
        seen.append(1)
    except OSError:
        seen.append(0)
    time.sleep(0.05)
print("".join(map(str, seen)))
"""
    late = Server("late", "127.0.0.1", 8000, start_after=1.0, stop_after=1.5)
    run = pod_command([late], python(poll))
    assert run.code == 0, run.stderr
    seen = run.stdout.strip()
    # Refused, then accepted, then refused again, in that order and nothing else.
    assert seen[0] == "0" and seen[-1] == "0" and "1" in seen
    assert seen.strip("0").count("0") == 0


def test_the_harness_refuses_a_namespace_that_is_not_empty() -> None:
    prefix = netns()
    if prefix is None:
        pytest.skip("no empty network namespace (`unshare -n`) can be made here")
    # A listener already there (made before the harness starts): it must stop.
    already = """
import socket, subprocess, sys
s = socket.socket(); s.bind(("0.0.0.0", 0)); s.listen()
sys.exit(subprocess.run([sys.executable, "-m", "tests.support.podns"]).returncode)
"""
    with pytest.raises(PodError, match="not an empty network namespace"):
        run_pod([engine("e", 8000, IDLE)], ["true"], prefix=[*prefix, *python(already)])
    # And on this machine itself, outside any new namespace: it says so and runs nothing.
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.podns"],
        input=json.dumps({"servers": [], "command": ["true"], "timeout": 5}),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=base_env(),
        timeout=30,
        check=False,
    )
    assert json.loads(done.stdout)["error"].startswith("not an empty network namespace")


# ---- listener discovery's search, with the hook's Reader, in a namespace --------


# The search's read timeout: over POD_LATE, so that one timeout plus the level stays
# short of two timeouts, and D plus the level short of one.
TIMEOUT = 1.5


def search(pod: Pod, servers: list[Server], left: float, exclude: object = ()) -> dict[str, Any]:
    run = pod(servers, python(SEARCH, str(left), json.dumps(exclude), str(TIMEOUT)))
    assert run.code == 0, run.stderr
    out: dict[str, Any] = run.json()
    out["servers"] = run.servers
    return out


POD = [
    engine("engine", 8123, IDLE),
    sidecar("mesh-admin", 15000, 404),
    sidecar("mesh-stats", 15090, 200, "envoy_server_live 1\n", host="::"),
    hanging("hanging", 9000),
    Server("silent", "127.0.0.1", 9001, silent=True),
    Server("zmq", "0.0.0.0", 5555, other=Reply(raw="\xff\x00\x00\x00\x00\x00\x00\x00\x01\x7f")),
]


def test_search_finds_the_engine_among_sidecars_once_each(pod_command: Pod) -> None:
    out = search(pod_command, POD, left=5.0)
    assert out["found"] == [["http://127.0.0.1:8123/metrics", "vllm", "idle", 0.0]]
    assert sorted(out["tried"]) == sorted(
        [
            "http://127.0.0.1:5555/metrics",
            "http://127.0.0.1:8123/metrics",
            "http://127.0.0.1:9000/metrics",
            "http://127.0.0.1:9001/metrics",
            "http://127.0.0.1:15000/metrics",
            "http://[::1]:15090/metrics",
        ]
    )
    assert out["tried"]["http://127.0.0.1:15000/metrics"] == "HTTP 404"
    for name in ("engine", "mesh-admin", "mesh-stats", "hanging", "zmq"):
        assert out["servers"][name].paths == ["/metrics"], name  # one read each
    assert out["servers"]["silent"].connections == (1,)
    # In parallel: the two that never answer cost one read timeout, not two.
    assert TIMEOUT - 0.1 <= out["elapsed"] < late(TIMEOUT, POD_LATE)


def test_search_ends_at_the_deadline_whatever_hangs(pod_command: Pod) -> None:
    out = search(pod_command, POD, left=0.4)
    assert out["found"] == [["http://127.0.0.1:8123/metrics", "vllm", "idle", 0.0]]
    assert 0.35 <= out["elapsed"] < late(0.4, POD_LATE)  # D, not the read timeout
    # Its read was cut at D: by its own clipped timeout, or abandoned a moment before.
    why = out["tried"]["http://127.0.0.1:9000/metrics"]
    assert why == "no answer in time" or why.startswith("read timed out")


def test_search_skips_the_configured_target_and_finds_no_engine(pod_command: Pod) -> None:
    servers = [engine("engine", 8000, IDLE), sidecar("mesh", 15000)]
    out = search(pod_command, servers, left=5.0, exclude=[["127.0.0.1", 8000]])
    assert out["found"] == []
    assert list(out["tried"]) == ["http://127.0.0.1:15000/metrics"]
    assert out["servers"]["engine"].requests == ()
    assert out["describe"] == "tried 1 listener: http://127.0.0.1:15000/metrics (HTTP 404)"


def test_search_reads_at_most_64_listeners(pod_command: Pod) -> None:
    servers = [sidecar(f"s{p}", p) for p in range(20001, 20001 + MAX_READS + 1)]
    servers.append(engine("engine", 20000, IDLE))  # the lowest port: read first
    out = search(pod_command, servers, left=10.0)
    assert out["found"][0][0] == "http://127.0.0.1:20000/metrics"
    assert len(out["tried"]) == MAX_READS
    assert out["left_out"] == [f"http://127.0.0.1:{p}/metrics" for p in (20064, 20065)]
    assert out["describe"].endswith("; 2 more not read (at most 64 are)")
    assert sum(len(log.requests) for log in out["servers"].values()) == MAX_READS
    assert out["elapsed"] < late(10.0, POD_LATE)  # its D
