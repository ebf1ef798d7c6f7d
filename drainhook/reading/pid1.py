"""Whether SIGTERM reaches the engine (CONTRACT §4): the kubelet sends it to the
container's PID 1, and the kernel gives PID 1 only the signals it handles. A shell
there with no handler for it (`sh -c "... vllm serve ..."`, the engine a child,
no `exec`, no `trap`) drops it, and the engine is killed at G with every request in
flight, however well the hook drained. An init that forwards signals (tini,
dumb-init) is no shell; a shell that traps SIGTERM forwards it."""

from __future__ import annotations

import os
import signal

SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh", "busybox"})


def shell_pid1(proc: str = "/proc") -> str | None:
    """The warning for a PID 1 that is a shell with no SIGTERM handler, or None (also
    where /proc cannot say)."""
    try:
        with open(f"{proc}/1/cmdline", "rb") as f:
            shell = os.path.basename(f.read(4096).split(b"\0")[0].decode("utf-8", "replace"))
        with open(f"{proc}/1/status", "rb") as f:
            fields = dict(line.split(b":", 1) for line in f.read().splitlines() if b":" in line)
        caught = int(fields[b"SigCgt"].strip(), 16)
    except (OSError, KeyError, ValueError):
        return None
    if shell not in SHELLS or caught >> (signal.SIGTERM - 1) & 1:
        return None
    return (
        f"PID 1 is {shell}, which drops SIGTERM (it has no handler: no `exec`, no "
        "`trap`): the engine, its child, is killed at G with every request in flight "
        "whatever the hook drains; start the engine with `exec`"
    )
