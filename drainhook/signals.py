"""SIGTERM/SIGINT end the hook: the handler raises `Interrupted` once, which the
drain loop turns into the INTERRUPTED outcome (exit 143 / 130)."""

from __future__ import annotations

import signal
import types

from drainhook.drain import Interrupted

_armed = False


def _raise(signum: int, frame: types.FrameType | None) -> None:
    global _armed
    if _armed:
        _armed = False  # later signals, while the hook finishes, are ignored
        raise Interrupted(signum)


def arm() -> None:
    """Install the handlers: the next SIGTERM or SIGINT raises Interrupted."""
    global _armed
    _armed = True
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _raise)


def disarm() -> None:
    """Keep the handlers but stop raising: the hook is writing its summary."""
    global _armed
    _armed = False
