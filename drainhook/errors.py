"""drainhook's errors: one family, each kind knowing its exit code (CONTRACT §5;
the codes themselves are drainhook.exits').

    DrainhookError ...... 70  a bug (EX_SOFTWARE): a code no outcome uses
     ├─ UsageError ....... 2  flags, environment, annotations, --cacert, --api-key-file
     ├─ InstallError ..... 1  `install` could not copy the build
     ├─ OutputError ..... 74  `plan` or `inject` could not write its output
     ├─ ObserveError ..... 3  `plan --observe`: the body could not be read, or its
     │   │                     latency histogram cannot be right
     │   ├─ NoHistogram .. 2  no latency histogram (or both engines'): usage-level
     │   └─ Unreachable .. 4  the target refused, or answered a 3xx or 4xx
     ├─ Malformed ........ -  a body a scanner cannot count: the verdict unknown
     └─ Refused .......... 1  `inject`: a document written unchanged, with why

Each message is one line, said as `drainhook: <message>`. What a read meets (a
refused connection, a body over the cap) is a verdict, never one of these.
"""

from __future__ import annotations

from drainhook import exits


class DrainhookError(Exception):
    """The base: anything drainhook raises on purpose. One that reaches the
    command line without a kind of its own is a bug."""

    exit_code = exits.INTERNAL


class UsageError(DrainhookError):
    """A configuration that cannot run: a flag, a variable, a file it names."""

    exit_code = exits.USAGE


class InstallError(DrainhookError):
    """`install` could not put the build in place (a full disk, a read-only folder)."""

    exit_code = exits.INSTALL_FAILED


class OutputError(DrainhookError):
    """`plan` or `inject` could not write its output (a full disk, a closed pipe)."""

    exit_code = exits.OUTPUT_FAILED


class ObserveError(DrainhookError):
    """`plan --observe` has no evidence to plan from: a read that failed, a histogram
    that cannot be right (a count that goes down, NaN, a `_count` other than +Inf)."""

    exit_code = exits.OBSERVE_UNREADABLE


class NoHistogram(ObserveError):
    """The body has no latency histogram, or both engines': a usage-level error."""

    exit_code = exits.USAGE


class Unreachable(ObserveError):
    """A target refused the connection or answered a 3xx or 4xx (as `probe`'s exit 4)."""

    exit_code = exits.OBSERVE_UNREACHABLE


class Malformed(DrainhookError):
    """Input a scanner cannot count (a bad sample line, a rank entry that is not
    an object); the message is the reason the read shows."""
