"""Real loopback servers for the tests: a TCP listener on 127.0.0.1 whose every
connection is handed to a behaviour, so a test can serve a body, hang, drip,
reset or speak TLS on demand. Servers are threads in the test process.

    with Loopback(serve(body)) as srv:          # every connection gets body
    with Loopback(sequence(busy, busy, idle)) as srv:   # nth connection, last repeats
    with Loopback(route({"/metrics": body}, heads)) as srv:  # by path; heads seen
    srv.url, srv.port, srv.connections (how many were accepted)

vLLM's `GET /load` (the server's own count, CONTRACT §2a), which the hook asks
once after an idle vLLM read, is answered 404 by the listener itself (a vLLM
without the route: asked no more) and neither counted in `connections` nor
handed to the behaviour, so that a behaviour sees only the reads it scripts;
`Loopback(..., own_load=False)` hands it on, for the tests of /load itself
(`srv.side_reads` counts those answered here).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

Behaviour = Callable[[socket.socket], None]

# Real and built /metrics bodies, and what each must give (tests/samples/README.md).
SAMPLES = Path(__file__).resolve().parents[1] / "samples"
EXPECTED: dict[str, dict[str, Any]] = json.loads((SAMPLES / "expected.json").read_text())


def sample(name: str) -> bytes:
    return (SAMPLES / name).read_bytes()


def samples_of(*kinds: str) -> list[str]:
    """The sample names of these kinds (generated, captured, built), sorted."""
    return sorted(n for n, e in EXPECTED.items() if e["kind"] in kinds)


def read_request(conn: socket.socket, limit: float = 2.0) -> bytes:
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
        read_request(conn)
        conn.sendall(response_bytes(body, status, reason, headers))

    return behaviour


def hang(conn: socket.socket) -> None:
    """Read the request, never answer (until the client goes)."""
    read_request(conn)
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
        read_request(conn)
        conn.sendall(response_bytes(b"", headers={"Content-Length": str(len(body))}))
        for i in range(len(body)):
            time.sleep(every)
            conn.sendall(body[i : i + 1])

    return behaviour


def drip_headers(every: float = 0.05) -> Behaviour:
    """Send an endless header block, a byte at a time."""

    def behaviour(conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        while True:
            time.sleep(every)
            conn.sendall(b"X")

    return behaviour


def reset_after(prefix: bytes) -> Behaviour:
    """Send prefix (part of a response), then reset the connection (RST)."""

    def behaviour(conn: socket.socket) -> None:
        read_request(conn)
        if prefix:
            conn.sendall(prefix)
            time.sleep(0.05)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    return behaviour


def close_after(prefix: bytes) -> Behaviour:
    """Send prefix, then close cleanly (FIN)."""

    def behaviour(conn: socket.socket) -> None:
        read_request(conn)
        if prefix:
            conn.sendall(prefix)

    return behaviour


def route(
    paths: dict[str, bytes],
    heads: list[bytes] | None = None,
) -> Behaviour:
    """Serve paths[request path], 404 for any other path; append each request
    head (request line and headers) to `heads` when given. A connection that
    sends nothing (a hook that reached its deadline between connecting and
    writing, on a loaded machine) is not a request and is not recorded."""

    def behaviour(conn: socket.socket) -> None:
        head = read_request(conn)
        if heads is not None and head:
            heads.append(head)
        parts = head.split(b" ", 2)
        body = paths.get(parts[1].decode("latin-1")) if len(parts) == 3 else None
        if body is None:
            conn.sendall(response_bytes(b"not found\n", 404, "Not Found"))
        else:
            conn.sendall(response_bytes(body))

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
        sock: socket.socket | None = None,
        own_load: bool = True,
    ) -> None:
        if sock is not None:  # a listening socket made by the caller (tests/support/podns.py)
            host = str(sock.getsockname()[0])
        else:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, 0))
            sock.listen(64)
        self._sock = sock
        self._behaviour = behaviour
        self._tls = tls
        self._host = host
        self._path = path
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._own_load = own_load
        self.connections = 0
        self.side_reads = 0  # GET /load answered 404 by the listener itself
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
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _is_load(self, conn: socket.socket) -> bool:
        """Whether the connection's request is `GET /load` (peeked, not read)."""
        want = b"GET /load "
        timeout = conn.gettimeout()
        conn.settimeout(2.0)
        try:
            while True:
                seen = conn.recv(len(want), socket.MSG_PEEK)
                if not seen or not want.startswith(seen) or len(seen) >= len(want):
                    return seen == want
                time.sleep(0.001)
        except OSError:
            return False
        finally:
            with contextlib.suppress(OSError):
                conn.settimeout(timeout)

    def _answer_load(self, conn: Any) -> None:
        with self._lock:
            self.side_reads += 1
            self.connections -= 1  # not one of the behaviour's
        with contextlib.suppress(OSError):
            read_request(conn)
            conn.sendall(response_bytes(b"not found\n", 404, "Not Found"))
            conn.close()

    def _handle(self, conn: socket.socket) -> None:
        with self._lock:
            self.connections += 1
        if self._own_load and self._tls is None and self._is_load(conn):
            self._answer_load(conn)
            return
        served: Any = conn
        try:
            if self._tls is not None:
                conn.settimeout(5)
                served = conn = self._tls.wrap_socket(conn, server_side=True)
                if self._own_load:  # no peeking through TLS: read the first bytes
                    first = conn.recv(65536)
                    if first.startswith(b"GET /load "):
                        self._answer_load(_Replay(conn, first))
                        return
                    served = _Replay(conn, first)
            self._behaviour(served)
        except (OSError, ssl.SSLError):
            pass
        finally:
            with contextlib.suppress(OSError):
                conn.close()


class _Replay:
    """A socket whose first bytes were read already: `recv` gives them back first."""

    def __init__(self, sock: Any, data: bytes) -> None:
        self._sock = sock
        self._data = data

    def recv(self, size: int, *flags: int) -> bytes:
        if self._data:
            out, self._data = self._data[:size], self._data[size:]
            return out
        return bytes(self._sock.recv(size, *flags))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class Heard:
    """The request heads a listener received, in order; `wait(n)` blocks until
    n have arrived, so a test can act while the client waits for its answer."""

    def __init__(self) -> None:
        self.heads: list[bytes] = []
        self._cond = threading.Condition()

    def add(self, head: bytes) -> None:
        with self._cond:
            self.heads.append(head)
            self._cond.notify_all()

    def wait(self, n: int = 1, timeout: float = 5.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self.heads) >= n, timeout)


def record(heard: Heard, reply: bytes | None = None) -> Behaviour:
    """Read the request into `heard`, then send reply and close, or (None) hang
    until the client goes."""

    def behaviour(conn: socket.socket) -> None:
        heard.add(read_request(conn))
        if reply is not None:
            conn.sendall(reply)
            return
        conn.settimeout(None)
        with contextlib.suppress(OSError):
            while conn.recv(65536):
                pass

    return behaviour


def plain_http(body: bytes) -> Behaviour:
    """Like serve, but bytes that do not start an HTTP request line (a TLS
    ClientHello) get a 400 and a close at once, as uvicorn answers them."""

    def behaviour(conn: socket.socket) -> None:
        conn.settimeout(2.0)
        first = conn.recv(65536)
        if not first.split(b" ", 1)[0].isalpha():
            conn.sendall(response_bytes(b"Invalid HTTP request received.", 400, "Bad Request"))
            return
        if b"\r\n\r\n" not in first:
            read_request(conn)
        conn.sendall(response_bytes(body))

    return behaviour


# ---- hostile servers: bodies streamed from generators, never built in memory ----


def stream(head: bytes, chunks: Callable[[], Iterable[bytes]], every: float = 0.0) -> Behaviour:
    """Send head, then every chunk `chunks()` yields (one each `every` seconds),
    until the generator ends or the client goes; then close. A gigabyte body
    costs the server one chunk of memory, and stops when the client hangs up."""

    def behaviour(conn: socket.socket) -> None:
        read_request(conn)
        conn.settimeout(10)
        if head:
            conn.sendall(head)
        for chunk in chunks():
            if every:
                time.sleep(every)
            conn.sendall(chunk)  # OSError once the client has gone: the handler ends

    return behaviour


def repeat(chunk: bytes, total: int | None = None) -> Callable[[], Iterator[bytes]]:
    """chunk again and again: `total` bytes in all (whole chunks), or without end."""

    def chunks() -> Iterator[bytes]:
        sent = 0
        while total is None or sent < total:
            yield chunk
            sent += len(chunk)

    return chunks


def chunked(chunks: Callable[[], Iterable[bytes]]) -> Callable[[], Iterator[bytes]]:
    """The same chunks in HTTP/1.1 chunked framing (the last chunk, if any, after the end)."""

    def framed() -> Iterator[bytes]:
        for chunk in chunks():
            yield b"%x\r\n%s\r\n" % (len(chunk), chunk)
        yield b"0\r\n\r\n"

    return framed


def gzip_of(chunks: Callable[[], Iterable[bytes]]) -> Callable[[], Iterator[bytes]]:
    """The gzip stream of the chunks, compressed as it is sent: ten gigabytes of
    zeros are about ten megabytes on the wire and never exist whole."""

    def compressed() -> Iterator[bytes]:
        deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        for chunk in chunks():
            out = deflate.compress(chunk)
            if out:
                yield out
        yield deflate.flush()

    return compressed


def head_bytes(status_line: str = "HTTP/1.1 200 OK", **fields: str) -> bytes:
    """A response head: the status line, fields (`_` in a name is `-`), a blank line."""
    lines = [status_line, *(f"{k.replace('_', '-')}: {v}" for k, v in fields.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def tls_stall(conn: socket.socket) -> None:
    """Read the ClientHello, send the first bytes of a ServerHello record (its
    header promises more), then nothing: a handshake stalled half way. For a
    plain (not `tls=`) Loopback, reached with an https URL."""
    conn.settimeout(2.0)
    with contextlib.suppress(OSError):
        conn.recv(65536)
        conn.sendall(b"\x16\x03\x03\x00\x7a\x02\x00\x00\x76\x03\x03")
        conn.settimeout(None)
        while conn.recv(65536):
            pass


def hold_after(prefix: bytes) -> Behaviour:
    """Send prefix (a promise of more: a short body, a partial head), then hold the
    connection open without a byte more until the client goes."""

    def behaviour(conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(prefix)
        conn.settimeout(None)
        with contextlib.suppress(OSError):
            while conn.recv(65536):
                pass

    return behaviour


def echo(status: int = 200, reason: str = "OK") -> Behaviour:
    """Answer with status, and the request head (Authorization included) as the
    body and in an X-Echo header: a server that reflects what it was sent."""

    def behaviour(conn: socket.socket) -> None:
        head = read_request(conn).decode("latin-1")
        flat = head.strip().replace("\r\n", " | ")
        conn.sendall(response_bytes(head.encode("latin-1"), status, reason, {"X-Echo": flat}))

    return behaviour


def get(port: int, path: str) -> tuple[int, bytes]:
    """A plain GET of 127.0.0.1:port/path: the status and the whole body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()
