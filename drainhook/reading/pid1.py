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

import contextlib
import itertools
import os
from dataclasses import dataclass

from drainhook.reading.connections import LISTEN, Doubt, Unavailable, dump, socket_inodes
from drainhook.reading.target import Target

SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh", "mksh", "busybox"})
INITS = frozenset({"tini", "docker-init", "dumb-init", "s6-svscan", "catatonit"})
NOT_A_CONTAINERS = frozenset({"pause", "systemd", "init"})  # a Pod's shared, a machine's
KILLED = "is killed at G with every request in flight whatever the hook drains"
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


def processes(proc: str = "/proc") -> dict[int, Proc]:
    """Every process this PID namespace shows (those that cannot be read left out)."""
    found: dict[int, Proc] = {}
    with contextlib.suppress(OSError):
        for pid in (int(n) for n in os.listdir(proc) if n.isdigit()):
            try:
                with open(f"{proc}/{pid}/stat", "rb") as f:
                    fields = f.read(4096).rpartition(b")")[2].split()  # past the (comm)
                with open(f"{proc}/{pid}/cmdline", "rb") as f:
                    argv = tuple(
                        a for a in f.read(4096).decode("utf-8", "replace").split("\0") if a
                    )
                found[pid] = Proc(pid, int(fields[1]), int(fields[2]), argv)
            except (OSError, ValueError, IndexError):
                continue
    return found


def _holds(pid: int, inodes: set[int], proc: str) -> bool:
    try:
        return bool(inodes & socket_inodes(f"{proc}/{pid}/fd"))
    except OSError:
        return False


def _groups_signalled(init: Proc) -> bool:
    """Whether the init signals its child's whole process group (its own options,
    before the child's command, say)."""
    options = set(itertools.takewhile(lambda a: a.startswith("-") and a != "--", init.argv[1:]))
    if init.name == "dumb-init":
        return not {"-c", "--single-child"} & options
    return init.name in ("tini", "docker-init") and "-g" in options


def unsignalled(target: Target | None = None, proc: str = "/proc") -> str | None:
    """The warning for an engine that SIGTERM does not reach (module docstring), or
    None: also where /proc cannot say, and where PID 1 is no container's (a Pod's
    shared `pause`, a machine's init). The engine's server: the lowest pid that
    holds a listener on `target`'s port, when the target is the Pod's."""
    procs = processes(proc)
    one = procs.get(1)
    if one is None or one.name in NOT_A_CONTAINERS:
        return None
    port = target.port if target is not None and target.in_pod else None
    inodes: set[int] = set()
    with contextlib.suppress(Unavailable, Doubt):
        found = dump(0.25, port=port) if port is not None else []  # once, at the start
        inodes = {x.inode for x in found if x.state == LISTEN and x.sport == port} - {0}
    server = next((p for pid, p in sorted(procs.items()) if _holds(pid, inodes, proc)), None)
    if server is None:  # PID 1 alone: a shell, or an init whose child is one
        shells = [p for p in procs.values() if p.ppid == 1 and p.name in SHELLS]
        if one.name in SHELLS or (one.name in INITS and shells):
            return _named(one, shells[0] if one.name in INITS else None, None)
        return None
    top = server
    for _ in range(64):  # up to the child of PID 1 it descends from (bounded: a racy view)
        if top.ppid <= 1 or top.ppid not in procs:
            break
        top = procs[top.ppid]
    if server.pid == 1 or top.ppid != 1:  # the engine, or not one of PID 1's: not ours
        return None
    if one.name in INITS and (
        server is top or (_groups_signalled(one) and server.pgrp == top.pgrp)
    ):
        return None
    return _named(one, top, server)


def _named(one: Proc, child: Proc | None, server: Proc | None) -> str:
    engine = "the engine" + ("" if server is None else f" (pid {server.pid})")
    if one.name in SHELLS:
        why = (
            f"which drops SIGTERM: a shell forwards no signal to {engine} and runs a "
            "`trap` only once its foreground child exits"
        )
    elif one.name in INITS and child is not None:
        why = (
            f"which forwards SIGTERM to its child alone, here {child.name} (pid "
            f"{child.pid}), not to {engine}"
        )
    else:
        why = f"which is not the engine and forwards SIGTERM to no child of its: not to {engine}"
    return f"PID 1 is {one.name}, {why}; the engine {KILLED}; {FIX}"
