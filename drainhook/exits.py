"""Every exit code drainhook gives, CONTRACT §5 row for row, keyed by the word the log
and JSON show. Imports nothing: the signal catcher that runs first uses it too."""

from __future__ import annotations

# `wait`: the outcome's exit code.
WAIT = {
    "drained": 0,  # idle confirmed
    "deadline": 3,  # D reached without confirmation
    "unreachable": 4,
    "stalled": 5,  # work reported, no progress for --stall-after seconds (§2b)
    "misconfigured": 6,  # held to D on a wrong target (§2): fix the flags, not G
}
# `probe`: the verdict's exit code.
PROBE = {"idle": 0, "busy": 1, "unknown": 3, "unreachable": 4}

INSTALL_FAILED = 1  # `install` could not copy the build
INJECT_REFUSED = 1  # `inject`: a document was refused (written unchanged, said on stderr)
USAGE = 2  # flags, environment, annotations, files they name; in every command
# `plan --observe`: no histogram is a usage error (USAGE); these two are its own.
OBSERVE_UNREADABLE = 3  # the body could not be read, or its histogram cannot be right
OBSERVE_UNREACHABLE = 4  # the target refused, or answered a 3xx or 4xx (as probe's 4)
OUTPUT_FAILED = 74  # `plan`, `inject`: stdout could not be written (EX_IOERR, sysexits.h)
INTERNAL = 70  # a bug (EX_SOFTWARE, sysexits.h): a code no outcome uses; probe's busy is 1
EXIT_ZERO = 0  # `wait --exit-zero`: every outcome


def interrupted(signum: int) -> int:
    """A SIGTERM or SIGINT to the hook: 128 + the signal's number (143, 130)."""
    return 128 + signum
