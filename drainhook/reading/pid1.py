"""Whether SIGTERM reaches the engine (CONTRACT §4): the kubelet sends it to the
container's PID 1 alone, and the kernel gives PID 1 only the signals it handles.
It reaches the engine's server (the process that holds the serving port's
listener) when that is PID 1 (started with `exec`), or the direct child of an
init that forwards signals (tini, dumb-init, s6), or in the process group that
such an init signals whole (dumb-init's default, `tini -g`). Anything else is
named: a shell that runs the engine as a child (a `trap` included: bash runs one
only once its foreground child exits; a login shell's `-bash` too), an init
whose child is such a shell (`tini -- sh -c 'engine; ...'`), a Python launcher
that runs the engine as a child. Where the server cannot be seen (another uid,
no port), PID 1 alone is judged: a shell, or an init whose child is one."""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass

from drainhook.reading.connections import socket_inodes
from drainhook.reading.gone import read_listeners
from drainhook.reading.target import Target

SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh", "mksh", "busybox"})
INITS = frozenset({"tini", "docker-init", "dumb-init", "s6-svscan", "catatonit"})
FIX = "start the engine with `exec`, or as the direct child of tini or dumb-init"


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgrp: int
    argv: tuple[str, ...]

    @property
    def name(self) -> str:
        """The program's basename (a login shell's `-bash` is bash)."""
        return os.path.basename(self.argv[0]).lstrip("-") if self.argv else "?"


def read_proc(pid: int, proc: str = "/proc") -> Proc | None:
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            fields = f.read(4096).rpartition(b")")[2].split()  # past the (comm)
        with open(f"{proc}/{pid}/cmdline", "rb") as f:
            argv = f.read(4096).decode("utf-8", "replace").split("\0")
        return Proc(pid, int(fields[1]), int(fields[2]), tuple(a for a in argv if a))
    except (OSError, ValueError, IndexError):
        return None


def server_of(port: int, proc: str = "/proc") -> Proc | None:
    """The process of the lowest pid that holds a listener on `port`; None where none
    can be seen."""
    inodes = {one.inode for one in read_listeners(proc) or () if one.port == port}
    try:
        pids = sorted(int(n) for n in os.listdir(proc) if n.isdigit())
    except OSError:
        return None
    for pid in pids if inodes - {0} else ():
        try:
            if inodes & socket_inodes(f"{proc}/{pid}/fd"):
                return read_proc(pid, proc)
        except OSError:
            continue
    return None


def _groups_signalled(init: Proc) -> bool:
    """Whether the init signals its child's whole process group (its own options,
    before the child's command, say)."""
    options = set(itertools.takewhile(lambda a: a.startswith("-") and a != "--", init.argv[1:]))
    if init.name == "dumb-init":
        return not {"-c", "--single-child"} & options
    return init.name in ("tini", "docker-init") and "-g" in options


def unsignalled(target: Target | None = None, proc: str = "/proc") -> str | None:
    """The warning for an engine that SIGTERM does not reach (module docstring), or
    None (also where /proc cannot say, PID 1 is a Pod's shared `pause`, or a
    machine's own init: no container's). The
    engine's server is the holder of `target`'s port when the target is the Pod's."""
    one = read_proc(1, proc)
    if one is None or one.name in ("pause", "systemd", "init"):  # a Pod's shared, a machine's
        return None
    server = server_of(target.port, proc) if target is not None and target.in_pod else None
    if server is None:  # PID 1 alone: a shell, or an init whose child is one
        if one.name in SHELLS:
            return _shell(one, None)
        children = [c for c in map(read_proc, _children(1, proc)) if c is not None]
        shells = [c for c in children if c.name in SHELLS]
        return _init(one, shells[0], None) if one.name in INITS and shells else None
    chain = [server]
    while chain[-1].ppid > 1 and len(chain) < 64 and (up := read_proc(chain[-1].ppid, proc)):
        chain.append(up)
    top = chain[-1]
    if server.pid == 1 or top.ppid != 1:  # the engine, or not one of PID 1's: not ours to say
        return None
    if one.name in INITS and (
        server is top or (_groups_signalled(one) and server.pgrp == top.pgrp)
    ):
        return None
    if one.name in SHELLS:
        return _shell(one, server)
    if one.name in INITS:
        return _init(one, top, server)
    kin = "child" if server is top else "descendant"
    return (
        f"PID 1 is {one.name}, which is not the engine: it forwards SIGTERM to no child, "
        f"and the engine (pid {server.pid}), its {kin}, is killed at G with every request "
        f"in flight whatever the hook drains; {FIX}"
    )


def _children(pid: int, proc: str) -> list[int]:
    try:
        pids = [int(n) for n in os.listdir(proc) if n.isdigit()]
    except OSError:
        return []
    return [p for p in pids if (one := read_proc(p, proc)) is not None and one.ppid == pid]


def _shell(one: Proc, server: Proc | None) -> str:
    engine = "the engine, its child," if server is None else f"the engine (pid {server.pid})"
    return (
        f"PID 1 is {one.name}, which drops SIGTERM: a shell forwards no signal to "
        f"{engine} and runs a `trap` only once its foreground child exits; the engine "
        f"is killed at G with every request in flight whatever the hook drains; {FIX}"
    )


def _init(one: Proc, child: Proc, server: Proc | None) -> str:
    engine = "the engine under it" if server is None else f"the engine (pid {server.pid})"
    return (
        f"PID 1 is {one.name}, which forwards SIGTERM to its child alone, here "
        f"{child.name} (pid {child.pid}), not to {engine}: the engine is killed at G with "
        f"every request in flight whatever the hook drains; {FIX}"
    )
