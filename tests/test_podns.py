"""The Pod-namespace harness (tests/support/podns.py) proved: the namespace holds
exactly the test's listeners, the hook reads a server there, SO_REUSEPORT pairs
share their connections, the harness refuses a namespace that is not empty.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

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
from drainhook.reading.gone import read_listeners
print(json.dumps({"ports": sorted(l.port for l in read_listeners() or ())}))
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
    # One per listening socket: 8000 three times (two SO_REUSEPORT, one v6only).
    assert run.json()["ports"] == [7000, 8000, 8000, 8000, 9000, 15090, 30000, 30001]
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
    # These are the server's receipts: the first idle read's own way there may have
    # taken a few ms more than the next one's (seen: 23.5 ms apart), so half of I/4;
    # a confirmation at once would come a read's time (ms) after the first.
    assert times == sorted(times) and times[2] - times[1] >= 0.1 / 8


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
