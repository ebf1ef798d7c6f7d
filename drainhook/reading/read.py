"""One read: a GET of the metrics URL, turned into exactly one verdict (CONTRACT §2).

Error map: every failure a read can meet is one row of `_ERRORS`, keyed by
the httpcore class it is raised as; `classify` turns it into a verdict:

    httpcore's failures
     ├─ ConnectTimeout, ReadTimeout, WriteTimeout ......... unknown
     ├─ ConnectError (refused, TLS handshake, DNS) ........ unreachable
     ├─ ReadError, WriteError (reset) ..................... unknown
     ├─ RemoteProtocolError (closed before/during reply) .. unknown
     └─ LocalProtocolError ................................ unknown
    a 5xx or 429 status ................................... unknown
    another non-2xx (3xx, 4xx) before any 2xx ............. unreachable
    another non-2xx after the target has answered 2xx ..... unknown
    anything else (a bug) ................................. unknown

httpcore's other exceptions cannot come out of this read: one read at a time
never waits for a pool slot, no proxy is used, the URL is always http or
https with a host, and a connection the pool cannot use is retried inside it.
tests/test_read.py walks every exported class and holds that list. A URL
whose host has no ASCII form is refused before any read (drainhook.reading.target).

A read's timeout bounds the whole read, not each socket call: the network
backend below clips every connect, write, TLS handshake and socket read to
the time left before the read's own deadline, so a server that drips its
body (or its headers) a byte at a time cannot hold the hook.

Built on httpcore's public extension points only: an `httpcore.ConnectionPool`
whose `httpcore.NetworkBackend` does the clipping; no redirect is followed,
no proxy or .netrc is consulted, and the body is read raw (and inflated here).
"""

from __future__ import annotations

import ipaddress
import mmap
import socket
import ssl
import sys
import threading
import time
import typing
import zlib
from collections.abc import Callable, Iterable

import httpcore

from drainhook.engines.exposition import MetricsScanner
from drainhook.engines.verdict import Body, Reading, Scanner, Verdict
from drainhook.reading.config import DEFAULT_MAX_BODY
from drainhook.reading.target import Target

T = typing.TypeVar("T")

USER_AGENT = "drainhook"
RAN_OUT = "the read's time ran out"

# (the httpcore class a failure is raised as, its verdict, its reason)
_ERRORS: tuple[tuple[type[Exception], Verdict, str], ...] = (
    (httpcore.ConnectTimeout, Verdict.UNKNOWN, "connect timed out"),
    (httpcore.ReadTimeout, Verdict.UNKNOWN, "read timed out"),
    (httpcore.WriteTimeout, Verdict.UNKNOWN, "write timed out"),
    (httpcore.ConnectError, Verdict.UNREACHABLE, "cannot connect"),
    (httpcore.ReadError, Verdict.UNKNOWN, "connection broken while reading"),
    (httpcore.WriteError, Verdict.UNKNOWN, "connection broken while writing"),
    (httpcore.RemoteProtocolError, Verdict.UNKNOWN, "connection closed mid-response"),
    (httpcore.LocalProtocolError, Verdict.UNKNOWN, "request could not be sent"),
)


class _Failed(Exception):
    """A read that ended without a body to scan (a status, a cap, an encoding)."""

    def __init__(self, verdict: Verdict, reason: str, status: int | None = None) -> None:
        super().__init__(reason)
        self.verdict = verdict
        self.reason = reason
        self.status = status


def status_verdict(status: int, answered: bool) -> Verdict:
    """The verdict of a non-2xx status (CONTRACT §2): a 5xx or a 429 says the
    server is there and troubled, `unknown` (the hook holds); any other (a 3xx, a
    4xx) is a misconfiguration, `unreachable`, only while the target has never
    answered 2xx (`answered`), and `unknown` after: a path that answered a
    moment ago is not a wrong path."""
    if status >= 500 or status == 429 or answered:
        return Verdict.UNKNOWN
    return Verdict.UNREACHABLE


def classify(exc: Exception) -> tuple[Verdict, str]:
    """The verdict and a one-line reason for an exception raised by a read."""
    for kind, verdict, reason in _ERRORS:
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


class _Deadline:
    """When the current read must end by, on the reader's clock."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.at = 0.0

    def start(self, timeout: float) -> None:
        self.at = self.clock() + timeout

    def left(self) -> float:
        return self.at - self.clock()

    def clip(self, timeout: float | None, expired: type[Exception]) -> float:
        left = self.left()
        if left <= 0:
            raise expired(RAN_OUT)
        return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    """A socket stream whose every call is clipped to the read's deadline."""

    def __init__(self, inner: httpcore.NetworkStream, deadline: _Deadline) -> None:
        self._inner = inner
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            return self._inner.read(max_bytes, self._deadline.clip(timeout, httpcore.ReadTimeout))
        except httpcore.ReadTimeout:
            if self._deadline.left() > 0:
                raise  # the socket's own timeout, before the read's deadline
        # A wait clipped to the deadline that ran to it: said as a call that
        # starts past the deadline is, not as the socket's bare "timed out".
        raise httpcore.ReadTimeout(RAN_OUT)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._deadline.clip(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        clipped = self._deadline.clip(timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, clipped), self._deadline)

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    """httpcore's sync backend with deadline clipping and a bounded name lookup."""

    def __init__(self, deadline: _Deadline) -> None:
        self._inner = httpcore.SyncBackend()
        self._deadline = deadline

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[typing.Any] | None = None,
    ) -> httpcore.NetworkStream:
        address = _resolve(host, port, self._deadline.clip(timeout, httpcore.ConnectTimeout))
        clipped = self._deadline.clip(timeout, httpcore.ConnectTimeout)
        stream = self._inner.connect_tcp(address, port, clipped, local_address, socket_options)
        return _Stream(stream, self._deadline)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[typing.Any] | None = None,
    ) -> httpcore.NetworkStream:  # pragma: no cover - never configured
        raise httpcore.ConnectError("unix sockets are not supported")

    def sleep(self, seconds: float) -> None:  # pragma: no cover - retries are off
        time.sleep(seconds)


def _resolve(host: str, port: int, timeout: float) -> str:
    """An address for host: literals as they are, names looked up within timeout.

    getaddrinfo has no timeout of its own, so the lookup runs in a daemon
    thread that is abandoned when the read's time runs out. Not a
    ThreadPoolExecutor: its workers are joined at interpreter exit, so a hung
    lookup would hold the hook's exit past the deadline.
    """
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    found: list[typing.Any] = []
    done = threading.Event()

    def lookup() -> None:
        try:
            found.append(socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM))
        except Exception as exc:  # gaierror, or UnicodeError for a malformed name
            found.append(exc)
        finally:
            done.set()

    threading.Thread(target=lookup, name="drainhook-lookup", daemon=True).start()
    if not done.wait(timeout):
        raise httpcore.ConnectTimeout(f"looking up {host} timed out")
    result = found[0]
    if isinstance(result, Exception):
        error = httpcore.ConnectError(str(result))
        # httpcore's pool re-raises `from None`, dropping __cause__: the reason
        # (name resolution failed) is found through __context__.
        error.__context__ = result
        raise error from result
    return str(result[0][4][0])


# A body is gathered in an anonymous memory map grown in place (mremap), not
# in a bytearray: once glibc's malloc has freed one large block its mmap
# threshold rises, the next body then grows on the heap by copying, and a
# 16 MiB body cost up to 32 MiB for a moment on every read after the first.
# Where mremap is missing (it is Linux's) a map cannot grow: a bytearray then.
_GROW_IN_PLACE = sys.platform.startswith("linux")
_FIRST_MAP = 256 * 1024
_INFLATE_STEP = 256 * 1024


class _Body:
    """A body as it arrives, held once."""

    def __init__(self) -> None:
        self.size = 0
        self._buf: mmap.mmap | bytearray = (
            # Private: a shared anonymous map is a file that mremap does not grow.
            mmap.mmap(-1, _FIRST_MAP, flags=mmap.MAP_PRIVATE) if _GROW_IN_PLACE else bytearray()
        )

    def add(self, chunk: bytes) -> None:
        end = self.size + len(chunk)
        if isinstance(self._buf, mmap.mmap):
            if end > len(self._buf):
                self._buf.resize(max(end, 2 * len(self._buf)))
            self._buf[self.size : end] = chunk
        else:
            self._buf += chunk
        self.size = end

    def contents(self) -> mmap.mmap | bytearray:
        """The bytes received, exactly (the map is trimmed to them)."""
        if isinstance(self._buf, mmap.mmap):
            if self.size == 0:  # a map cannot be empty
                self.close()
                self._buf = bytearray()
            elif len(self._buf) != self.size:
                self._buf.resize(self.size)
        return self._buf

    def close(self) -> None:
        if isinstance(self._buf, mmap.mmap):
            self._buf.close()


class Reader:
    """Reads one target: `read(timeout)` returns one Reading and never raises
    (but for an exception raised by a signal handler, which passes through).

    `scanner` turns a 2xx body into its verdict and names the Accept header
    (drainhook.engines.exposition.MetricsScanner by default; LoadsScanner for /v1/loads).
    `clock` times the read, bounds it and ends the scan: one clock for all three.
    """

    def __init__(
        self,
        target: Target,
        *,
        scanner: Scanner | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        ssl_context: ssl.SSLContext | None = None,
        tls_server_name: str | None = None,
        api_key: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.target = target
        self._scanner: Scanner = scanner or MetricsScanner()
        self._max_body = max_body
        self._clock = clock
        self._deadline = _Deadline(clock)
        self._answered = False  # a 2xx seen: a 3xx or 4xx is then doubt (status_verdict)
        headers = [
            ("Host", target.host_header),
            ("Accept", self._scanner.accept),
            ("Accept-Encoding", "identity"),
            ("User-Agent", USER_AGENT),
        ]
        # Userinfo in the URL is basic auth; it wins over --api-key-file, being
        # the credentials given for this one URL.
        authorization = target.basic_auth or (api_key and f"Bearer {api_key}")
        if authorization:
            headers.append(("Authorization", authorization))
        self._headers = [(k.encode("ascii"), v.encode("latin-1")) for k, v in headers]
        self._url = httpcore.URL(
            scheme=target.scheme.encode("ascii"),
            host=target.connect_host.encode("ascii"),
            port=target.port,
            target=target.request_target,
        )
        # No timeout is handed to httpcore: the backend clips every call to the
        # read's own deadline, which no per-call timeout could come before.
        self._extensions: dict[str, typing.Any] = {}
        if target.scheme == "https":
            # The name sent as SNI and verified: `localhost` stays `localhost`
            # although 127.0.0.1 is what is connected to.
            self._extensions["sni_hostname"] = tls_server_name or target.sent_host
        # No SSL context is made here: an https target always brings its own
        # (target.ssl_context), so neither the system store nor SSL_CERT_FILE is read.
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context,
            max_keepalive_connections=0,  # a fresh connection per read
            retries=0,
            network_backend=_Backend(self._deadline),
        )

    @property
    def name(self) -> str:
        """The target as shown: its URL without userinfo."""
        return self.target.display

    @property
    def source(self) -> str:
        """What this reader counts: `metrics` or `loads` (its scanner's)."""
        return self._scanner.source

    def close(self) -> None:
        self._pool.close()

    def read(self, timeout: float) -> Reading:
        """One read, ending within `timeout` seconds, whatever the server does."""

        def scan(body: Body, until: float) -> Reading:
            # The scan is part of the read: it ends by the read's deadline too.
            try:
                found = self._scanner(body, until=until, clock=self._clock)
            except Exception as exc:  # a scanner's bug: the read is unknown, as any
                verdict, reason = classify(exc)
                return Reading.failed(verdict, reason, self._ms_since(start), source=self.source)
            return Reading.from_scan(found, self._ms_since(start), self.source)

        start = self._clock()
        return self._get(timeout, scan, start)

    def read_with(self, timeout: float, parse: Callable[[Body, float], T]) -> T | Reading:
        """One GET like `read`, within `timeout`, whose body goes to `parse(body,
        until)` instead of the scanner (`until`: the read's deadline on the reader's
        clock); a read that fails is the failed Reading `read` would give. The body
        is valid only inside `parse`; what `parse` raises passes through."""
        return self._get(timeout, parse, self._clock())

    def _get(self, timeout: float, parse: Callable[[Body, float], T], start: float) -> T | Reading:
        """The one GET under `read` and `read_with`, and the one place a failure
        becomes its verdict: a body to `parse`, or the failed Reading of why not."""
        self._deadline.start(timeout)
        body = _Body()
        try:
            try:
                self._fetch(body)
            except _Failed as exc:
                return Reading.failed(
                    exc.verdict, exc.reason, self._ms_since(start), source=self.source,
                    status=exc.status,
                )  # fmt: skip
            except Exception as exc:
                verdict, reason = classify(exc)
                return Reading.failed(
                    verdict, reason, self._ms_since(start), source=self.source,
                    refused=is_refused(exc),
                )  # fmt: skip
            return parse(body.contents(), self._deadline.at)
        finally:
            body.close()

    def _ms_since(self, start: float) -> float:
        return (self._clock() - start) * 1000.0

    def _fetch(self, body: _Body) -> None:
        """Read the body into `body`, or raise why there is none to scan."""
        with self._pool.stream(
            b"GET", self._url, headers=self._headers, extensions=self._extensions
        ) as response:
            status = response.status
            if not 200 <= status < 300:
                raise _Failed(status_verdict(status, self._answered), f"HTTP {status}", status)
            self._answered = True
            self._body(response, body)

    def _body(self, response: httpcore.Response, body: _Body) -> None:
        """Gather the body, decoded; _Failed when it is over the cap or undecodable.

        identity was asked for; a server that compresses anyway is decoded
        here, a chunk at a time, so that a small gzip bomb stops at the cap.
        """
        cap = self._max_body
        encoding = _header(response, b"content-encoding").strip().lower() or "identity"
        inflate: zlib._Decompress | None = None
        if encoding in ("gzip", "x-gzip"):
            inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            inflate = zlib.decompressobj()
        elif encoding not in ("", "identity"):
            raise _Failed(Verdict.UNKNOWN, f"unsupported content-encoding {encoding[:40]!r}")
        over = _Failed(Verdict.UNKNOWN, f"body over --max-body ({cap} bytes)")
        for raw in response.iter_stream():
            if inflate is None:
                if body.size + len(raw) > cap:
                    raise over
                body.add(raw)
                continue
            # A step at a time, never past the cap + 1: 64 KiB of gzip can stand
            # for gigabytes, and one call inflating to the cap would hold a
            # second body's worth.
            while raw:
                try:
                    chunk = inflate.decompress(raw, min(_INFLATE_STEP, cap - body.size + 1))
                except zlib.error as exc:
                    raise _Failed(Verdict.UNKNOWN, f"undecodable {encoding} body: {exc}") from None
                raw = inflate.unconsumed_tail
                if body.size + len(chunk) > cap:
                    raise over
                body.add(chunk)
        if inflate is not None:
            rest = inflate.flush()
            if body.size + len(rest) > cap:
                raise over
            body.add(rest)


def _header(response: httpcore.Response, name: bytes) -> str:
    """A response header's values joined by commas, as one; "" when absent."""
    values = [v for k, v in response.headers if k.lower() == name]
    return b", ".join(values).decode("latin-1")
