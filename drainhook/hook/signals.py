"""SIGTERM/SIGINT end the hook (CONTRACT §5), in two stages.

While the hook starts (`catch` until `arm`), a signal ends the process at once
with one line: an exception raised mid-import could be swallowed by the import
machinery or a C extension, and the hook would run on to D. Once armed, the
first signal raises `Interrupted` (exit 143 / 130), later ones are ignored; one
swallowed by a finalizer ("Exception ignored in ...") is sent again from
outside it, so that a signal is never lost (tests/test_signals.py).
"""

from __future__ import annotations

import os
import signal
import sys
import time
import types
from collections.abc import Callable

from drainhook import exits

SIGNALS = (signal.SIGTERM, signal.SIGINT)

_armed = False
_interrupted: type[BaseException] | None = None
_previous_unraisable: Callable[[sys.UnraisableHookArgs], object] | None = None
_in_hook = False


def _exit_now(signum: int, frame: types.FrameType | None) -> None:
    name = signal.Signals(signum).name
    try:
        os.write(2, f"drainhook: interrupted by {name} while starting\n".encode())
    finally:
        os._exit(exits.interrupted(signum))


def catch() -> None:
    """Until `arm`: a signal ends the process at once, exit 128 + signum."""
    for signum in SIGNALS:
        signal.signal(signum, _exit_now)


def _raise(signum: int, frame: types.FrameType | None) -> None:
    global _armed
    if _armed and _interrupted is not None:
        _armed = False  # later signals, while the hook finishes, are ignored
        raise _interrupted(signum)


def _unraisable(args: sys.UnraisableHookArgs) -> None:
    """Deliver again an Interrupted that a finalizer or weakref callback swallowed.

    The signal is sent again to the main thread by a helper thread once this
    hook has returned: a raise inside the hook would be swallowed too.
    """
    global _armed, _in_hook
    exc = args.exc_value
    if _interrupted is None or not isinstance(exc, _interrupted):
        if _previous_unraisable is not None:
            _previous_unraisable(args)
        return
    import threading

    _in_hook = True
    threading.Thread(
        target=_resend, args=(threading.main_thread().ident, int(exc.args[0])), daemon=True
    ).start()
    _armed = True
    _in_hook = False  # the last statement: no signal is handled between it and the return


def _resend(thread_id: int, signum: int) -> None:
    while _in_hook:
        time.sleep(0.001)
    signal.pthread_kill(thread_id, signum)


def arm() -> None:
    """Install the raising handlers: the next SIGTERM or SIGINT raises Interrupted."""
    global _armed, _interrupted, _previous_unraisable
    from drainhook.hook.drain import Interrupted

    _interrupted = Interrupted
    if _previous_unraisable is None:
        _previous_unraisable = sys.unraisablehook
        sys.unraisablehook = _unraisable
    _armed = True
    for signum in SIGNALS:
        signal.signal(signum, _raise)


def release_on_signal() -> None:
    """While a failed hook holds (drainhook.failsafe): a signal ends the process at
    once, as while it starts. Only where the entry point installed handlers: a run
    called in-process (a test, the demo) keeps its caller's."""
    if signal.getsignal(signal.SIGTERM) in (_raise, _exit_now):
        catch()


def disarm() -> None:
    """Keep the handlers but stop raising: the hook is writing its summary."""
    global _armed
    _armed = False
