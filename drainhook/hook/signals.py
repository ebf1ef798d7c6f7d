"""SIGTERM and SIGINT end the hook (CONTRACT §5); SIGHUP is ignored. Until `arm`, a
signal ends the process at once (an exception raised mid-import could be swallowed).
Armed, the first raises `Interrupted` (143 / 130), later ones are ignored; one that a
finalizer swallowed is raised again by SIGALRM once it returns (tests/test_signals.py)."""

from __future__ import annotations

import os
import signal
import sys

from drainhook import exits, failsafe

SIGNALS = (signal.SIGTERM, signal.SIGINT)
_armed = _in_hook = False
_swallowed: int = signal.SIGTERM


class Interrupted(BaseException):
    """A signal; not an Exception, so that no `except Exception` swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _exit_now(signum: int, _frame: object) -> None:
    failsafe.say(f"drainhook: interrupted by {signal.Signals(signum).name} while starting")
    os._exit(exits.interrupted(signum))


def catch() -> None:
    """Until `arm`, and while a failed hook holds: a signal ends the process at once."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    for signum in SIGNALS:
        signal.signal(signum, _exit_now)


def _raise(signum: int, _frame: object) -> None:
    global _armed
    if _armed:
        _armed = False  # later signals, while the hook finishes, are ignored
        raise Interrupted(signum)


def _again(args: sys.UnraisableHookArgs) -> None:
    global _armed, _in_hook, _swallowed
    if not isinstance(args.exc_value, Interrupted):
        sys.__unraisablehook__(args)
        return
    _in_hook, _armed, _swallowed = True, True, args.exc_value.signum
    signal.setitimer(signal.ITIMER_REAL, 0.001)
    _in_hook = False  # the last statement: no handler runs between it and the return


def _alarm(_signum: int, frame: object) -> None:
    if _in_hook:
        signal.setitimer(signal.ITIMER_REAL, 0.001)  # not yet out of the finalizer
    else:
        _raise(_swallowed, frame)


def arm() -> None:
    """Raise Interrupted on the next SIGTERM or SIGINT."""
    global _armed
    sys.unraisablehook = _again
    signal.signal(signal.SIGALRM, _alarm)
    for signum in SIGNALS:
        signal.signal(signum, _raise)
    _armed = True


def disarm(hold: bool = False) -> None:
    """Stop raising: the hook is writing its summary; or it holds after a failure
    (`hold`), which a signal ends at once, where the entry point armed."""
    global _armed
    _armed = False
    if hold and signal.getsignal(signal.SIGTERM) is _raise:
        catch()
