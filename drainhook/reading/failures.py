"""How a read fails: every failure a read can meet is one row of `ERRORS`,
keyed by the httpcore class it is raised as, and `classify` turns it into a
verdict (CONTRACT §2):

    httpcore's failures
     ├─ ConnectTimeout, ReadTimeout, WriteTimeout ......... unknown
     ├─ ConnectError, the connection refused .............. unreachable, for now
     ├─ ConnectError, else (TLS handshake, DNS) ........... unknown, misconfigured
     ├─ ReadError, WriteError (reset) ..................... unknown
     ├─ RemoteProtocolError (closed before/during reply) .. unknown
     └─ LocalProtocolError ................................ unknown
    a 5xx or 429 status ................................... unknown
    another non-2xx (3xx, 4xx) before any 2xx ............. unknown, misconfigured
    another non-2xx after the target has answered 2xx ..... unknown
    a body over the cap, or in an encoding not decoded .... unknown
      (identity is asked for; gzip and deflate sent anyway are decoded)
    anything else (a bug) ................................. unknown

A refused read stays `unreachable` only while the engine is shown gone
(drainhook.reading.gone); a wrong target is doubt that holds to D (§2).

No other httpcore exception can come out of a read (tests/test_read.py walks
every exported class and says why for each).
"""

from __future__ import annotations

import socket
import ssl
from typing import TypeGuard

import httpcore

from drainhook.engines.verdict import Verdict

# (the httpcore class a failure is raised as, its verdict, its reason)
ERRORS: tuple[tuple[type[Exception], Verdict, str], ...] = (
    (httpcore.ConnectTimeout, Verdict.UNKNOWN, "connect timed out"),
    (httpcore.ReadTimeout, Verdict.UNKNOWN, "read timed out"),
    (httpcore.WriteTimeout, Verdict.UNKNOWN, "write timed out"),
    (httpcore.ConnectError, Verdict.UNKNOWN, "cannot connect"),
    (httpcore.ReadError, Verdict.UNKNOWN, "connection broken while reading"),
    (httpcore.WriteError, Verdict.UNKNOWN, "connection broken while writing"),
    (httpcore.RemoteProtocolError, Verdict.UNKNOWN, "connection closed mid-response"),
    (httpcore.LocalProtocolError, Verdict.UNKNOWN, "request could not be sent"),
)


class NoBody(Exception):
    """A read that ended without a body to scan (a status, a cap, an encoding), always
    `unknown`: its reason, and the status of a non-2xx answer."""

    def __init__(self, reason: str, status: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


MISCONFIGURED = "misconfigured"


def is_misconfigured(reason: str | None) -> TypeGuard[str]:
    """Whether a read's reason (or one target's of several) says its target is wrong."""
    return reason is not None and f"{MISCONFIGURED}: " in reason


# The fix for a 3xx or 4xx from a target that never answered 2xx (CONTRACT §2).
_STATUS_FIX = {
    401: "the engine wants a key: --api-key-file",
    403: "the engine wants a key: --api-key-file",
    404: "no metrics at this path: check --path or --url (vLLM and SGLang serve /metrics; "
    "SGLang only with --enable-metrics)",
}


def status_reason(status: int, answered: bool) -> str:
    """A non-2xx status's reason (always `unknown`, CONTRACT §2): a 3xx or 4xx from a
    target that has never answered 2xx (`answered`) is a wrong target, said with its fix."""
    if status >= 500 or status == 429 or answered:
        return f"HTTP {status}"
    fix = _STATUS_FIX.get(status, "not the engine's metrics: check --url, --port and --path")
    return f"{MISCONFIGURED}: HTTP {status}: {fix}"


def classify(exc: Exception) -> tuple[Verdict, str]:
    """The verdict and a one-line reason for an exception raised by a read: a refused
    connection is `unreachable` (for now: drainhook.reading.gone decides), any other
    failure to connect a wrong target (a TLS handshake, a name), named with its fix."""
    if is_refused(exc):
        return Verdict.UNREACHABLE, "connection refused"
    for kind, verdict, reason in ERRORS:
        if isinstance(exc, kind):
            detail = _root_cause(exc)
            said = f"{reason}: {detail}" if detail else reason
            if kind is httpcore.ConnectError:
                return verdict, f"{MISCONFIGURED}: {said}: {_connect_fix(_innermost(exc))}"
            return verdict, said
    return Verdict.UNKNOWN, f"unexpected {type(exc).__name__}"


def _connect_fix(cause: BaseException) -> str:
    if isinstance(cause, ssl.SSLError):
        return "check --scheme (the listener may speak http) and --cacert"
    if isinstance(cause, socket.gaierror):
        return "check --host or --url"
    return "check --url, --host and --port"


def is_refused(exc: BaseException) -> bool:
    """Whether a read's failure is a refused connection: nothing listens there
    (CONTRACT §2: the one failure that may end the hook, once the engine is shown gone)."""
    return isinstance(exc, httpcore.ConnectError) and isinstance(
        _innermost(exc), ConnectionRefusedError
    )


def _innermost(exc: BaseException) -> BaseException:
    """The end of an exception's chain of causes."""
    seen: BaseException = exc
    walked = {id(seen)}
    while (nxt := seen.__cause__ or seen.__context__) is not None and id(nxt) not in walked:
        walked.add(id(nxt))  # a chain can loop (a re-raised exception): stop there
        seen = nxt
    return seen


def _root_cause(exc: BaseException) -> str:
    """The innermost OS-level cause, in words (refused, TLS alert, lookup failure)."""
    seen = _innermost(exc)
    if isinstance(seen, ConnectionRefusedError):
        return "connection refused"
    if isinstance(seen, socket.gaierror):
        return f"name resolution failed ({seen.strerror})"
    # An SSLError made in Python (not by the ssl module's C code) lacks these.
    if isinstance(seen, ssl.SSLCertVerificationError):
        return f"TLS verification failed ({getattr(seen, 'verify_message', None) or seen})"
    if isinstance(seen, ssl.SSLError):
        return f"TLS handshake failed ({getattr(seen, 'reason', None) or seen.strerror or seen})"
    if isinstance(seen, ConnectionResetError):
        return "connection reset"
    if isinstance(seen, OSError) and seen.strerror:
        return seen.strerror.lower()
    text = str(seen).splitlines()[0] if str(seen) else ""
    return text[:200]
