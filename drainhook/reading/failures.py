"""How a read fails: every failure a read can meet is one row of `ERRORS`,
keyed by the httpcore class it is raised as, and `classify` turns it into a
verdict (CONTRACT §2):

    httpcore's failures
     ├─ ConnectTimeout, ReadTimeout, WriteTimeout ......... unknown
     ├─ ConnectError (refused, TLS handshake, DNS) ........ unreachable
     ├─ ReadError, WriteError (reset) ..................... unknown
     ├─ RemoteProtocolError (closed before/during reply) .. unknown
     └─ LocalProtocolError ................................ unknown
    a 5xx or 429 status ................................... unknown
    another non-2xx (3xx, 4xx) before any 2xx ............. unreachable
    another non-2xx after the target has answered 2xx ..... unknown
    a body over the cap, or in an encoding not decoded .... unknown
      (identity is asked for; gzip and deflate sent anyway are decoded)
    anything else (a bug) ................................. unknown

No other httpcore exception can come out of a read (tests/test_read.py walks
every exported class and says why for each).
"""

from __future__ import annotations

import socket
import ssl

import httpcore

from drainhook.engines.verdict import Verdict

# (the httpcore class a failure is raised as, its verdict, its reason)
ERRORS: tuple[tuple[type[Exception], Verdict, str], ...] = (
    (httpcore.ConnectTimeout, Verdict.UNKNOWN, "connect timed out"),
    (httpcore.ReadTimeout, Verdict.UNKNOWN, "read timed out"),
    (httpcore.WriteTimeout, Verdict.UNKNOWN, "write timed out"),
    (httpcore.ConnectError, Verdict.UNREACHABLE, "cannot connect"),
    (httpcore.ReadError, Verdict.UNKNOWN, "connection broken while reading"),
    (httpcore.WriteError, Verdict.UNKNOWN, "connection broken while writing"),
    (httpcore.RemoteProtocolError, Verdict.UNKNOWN, "connection closed mid-response"),
    (httpcore.LocalProtocolError, Verdict.UNKNOWN, "request could not be sent"),
)


class NoBody(Exception):
    """A read that ended without a body to scan (a status, a cap, an encoding):
    its verdict, its reason, and the status of a non-2xx answer."""

    def __init__(self, verdict: Verdict, reason: str, status: int | None = None) -> None:
        super().__init__(reason)
        self.verdict = verdict
        self.reason = reason
        self.status = status


def status_verdict(status: int, answered: bool) -> Verdict:
    """A non-2xx status's verdict (CONTRACT §2): a 5xx or 429 is a troubled server,
    `unknown`; a 3xx or 4xx is `unreachable` (a misconfiguration) only while the target
    has never answered 2xx (`answered`), `unknown` after."""
    if status >= 500 or status == 429 or answered:
        return Verdict.UNKNOWN
    return Verdict.UNREACHABLE


def classify(exc: Exception) -> tuple[Verdict, str]:
    """The verdict and a one-line reason for an exception raised by a read."""
    for kind, verdict, reason in ERRORS:
        if isinstance(exc, kind):
            detail = _root_cause(exc)
            return verdict, f"{reason}: {detail}" if detail else reason
    return Verdict.UNKNOWN, f"unexpected {type(exc).__name__}"


def is_refused(exc: BaseException) -> bool:
    """Whether a read's failure is a refused connection: nothing listens there
    (CONTRACT §2a: the one failure that sends the hook looking for the engine)."""
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
