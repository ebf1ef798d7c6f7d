"""SIGTERM and SIGINT end the hook (CONTRACT §5), SIGHUP is ignored: at once while it starts;
armed (its run, its fail-safe hold), by one `Interrupted`, which SIGALRM raises again if a
finalizer swallowed it."""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
from typing import Literal

from drainhook import exits, failsafe

_then: Literal["exit", "raise", "ignore"] | Interrupted = "exit"  # Interrupted: swallowed


@dataclasses.dataclass
class Interrupted(BaseException):
    """A signal; not an Exception, so that no `except Exception` swallows it."""

    signum: int


def _handle(signum: int, frame: object) -> None:
    global _then
    if signum == signal.SIGALRM and getattr(frame, "f_code", None) is _swallow.__code__:
        signal.setitimer(signal.ITIMER_REAL, 0.001)  # not yet out of the unraisable hook
    elif signum == signal.SIGALRM and isinstance(_then, Interrupted):
        raise _then  # later signals find no branch: ignored
    elif _then == "exit":
        failsafe.say(f"drainhook: interrupted by {signal.Signals(signum).name} while starting")
        os._exit(exits.interrupted(signum))
    elif _then == "raise":
        _then = "ignore"
        raise Interrupted(signum)


def _swallow(args: sys.UnraisableHookArgs) -> None:
    global _then
    if isinstance(args.exc_value, Interrupted):
        _then = args.exc_value
        signal.setitimer(signal.ITIMER_REAL, 0.001)
    else:
        sys.__unraisablehook__(args)


def catch(then: Literal["exit", "raise"] = "exit") -> None:
    """Install the handlers: a signal ends the process (`exit`) or raises once."""
    global _then
    _then = then
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM):
        signal.signal(signum, _handle)
    sys.unraisablehook = _swallow


def disarm(hold: bool = False) -> None:
    """Stop raising: the hook writes its summary; or, holding after a failure
    (`hold`), raise once more, for the hold to write its termination message."""
    global _then
    _then = "raise" if hold else "ignore"
