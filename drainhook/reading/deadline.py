"""A read's deadline, held below httpcore: the network backend clips every
connect, write, TLS handshake and socket read to the time left before the
read's own deadline, so a server that drips its body (or its headers) a byte
at a time cannot hold the hook, and a name lookup is bounded too. Built on
httpcore's public extension point, `httpcore.NetworkBackend`."""

from __future__ import annotations

import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable

import httpcore

RAN_OUT = "the read's time ran out"


class Deadline:
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


class ClippedStream(httpcore.NetworkStream):
    """A socket stream whose every call is clipped to the read's deadline."""

    def __init__(self, inner: httpcore.NetworkStream, deadline: Deadline) -> None:
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
        return ClippedStream(
            self._inner.start_tls(ssl_context, server_hostname, clipped), self._deadline
        )

    def get_extra_info(self, info: str) -> object:
        return self._inner.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's sync backend with deadline clipping and a bounded name lookup."""

    def __init__(self, deadline: Deadline) -> None:
        self._inner = httpcore.SyncBackend()
        self._deadline = deadline

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        address = _resolve(host, port, self._deadline.clip(timeout, httpcore.ConnectTimeout))
        clipped = self._deadline.clip(timeout, httpcore.ConnectTimeout)
        stream = self._inner.connect_tcp(address, port, clipped, local_address, socket_options)
        return ClippedStream(stream, self._deadline)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:  # pragma: no cover - never configured
        raise httpcore.ConnectError("unix sockets are not supported")

    def sleep(self, seconds: float) -> None:  # pragma: no cover - retries are off
        time.sleep(seconds)


def _resolve(host: str, port: int, timeout: float) -> str:
    """An address for host: a literal as it is, a name looked up within timeout, in a
    daemon thread abandoned when the time runs out (a ThreadPoolExecutor's workers are
    joined at exit: a hung lookup would hold the hook past D)."""
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    found: list[str | Exception] = []
    done = threading.Event()

    def lookup() -> None:
        try:
            found.append(str(socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)[0][4][0]))
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
    return result
