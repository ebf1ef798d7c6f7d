"""Entry point: a signal catcher first, then the imports, then the raising
handlers and the CLI. A SIGTERM or SIGINT while the hook imports ends it at
once with one line (see drainhook.hook.signals); after that, with its summary."""

from __future__ import annotations

import contextlib
import os
import signal
import sys

from drainhook import exits
from drainhook.hook import signals

signals.catch()


def main() -> None:
    try:
        # Everything the hook will import, imported now: an import is no place
        # for a signal to land (drainhook.hook.signals says why). ssl encodes the
        # TLS server name with the idna codec.
        import encodings.idna  # noqa: F401

        import drainhook.hook.run  # noqa: F401 (the reads, the loop, the log)
        from drainhook.cli.main import run
    except Exception as exc:  # an import that fails in a broken install: one line
        # A bug of the build: the internal error's code, which no outcome uses.
        print(f"drainhook: cannot start: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(exits.INTERNAL)
    from drainhook.hook.drain import Interrupted

    try:
        signals.arm()
        code = run(sys.argv[1:])
    except Interrupted as exc:
        signals.disarm()
        print(f"drainhook: interrupted by {signal.Signals(exc.signum).name}", file=sys.stderr)
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
