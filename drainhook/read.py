"""One read: a GET of the metrics URL, turned into exactly one verdict (CONTRACT §2).

Error map (every transport failure lands in one row of `_ERRORS`):

    httpx.HTTPError
     ├─ TimeoutException (connect/read/write/pool) ........ unknown
     ├─ ConnectError (refused, TLS handshake, DNS) ........ unreachable
     ├─ ReadError, WriteError, CloseError (reset) ......... unknown
     ├─ RemoteProtocolError (closed before/during reply) .. unknown
     ├─ LocalProtocolError, DecodingError ................. unknown
     ├─ ProxyError, UnsupportedProtocol, TooManyRedirects . unreachable
     └─ HTTPStatusError (non-2xx, 3xx included) ........... unreachable
    httpx.StreamError (each of its four), CookieConflict .. unknown
    httpx.InvalidURL ...................................... unreachable

A read's timeout bounds the whole read, not each socket call: the network
backend below clips every connect, write, TLS handshake and socket read to
the time left before the read's own deadline, so a server that drips its
body (or its headers) a byte at a time cannot hold the hook.
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
from typing import TypeVar

import httpcore
import httpx

from drainhook.exposition import scan
from drainhook.loads import scan_loads
from drainhook.target import Target
from drainhook.verdict import Reading, Verdict

T = TypeVar("T")
Body = mmap.mmap | bytearray

ACCEPT = "text/plain;version=0.0.4"
USER_AGENT = "drainhook"

_ERRORS: tuple[tuple[type[Exception], Verdict, str], ...] = (
    (httpx.ConnectTimeout, Verdict.UNKNOWN, "connect timed out"),
    (httpx.ReadTimeout, Verdict.UNKNOWN, "read timed out"),
    (httpx.WriteTimeout, Verdict.UNKNOWN, "write timed out"),
    (httpx.PoolTimeout, Verdict.UNKNOWN, "timed out waiting for a connection"),
    (httpx.ConnectError, Verdict.UNREACHABLE, "cannot connect"),
    (httpx.ReadError, Verdict.UNKNOWN, "connection broken while reading"),
    (httpx.WriteError, Verdict.UNKNOWN, "connection broken while writing"),
    (httpx.CloseError, Verdict.UNKNOWN, "connection broken while closing"),
    (httpx.RemoteProtocolError, Verdict.UNKNOWN, "connection closed mid-response"),
    (httpx.LocalProtocolError, Verdict.UNKNOWN, "request could not be sent"),
    (httpx.ProxyError, Verdict.UNREACHABLE, "proxy error"),
    (httpx.UnsupportedProtocol, Verdict.UNREACHABLE, "unsupported URL scheme"),
    (httpx.DecodingError, Verdict.UNKNOWN, "undecodable body"),
    (httpx.TooManyRedirects, Verdict.UNREACHABLE, "redirected"),
    (httpx.HTTPStatusError, Verdict.UNREACHABLE, "non-2xx status"),
    # A stream misused by the reader itself: a bug here, not the server's doing.
    (httpx.StreamConsumed, Verdict.UNKNOWN, "body already consumed"),
    (httpx.StreamClosed, Verdict.UNKNOWN, "body stream closed"),
    (httpx.ResponseNotRead, Verdict.UNKNOWN, "response not read"),
    (httpx.RequestNotRead, Verdict.UNKNOWN, "request not read"),
    (httpx.InvalidURL, Verdict.UNREACHABLE, "invalid URL"),
    (httpx.CookieConflict, Verdict.UNKNOWN, "cookie conflict"),
)


def classify(exc: Exception) -> tuple[Verdict, str]:
    """The verdict and a one-line reason for an exception raised by a read."""
    for kind, verdict, reason in _ERRORS:
        if isinstance(exc, kind):
            detail = _root_cause(exc)
            return verdict, f"{reason}: {detail}" if detail else reason
    return Verdict.UNKNOWN, f"unexpected {type(exc).__name__}"


def _root_cause(exc: BaseException) -> str:
    """The innermost OS-level cause, in words (refused, TLS alert, lookup failure)."""
    seen: BaseException = exc
    walked = {id(seen)}
    while (nxt := seen.__cause__ or seen.__context__) is not None and id(nxt) not in walked:
        walked.add(id(nxt))  # a chain can loop (a re-raised exception): stop there
        seen = nxt
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
    """The absolute monotonic time the current read must end by."""

    def __init__(self) -> None:
        self.at = 0.0

    def clip(self, timeout: float | None, expired: type[Exception]) -> float:
        left = self.at - time.monotonic()
        if left <= 0:
            raise expired("the read's time ran out")
        return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    """A socket stream whose every call is clipped to the read's deadline."""

    def __init__(self, inner: httpcore.NetworkStream, deadline: _Deadline) -> None:
        self._inner = inner
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._deadline.clip(timeout, httpcore.ReadTimeout))

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


class _Transport(httpx.HTTPTransport):
    """httpx's transport over the deadline backend; one connection per read."""

    def __init__(self, ssl_context: ssl.SSLContext | None, deadline: _Deadline) -> None:
        # Not calling super().__init__: it would build a default SSL context
        # (reading the system store and SSL_CERT_FILE) that is never used.
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context,
            max_keepalive_connections=0,  # a fresh connection per read
            retries=0,
            network_backend=_Backend(deadline),
        )


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
    (but for an exception raised by a signal handler, which passes through)."""

    def __init__(
        self,
        target: Target,
        *,
        engine: str = "auto",
        max_body: int = 16 * 1024 * 1024,
        ssl_context: ssl.SSLContext | None = None,
        tls_server_name: str | None = None,
        source: str = "metrics",
        api_key: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.target = target
        self._engine = engine
        self._max_body = max_body
        self._source = source
        self._clock = clock
        self._deadline = _Deadline()
        host_header = target.host if ":" not in target.host else f"[{target.host}]"
        self._headers = {
            "Accept": ACCEPT if source == "metrics" else "application/json",
            "Accept-Encoding": "identity",
            "User-Agent": USER_AGENT,
            "Host": f"{host_header}:{target.port}",
        }
        if api_key is not None:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._extensions: dict[str, typing.Any] = {}
        if target.scheme == "https":
            # The name sent as SNI and verified: `localhost` stays `localhost`
            # although 127.0.0.1 is what is connected to.
            self._extensions["sni_hostname"] = tls_server_name or target.host
        self._client = httpx.Client(
            transport=_Transport(ssl_context, self._deadline),
            follow_redirects=False,
            trust_env=False,  # no proxy, no .netrc: a loopback read goes straight there
        )

    @property
    def name(self) -> str:
        """The target as shown: its URL without userinfo."""
        return self.target.display

    def close(self) -> None:
        self._client.close()

    def read(self, timeout: float) -> Reading:
        """One read, ending within `timeout` seconds, whatever the server does."""
        start = self._clock()
        self._deadline.at = time.monotonic() + timeout
        body = _Body()
        try:
            failed = self._fetch(timeout, body)
            if failed is None:
                # The scan is part of the read: it ends by the read's deadline too.
                if self._source == "loads":
                    found = scan_loads(
                        body.contents(), until=self._deadline.at, clock=time.monotonic
                    )
                else:
                    found = scan(
                        body.contents(),
                        self._engine,
                        until=self._deadline.at,
                        clock=time.monotonic,
                    )
                return Reading.from_scan(found, self._ms_since(start))
        except Exception as exc:
            failed = classify(exc)
        finally:
            body.close()
        verdict, reason = failed
        return Reading.failed(verdict, reason, self._ms_since(start))

    def read_with(self, timeout: float, parse: Callable[[Body, float], T]) -> T | Reading:
        """One GET like `read`, within `timeout`, whose body goes to `parse(body,
        until)` instead of the verdict scanner (`until`: the read's deadline on the
        monotonic clock); a read that fails is a failed Reading, as from `read`.
        The body is valid only inside `parse`; what `parse` raises passes through."""
        start = self._clock()
        self._deadline.at = time.monotonic() + timeout
        body = _Body()
        try:
            try:
                failed = self._fetch(timeout, body)
            except Exception as exc:
                failed = classify(exc)
            if failed is None:
                return parse(body.contents(), self._deadline.at)
        finally:
            body.close()
        verdict, reason = failed
        return Reading.failed(verdict, reason, self._ms_since(start))

    def _ms_since(self, start: float) -> float:
        return (self._clock() - start) * 1000.0

    def _fetch(self, timeout: float, body: _Body) -> tuple[Verdict, str] | None:
        """Read the body into `body`; None, or the verdict of a read that failed."""
        with self._client.stream(
            "GET",
            self.target.request_url,
            headers=self._headers,
            timeout=httpx.Timeout(timeout),
            extensions=self._extensions,
        ) as response:
            if not 200 <= response.status_code < 300:
                return Verdict.UNREACHABLE, f"HTTP {response.status_code}"
            return self._body(response, body)

    def _body(self, response: httpx.Response, body: _Body) -> tuple[Verdict, str] | None:
        """Gather the body, decoded; None, or the verdict when it is over the cap or
        undecodable.

        identity was asked for; a server that compresses anyway is decoded
        here, a chunk at a time, so that a small gzip bomb stops at the cap.
        """
        cap = self._max_body
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        inflate: zlib._Decompress | None = None
        if encoding in ("gzip", "x-gzip"):
            inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            inflate = zlib.decompressobj()
        elif encoding not in ("", "identity"):
            return Verdict.UNKNOWN, f"unsupported content-encoding {encoding[:40]!r}"
        over = Verdict.UNKNOWN, f"body over --max-body ({cap} bytes)"
        for raw in response.iter_raw():
            if inflate is None:
                if body.size + len(raw) > cap:
                    return over
                body.add(raw)
                continue
            # A step at a time, never past the cap + 1: 64 KiB of gzip can stand
            # for gigabytes, and one call inflating to the cap would hold a
            # second body's worth.
            while raw:
                try:
                    chunk = inflate.decompress(raw, min(_INFLATE_STEP, cap - body.size + 1))
                except zlib.error as exc:
                    return Verdict.UNKNOWN, f"undecodable {encoding} body: {exc}"
                raw = inflate.unconsumed_tail
                if body.size + len(chunk) > cap:
                    return over
                body.add(chunk)
        if inflate is not None:
            rest = inflate.flush()
            if body.size + len(rest) > cap:
                return over
            body.add(rest)
        return None
