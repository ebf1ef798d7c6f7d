"""Real loopback servers for the tests: a TCP listener on 127.0.0.1 whose every
connection is handed to a behaviour, so a test can serve a body, hang, drip,
reset or speak TLS on demand. Servers are threads in the test process.

    with Loopback(serve(body)) as srv:          # every connection gets body
    with Loopback(sequence(busy, busy, idle)) as srv:   # nth connection, last repeats
    srv.url, srv.port, srv.connections (how many were accepted)
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

Behaviour = Callable[[socket.socket], None]

SAMPLES = Path(__file__).resolve().parents[1].parent / "shared" / "samples"


def sample(name: str) -> bytes:
    return (SAMPLES / name).read_bytes()


def _read_request(conn: socket.socket, limit: float = 2.0) -> bytes:
    """Read the request head (up to the blank line), giving up after `limit` s."""
    conn.settimeout(limit)
    data = b""
    with contextlib.suppress(OSError):
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
    return data


def response_bytes(
    body: bytes,
    status: int = 200,
    reason: str = "OK",
    headers: dict[str, str] | None = None,
) -> bytes:
    head = [f"HTTP/1.1 {status} {reason}"]
    fields = {"Content-Type": "text/plain; version=0.0.4", "Content-Length": str(len(body))}
    fields.update(headers or {})
    fields["Connection"] = "close"
    head += [f"{k}: {v}" for k, v in fields.items() if v != ""]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def serve(
    body: bytes,
    status: int = 200,
    reason: str = "OK",
    headers: dict[str, str] | None = None,
) -> Behaviour:
    """Answer the request with this body and status, then close."""

    def behaviour(conn: socket.socket) -> None:
        _read_request(conn)
        conn.sendall(response_bytes(body, status, reason, headers))

    return behaviour


def hang(conn: socket.socket) -> None:
    """Read the request, never answer (until the client goes)."""
    _read_request(conn)
    conn.settimeout(None)
    with contextlib.suppress(OSError):
        while conn.recv(65536):
            pass


def never_read(conn: socket.socket) -> None:
    """Accept and do nothing at all: the request is never read."""
    time.sleep(3600)


def drip(body: bytes, every: float = 0.05) -> Behaviour:
    """Send the headers, then the body one byte every `every` seconds."""

    def behaviour(conn: socket.socket) -> None:
        _read_request(conn)
        conn.sendall(response_bytes(b"", headers={"Content-Length": str(len(body))}))
        for i in range(len(body)):
            time.sleep(every)
            conn.sendall(body[i : i + 1])

    return behaviour


def drip_headers(every: float = 0.05) -> Behaviour:
    """Send an endless header block, a byte at a time."""

    def behaviour(conn: socket.socket) -> None:
        _read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        while True:
            time.sleep(every)
            conn.sendall(b"X")

    return behaviour


def reset_after(prefix: bytes) -> Behaviour:
    """Send prefix (part of a response), then reset the connection (RST)."""

    def behaviour(conn: socket.socket) -> None:
        _read_request(conn)
        if prefix:
            conn.sendall(prefix)
            time.sleep(0.05)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    return behaviour


def close_after(prefix: bytes) -> Behaviour:
    """Send prefix, then close cleanly (FIN)."""

    def behaviour(conn: socket.socket) -> None:
        _read_request(conn)
        if prefix:
            conn.sendall(prefix)

    return behaviour


def sequence(*behaviours: Behaviour) -> Behaviour:
    """The nth connection gets the nth behaviour; the last one repeats."""
    lock = threading.Lock()
    served = [0]

    def behaviour(conn: socket.socket) -> None:
        with lock:
            index = min(served[0], len(behaviours) - 1)
            served[0] += 1
        behaviours[index](conn)

    return behaviour


class Loopback:
    """A listener on 127.0.0.1 (or ::1) running a behaviour per connection."""

    def __init__(
        self,
        behaviour: Behaviour,
        *,
        tls: ssl.SSLContext | None = None,
        host: str = "127.0.0.1",
        path: str = "/metrics",
    ) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, 0))
        self._sock.listen(64)
        self._behaviour = behaviour
        self._tls = tls
        self._host = host
        self._path = path
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.connections = 0
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    @property
    def url(self) -> str:
        scheme = "https" if self._tls else "http"
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"{scheme}://{host}:{self.port}{self._path}"

    def __enter__(self) -> Loopback:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._sock.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            if self._tls is not None:
                conn.settimeout(5)
                conn = self._tls.wrap_socket(conn, server_side=True)
            self._behaviour(conn)
        except (OSError, ssl.SSLError):
            pass
        finally:
            with contextlib.suppress(OSError):
                conn.close()
