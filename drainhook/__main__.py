"""Entry point: a signal catcher, the imports, then the raising handlers and the CLI
(drainhook.hook.signals). Under `wait`, an install that cannot import its own
modules and a usage error hold like a blind sleep until D (drainhook.failsafe)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys

from drainhook import exits, failsafe
from drainhook.hook import signals
from drainhook.hook.clock import start_time
from drainhook.hook.signals import Interrupted

signals.catch()


def main() -> None:
    argv = sys.argv[1:]
    try:
        # What every run imports, now: no place for a signal (hook.signals says why);
        # what a run may add later is pure Python (a swallowed signal is sent again).
        # ssl encodes the TLS server name with the idna codec.
        import encodings.idna  # noqa: F401

        import drainhook.hook.run  # noqa: F401 (the reads, the loop, the log)
        from drainhook.cli.main import run
    except Exception as exc:  # an import that fails in a broken install: one line
        # A bug of the build: the internal error's code, which no outcome uses.
        line = f"drainhook: cannot start: {failsafe.describe(exc)}"
        if failsafe.is_wait(argv):
            signals.catch("raise")
            try:
                failsafe.hold_plain(line, argv, start_time())
            except Interrupted as interrupted:
                _exit(exits.interrupted(interrupted.signum))
        else:
            failsafe.say(line)
        _exit(exits.INTERNAL)

    def hold(line: str) -> None:
        """`wait`'s usage error, or a bug before its config was built: held (a signal
        ends it with the termination message, and `Interrupted` goes on)."""
        signals.catch("raise")
        failsafe.hold_plain(line, argv, start_time())

    try:
        signals.catch("raise")
        code = run(argv, hold=hold if failsafe.is_wait(argv) else None)
    except Interrupted as exc:
        signals.disarm()
        failsafe.say(f"drainhook: interrupted by {signal.Signals(exc.signum).name}")
        code = exits.interrupted(exc.signum)
    _exit(code)


def _exit(code: int) -> None:
    """Flush and leave at once: the kubelet sends SIGTERM when the hook's process
    ends, and an interpreter's shutdown (finalizers, module teardown) costs
    20-70 ms on a busy node for nothing. Files are closed; nothing is lost."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
