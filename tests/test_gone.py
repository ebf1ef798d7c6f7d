"""CONTRACT §2: a refused target ends the hook only when /proc shows the engine
gone (drainhook.reading.gone); a port of the hook's own container that listens
is a wrong target, held to D. The parser on real /proc/net files (tests/proc_net),
the check on /proc trees made here, and the hook itself in a Pod's namespaces:
the network one shared, a PID namespace per container (`unshare -p`)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drainhook.reading.gone import Listener, engine_gone, parse_proc_net, read_listeners
from tests.conftest import POD_LATE, late
from tests.support.logs import fields
from tests.support.podns import Pod, engine, sidecar
from tests.support.process import container

PROC_NET = Path(__file__).parent / "proc_net"


def test_real_files_list_each_listening_socket_with_its_inode() -> None:
    v4 = parse_proc_net((PROC_NET / "tcp").read_text())
    v6 = parse_proc_net((PROC_NET / "tcp6").read_text())
    assert v4 == (
        Listener(0xFFFF, 21566),
        Listener(0x3AAD, 21561),
        Listener(0x7530, 21558),
        Listener(0x1B58, 21563),
        Listener(0x1F90, 21564),
        Listener(8000, 21556),
        Listener(8000, 21555),
    )  # and not the two established connections (state 01)
    assert [one.port for one in v6] == [9000, 15090, 30001, 8000, 8081]


@given(st.text(max_size=400))
def test_any_text_parses_without_raising(text: str) -> None:
    assert all(0 < one.port < 65536 for one in parse_proc_net(text))


def fake_proc(root: Path, listeners: dict[int, int], pids: dict[str, list[int] | None]) -> str:
    """A /proc with these listeners (inode: port) and processes (pid: the inodes of
    its sockets; None: its fd directory cannot be read)."""
    (root / "net").mkdir(parents=True)
    lines = ["  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt uid"]
    for n, (inode, port) in enumerate(listeners.items()):
        lines.append(f"{n}: 0100007F:{port:04X} 00000000:0000 0A 0:0 00:0 0 0 0 {inode} 1")
    (root / "net" / "tcp").write_text("\n".join(lines) + "\n")
    for pid, inodes in pids.items():
        (root / pid).mkdir()
        (root / pid / "comm").write_text(f"proc{pid}\n")
        if inodes is None:
            (root / pid / "fd").write_text("")  # not a directory: cannot be listed
            continue
        (root / pid / "fd").mkdir()
        for fd, inode in enumerate([*inodes, 0]):
            target = f"socket:[{inode}]" if inode else "/dev/null"
            os.symlink(target, root / pid / "fd" / str(fd))
    return str(root)


def far() -> float:
    return time.monotonic() + 60


PORTS = "TCP ports 8001 listen here"


@pytest.mark.parametrize(
    ("listeners", "pids", "gone", "said"),
    [
        ({}, {"1": [5]}, True, "nothing listens in this network namespace"),
        ({7: 8001}, {"1": [7], "2": []}, False, f"{PORTS} (held: 8001 by pid 1 (proc1))"),
        ({7: 8001}, {"1": [], "2": [9]}, True, f"{PORTS}, held by no process of this container"),
        ({7: 8001}, {"1": [], "2": None}, False, f"{PORTS} (held: pids 2 unreadable)"),
    ],
    ids=["nothing-listens", "held-here", "held-elsewhere", "unreadable"],
)
def test_gone_only_when_shown(
    tmp_path: Path,
    listeners: dict[int, int],
    pids: dict[str, list[int] | None],
    gone: bool,
    said: str,
) -> None:
    found = engine_gone(far(), proc=fake_proc(tmp_path, listeners, pids))
    assert (found.gone, found.said) == (gone, said)


def test_a_node_full_of_listeners_is_said_in_a_handful(tmp_path: Path) -> None:
    """A hostNetwork Pod on a busy node: 300 ports listen, 12 of them held here. The
    reason names 8 ports and the count of the rest, and 8 holders: before, every
    port, a line of over 2,000 characters in the log and at every read."""
    listeners = {100 + n: 30000 + n for n in range(300)}
    pids: dict[str, list[int] | None] = {str(n): [100 + n] for n in range(1, 13)}
    found = engine_gone(far(), proc=fake_proc(tmp_path, listeners, pids))
    shown = ",".join(str(30000 + n) for n in range(8))
    assert found.said.startswith(
        f"TCP ports {shown} and 292 more listen here (held: 30001 by pid 1"
    )
    assert found.said.count(" by pid ") == 8 and len(found.said) < 400 and not found.gone


class Handover:
    """A clock that, as a walk reads its first pid, hands the listener (inode 7) from
    pid 1 to a new pid (a parent that forked a child, closed its copy and will
    exit): a walk that lists the processes once sees no holder. With `every`, a
    new process joins at each call: a view that never stands still."""

    def __init__(self, root: Path, every: bool = False) -> None:
        self.root, self.every, self.calls = root, every, 0

    def __call__(self) -> float:
        self.calls += 1
        if self.calls == 1 or self.every:
            pid = str(100 + self.calls)
            (self.root / pid / "fd").mkdir(parents=True)
            os.symlink("socket:[7]", self.root / pid / "fd" / "0")
            (self.root / pid / "comm").write_text("child\n")
            for old in ("1", str(99 + self.calls)):
                link = self.root / old / "fd" / "0"
                if link.is_symlink() and os.readlink(link) == "socket:[7]":
                    link.unlink()
        return time.monotonic()


def test_a_listener_handed_over_during_the_walk_is_not_gone(tmp_path: Path) -> None:
    """Before: `TCP ports 8001 listen here, held by no process`, and the hook ended
    `unreachable` while a process held the listener at every instant."""
    proc = fake_proc(tmp_path, {7: 8001}, {"1": [7], "2": []})
    found = engine_gone(far(), proc=proc, clock=Handover(tmp_path))
    assert (found.gone, found.said) == (False, f"{PORTS} (held: 8001 by pid 101 (child))")


def test_a_view_that_never_stands_still_holds(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, {7: 8001}, {"1": [7], "2": []})
    clock = Handover(tmp_path, every=True)
    found = engine_gone(far(), proc=proc, clock=clock)
    assert (found.gone, found.said) == (False, f"{PORTS}; the processes changed at each walk")


def test_no_time_and_no_proc_are_doubt(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path / "p", {7: 8001}, {"1": []})
    assert not engine_gone(time.monotonic() - 1, proc=proc).gone
    assert read_listeners(str(tmp_path / "none")) is None
    assert not engine_gone(far(), proc=str(tmp_path / "none")).gone


def contained(*command: str) -> list[str]:
    return [*container(), *command]


# An engine process in the hook's container, listening on port 8001 (and reading nothing).
ENGINE = (
    "import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 8001)); s.listen(); "
    "time.sleep(60)"
)
TIMELINE = ("--grace", "3", "--exit-reserve", "1", "--settle", "0.5", "--interval", "0.25")


def test_a_refused_port_while_the_engine_listens_here_holds_to_d(
    pod_command: Pod, entry: list[str]
) -> None:
    """The engine moved to 8001 of the hook's own container: `--port 8000` is held to D,
    every I, and ends `misconfigured` (exit 6); the summary names the port, its
    process and the fix; a sidecar on 15090 in a container of its own (the harness)
    changes nothing."""
    shell = f'{sys.executable} -c "{ENGINE}" & exec "$@"'
    argv = contained("sh", "-c", shell, "sh", *entry, "wait", "--port", "8000", *TIMELINE)
    run = pod_command([sidecar("mesh", 15090)], argv, timeout=30)
    assert run.code == 6, run.stderr
    summary = fields(run.summary)
    assert summary["outcome"] == "misconfigured"
    assert summary["reason"].startswith("misconfigured: connection refused; TCP ports 8001,15090")
    assert "8001 by pid" in summary["reason"] and summary["reason"].endswith("at the engine")
    assert int(summary["reads"]) >= 4  # every I (0.25 s) from S (0.5 s) to D (2 s)
    assert 2.0 - 0.05 <= float(summary["elapsed"]) <= late(2.0, POD_LATE)


def test_plan_observe_names_a_wrong_port_as_probe_does(pod_command: Pod, entry: list[str]) -> None:
    """`plan --observe --port 8000` while the engine listens on 8001 of its container:
    exit 4, and the reason `probe` gives, the listening port and its process named
    (it said `connection refused` alone)."""
    listening = "until grep -q ':1F41 00000000:0000 0A' /proc/net/tcp; do sleep 0.01; done"
    shell = (f'{sys.executable} -c "{ENGINE}" & {listening}; "$@" probe --port 8000 --json; '
             '"$@" plan --observe --port 8000')  # fmt: skip
    run = pod_command([], contained("sh", "-c", shell, "sh", *entry), timeout=30)
    assert run.code == 4, run.stderr
    probed = json.loads(run.stdout)["reason"]
    assert probed.startswith("misconfigured: connection refused; TCP ports 8001")
    assert "8001 by pid" in probed and probed.endswith("point --port or --url at the engine")
    assert run.stderr == f"drainhook: cannot read http://127.0.0.1:8000/metrics: {probed}\n"


def test_a_refused_port_with_nothing_of_its_container_listening_ends_at_once(
    pod_command: Pod, entry: list[str]
) -> None:
    """The engine is gone; the Pod's other containers still listen (an engine on
    8000 of another container is not the hook's): `unreachable`, exit 4, at S."""
    servers = [engine("other", 8000, "vllm-external-lb-rank3-idle.txt"), sidecar("mesh", 15090)]
    run = pod_command(servers, contained(*entry, "wait", "--port", "9", *TIMELINE), timeout=30)
    assert run.code == 4, run.stderr
    summary = fields(run.summary)
    assert summary["reason"] == (
        "connection refused; the engine is gone: TCP ports 8000,15090 listen here, "
        "held by no process of this container"
    )
    assert float(summary["elapsed"]) <= late(0.5, POD_LATE)
    assert run.servers["other"].requests == ()  # it touched nothing it was not told to


# The engine as a supervisor that hands its listener on 8001 down a line of
# workers: each forks the next (which inherits the socket), then exits 3 ms later,
# so that a process holds it at every instant. The supervisor (a subreaper, as an
# init is) reaps them, holds no listener itself, and holds 900 other descriptors
# (an engine's processes hold hundreds): reading them is the walk's slow part.
HANDOVER = """
import ctypes, os, socket, time
ctypes.CDLL(None).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
s = socket.socket(); s.bind(("127.0.0.1", 8001)); s.listen()
if os.fork() == 0:
    while True:
        time.sleep(0.003)
        if os.fork():
            os._exit(0)
s.close()
held = [os.open("/dev/null", os.O_RDONLY) for _ in range(900)]
end = time.monotonic() + 20
while time.monotonic() < end:
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        break
"""


def test_a_listener_handed_from_process_to_process_holds_to_d(
    pod_command: Pod, entry: list[str]
) -> None:
    """CONTRACT §2: a wrong port (8000) while the engine's listener passes from parent
    to child every 3 ms: held to D, `misconfigured` (exit 6). Before: the one-listing
    walk read a pid that had just exited, found no holder and ended `unreachable`
    (exit 4) at S."""
    shell = f'{sys.executable} -c "$1" & shift; exec "$@"'
    argv = contained("sh", "-c", shell, "sh", HANDOVER, *entry, "wait", "--port", "8000")
    run = pod_command([], [*argv, *TIMELINE, "--interval", "0.1"], timeout=30)
    assert run.code == 6, run.stderr
    summary = fields(run.summary)
    assert summary["outcome"] == "misconfigured"
    assert summary["reason"].startswith("misconfigured: connection refused; TCP ports 8001")
    assert int(summary["reads"]) >= 10  # every I (0.1 s) from S (0.5 s) to D (2 s)
    assert 2.0 - 0.05 <= float(summary["elapsed"]) <= late(2.0, POD_LATE)


def test_a_host_in_the_other_address_family_is_named(pod_command: Pod, entry: list[str]) -> None:
    """`probe --host ::1` while the engine listens on 127.0.0.1 (IPv4 only): the
    reason names the family and the host to use (it said `point --port or --url`,
    and the port was right)."""
    listening = "until grep -q ':1F41 00000000:0000 0A' /proc/net/tcp; do sleep 0.01; done"
    shell = (
        f'{sys.executable} -c "{ENGINE}" & {listening}; "$@" probe --host ::1 --port 8001 --json'
    )
    run = pod_command([], contained("sh", "-c", shell, "sh", *entry), timeout=30)
    assert run.code == 3, run.stderr
    reason = json.loads(run.stdout)["reason"]
    assert reason.startswith("misconfigured: connection refused; TCP ports 8001")
    assert reason.endswith("port 8001 listens on IPv4 only, not on ::1: point --host at 127.0.0.1")
