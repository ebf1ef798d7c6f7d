"""Entry point: signal handlers first, then the CLI (imported after, so that a
SIGTERM or SIGINT during the imports already ends the hook cleanly)."""

from __future__ import annotations

import signal
import sys

from drainhook import signals
from drainhook.drain import Interrupted


def main() -> None:
    signals.arm()
    try:
        from drainhook.cli import run

        code = run(sys.argv[1:])
    except Interrupted as exc:
        signals.disarm()
        print(f"drainhook: interrupted by {signal.Signals(exc.signum).name}", file=sys.stderr)
        code = 128 + exc.signum
    except Exception as exc:  # an import that fails in a broken install: one line
        print(f"drainhook: cannot start: {type(exc).__name__}: {exc}", file=sys.stderr)
        code = 1
    sys.exit(code)


if __name__ == "__main__":
    main()
