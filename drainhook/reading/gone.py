"""Whether a refused engine is shown gone (CONTRACT §2), from /proc alone, without
connecting anywhere: the listening TCP sockets of the hook's network namespace
(`/proc/net/tcp` and `tcp6`: every container of the Pod shares them; tests/proc_net
holds real ones), and which of them a process the hook can see holds (the socket
inodes among `/proc/<pid>/fd`: in a Pod, its own container's PID namespace).

Gone: nothing listens, or every process's descriptors were read and none holds a
listener, in a view that stood still while it was walked: the listeners and the
processes listed again after the walk are the same (a listener handed from a
parent to a child that then exits is missed by a walk that lists once). A
process whose descriptors cannot be read (another uid, `hidepid`), a /proc that
cannot be read, a view that changed at each of MAX_WALKS walks and time that
runs out are doubt: the hook holds.
"""

from __future__ import annotations

import ipaddress
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from drainhook.reading.connections import socket_inodes

LISTEN = "0A"  # TCP_LISTEN in include/net/tcp_states.h
# Enough for ~27,000 sockets a file (about 150 bytes a line); the kernel lists
# listeners before connections, so a cap cuts only the connections of a busy Pod.
MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_WALKS = 5  # a view that changes at each walk holds: the engine is still moving


@dataclass(frozen=True)
class Listener:
    """One listening socket: its port, its inode (0: the kernel's own) and its local
    address as /proc writes it (8 hex digits for IPv4, 32 for IPv6; zeros: any)."""

    port: int
    inode: int
    address: str = field(default="", compare=False)


def parse_proc_net(text: str) -> tuple[Listener, ...]:
    """The listening sockets in the text of /proc/net/tcp or tcp6 (a line cut short,
    or anything else that is not one, is passed over)."""
    found: list[Listener] = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 10 or not fields[0].endswith(":") or fields[3].upper() != LISTEN:
            continue
        try:
            address, _, hex_port = fields[1].rpartition(":")
            port, inode = int(hex_port, 16), int(fields[9])
        except ValueError:
            continue
        if 0 < port < 65536:
            found.append(Listener(port, inode, address))
    return tuple(found)


def read_listeners(proc: str = "/proc") -> tuple[Listener, ...] | None:
    """The listeners of this network namespace; None when /proc cannot say."""
    found: list[Listener] = []
    read_any = False
    for name in ("tcp", "tcp6"):
        try:
            with open(f"{proc}/net/{name}", "rb") as f:
                text = f.read(MAX_FILE_BYTES).decode("ascii", "replace")
        except OSError:
            continue  # no IPv6 here, say
        read_any = True
        found += parse_proc_net(text)
    return tuple(found) if read_any else None


@dataclass(frozen=True)
class Found:
    """What /proc showed: whether the engine is gone, and in words what listens."""

    gone: bool
    said: str


def engine_gone(
    until: float,
    *,
    proc: str = "/proc",
    clock: Callable[[], float] = time.monotonic,
) -> Found:
    """Whether the engine is shown gone (module docstring), by `until` on `clock`."""
    view = _view(proc)
    for _ in range(MAX_WALKS):
        if isinstance(view, Found):
            return view
        found = _walk(*view, until, proc, clock)
        if not found.gone or (again := _view(proc)) == view:
            return found
        view = again
    where = "TCP ports listen here" if isinstance(view, Found) else _listen(view[0])
    return Found(False, f"{where}; the processes changed at each walk")


def _view(proc: str) -> tuple[tuple[Listener, ...], list[str]] | Found:
    """The listeners and the processes (pids) to walk, or what /proc already shows."""
    listeners = read_listeners(proc)
    if listeners is None:
        return Found(False, "the listening ports cannot be read (/proc/net/tcp)")
    if not listeners:
        return Found(True, "nothing listens in this network namespace")
    try:
        return listeners, sorted((n for n in os.listdir(proc) if n.isdigit()), key=int)
    except OSError:
        return Found(False, f"{_listen(listeners)}; /proc lists no processes")


SHOWN_PORTS = 8  # a node's hostNetwork Pod may listen on hundreds: a handful, then a count


def family_fix(host: str, port: int, proc: str = "/proc") -> str | None:
    """For a refused `host` (an IP literal) whose port listens in the other address
    family only, the fix that names it (a `[::1]` against an IPv4-only engine)."""
    try:
        version = ipaddress.ip_address(host.strip("[]")).version
    except ValueError:
        return None
    bound = [x.address for x in read_listeners(proc) or () if x.port == port]
    if version == 6 and bound and all(len(a) == 8 for a in bound):
        return f"port {port} listens on IPv4 only, not on {host}: point --host at 127.0.0.1"
    if version == 4 and bound and all(len(a) == 32 and set(a) != {"0"} for a in bound):
        return f"port {port} listens on IPv6 only, not on {host}: point --host at ::1"
    return None


def _listen(listeners: tuple[Listener, ...]) -> str:
    ports = sorted({one.port for one in listeners})
    more = f" and {len(ports) - SHOWN_PORTS} more" if len(ports) > SHOWN_PORTS else ""
    return f"TCP ports {','.join(map(str, ports[:SHOWN_PORTS]))}{more} listen here"


def _walk(
    listeners: tuple[Listener, ...],
    pids: list[str],
    until: float,
    proc: str,
    clock: Callable[[], float],
) -> Found:
    """Which process holds a listener (pids gone since are passed over)."""
    by_inode = {one.inode: one.port for one in listeners if one.inode}
    held: list[str] = []
    unread: list[str] = []
    for pid in pids:
        if clock() >= until:
            return Found(False, f"{_listen(listeners)}; no time left to see who holds them")
        try:
            mine = {by_inode[i] for i in socket_inodes(f"{proc}/{pid}/fd") if i in by_inode}
        except FileNotFoundError:
            continue  # it has exited: the view is listed again after the walk
        except OSError:
            unread.append(pid)
            continue
        if mine:
            held.append(f"{','.join(map(str, sorted(mine)))} by pid {pid} ({_comm(proc, pid)})")
    if held or unread:
        who = held[:SHOWN_PORTS] + ([f"pids {','.join(unread[:5])} unreadable"] if unread else [])
        return Found(False, f"{_listen(listeners)} (held: {'; '.join(who)})")
    return Found(True, f"{_listen(listeners)}, held by no process of this container")


def _comm(proc: str, pid: str) -> str:
    try:
        with open(f"{proc}/{pid}/comm", "rb") as f:
            return f.read(64).decode("utf-8", "replace").strip() or "?"
    except OSError:
        return "?"
