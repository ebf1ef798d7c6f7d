"""The hostile servers' table (tests/test_hostile_servers.py), shared with
benchmarks/hostile.py: each case a server that misbehaves one way, the hook's
arguments against it, and the exit, verdict and reason it must end with; and a
server busy for a while, then idle (tests/test_hostile_env.py)."""

from __future__ import annotations

import datetime
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import trustme

from tests.support.loopback import (
    Behaviour,
    chunked,
    close_after,
    drip_headers,
    gzip_of,
    head_bytes,
    hold_after,
    never_read,
    repeat,
    response_bytes,
    sample,
    serve,
    stream,
    tls_stall,
)

KIB, MIB, GIB = 1024, 1024 * 1024, 1024 * 1024 * 1024
IDLE = sample("vllm-single-dp2-idle.txt")
BUSY = sample("vllm-single-dp2.txt")  # in_flight 6


# The shrunk timeline: D = G - R = 2 s (a real process's timeline: D >= 2 s).
D = 2.0


TIMELINE = ("--settle", "0", "--interval", "0.15", "--read-timeout", "0.4",
            "--grace", "2.2", "--exit-reserve", "0.2")  # fmt: skip


def series(count: int, batch: int = 10_000) -> Callable[[], Iterator[bytes]]:
    """`count` distinct series of a counted gauge, 10,000 lines a chunk, built as sent."""
    line = b'vllm:num_requests_running{engine="%07d"} 0\n'

    def chunks() -> Iterator[bytes]:
        yield b"vllm:num_requests_waiting 0\n"
        for start in range(0, count, batch):
            yield b"".join(line % i for i in range(start, min(count, start + batch)))

    return chunks


def expired_tls() -> ssl.SSLContext:
    """A server context whose certificate, issued by CA, expired yesterday."""
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = CA.issue_cert(
        "127.0.0.1",
        not_before=now - datetime.timedelta(days=30),
        not_after=now - datetime.timedelta(days=1),
    )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cert.configure_cert(ctx)
    return ctx


CA = trustme.CA()


@dataclass(frozen=True)
class Case:
    """A hostile server and what the hook must conclude from it."""

    id: str
    server: Callable[[], Behaviour]
    code: int  # exit code of wait
    verdict: str  # of every read
    reason: str | None  # a part of every read's reason (None: idle, no reason)
    tls: Callable[[], ssl.SSLContext] | None = None
    https: bool = False  # reach a plain listener with https:// (a stalled handshake)
    cacert: bool = False  # pass --cacert with the test CA
    args: tuple[str, ...] = field(default=())

    @property
    def outcome(self) -> str:
        return {0: "drained", 3: "deadline", 4: "unreachable"}[self.code]


def label_body(size: int) -> bytes:
    return (
        b'vllm:num_requests_waiting{model="m"} 0\n'
        b'vllm:num_requests_running{model="m",note="' + b"A" * size + b'"} 0\n'
    )


def at_the_caps() -> Callable[[], Iterator[bytes]]:
    """2047 counted series of 8 labels with 110-byte values (just under the
    scanner's series, label and counted-bytes caps), then filler to the 16 MiB
    cap: about the most the scanner holds, on top of the most a body holds."""
    line = b"vllm:num_requests_running{%s} 0\n"
    counted = b"vllm:num_requests_waiting 0\n" + b"".join(
        line % b",".join(b'l%d="%s"' % (j, (b"%d-" % i).ljust(110, b"v")) for j in range(8))
        for i in range(2047)
    )
    filler = b"# filler\n" * 7000
    total = 16 * MIB - len(counted) % len(filler)

    def chunks() -> Iterator[bytes]:
        yield head_bytes(Content_Length=str(total))
        yield counted
        yield from repeat(filler, total - len(counted))()

    return chunks


OVER_CAP = "body over --max-body (16777216 bytes)"


TIMED_OUT = "read timed out"


BROKEN = "connection closed mid-response"


NOT_METRICS = "no vllm or sglang request gauges"


# Every reason of a read that ran out of time: connect, read or write timed out,
# or the read (or its scan) cut short by the deadline ("read timed out: the
# read's time ran out"). A loaded machine can give it to any read.
OUT_OF_TIME = "timed out"


IDLE_WITH_BAD_BYTES = IDLE + (
    b"# HELP other_metric bytes that are not UTF-8: \xff\xfe\xc3\x28\n"
    b'other_metric{path="\xff\xfe"} 1\n'
    b"\x00\x00\x00 binary junk \x80\x81\n"
)


CASES = [
    Case("body-1GiB", lambda: stream(head_bytes(Content_Length=str(GIB)),
         repeat(b"# filler line of a huge family\n" * 2048, GIB)),
         3, "unknown", OVER_CAP),
    Case("gzip-10GiB-unasked", lambda: stream(head_bytes(Content_Encoding="gzip"),
         gzip_of(repeat(b"\0" * MIB, 10 * GIB))),
         3, "unknown", OVER_CAP),
    Case("chunked-never-ends-slow", lambda: stream(head_bytes(Transfer_Encoding="chunked"),
         chunked(repeat(b"# still coming\n")), every=0.05),
         3, "unknown", TIMED_OUT),
    Case("chunked-never-ends-fast", lambda: stream(head_bytes(Transfer_Encoding="chunked"),
         chunked(repeat(b"# still coming\n" * 4096))),
         3, "unknown", OVER_CAP),
    Case("headers-never-end-slow", lambda: drip_headers(0.05),
         3, "unknown", TIMED_OUT),
    Case("headers-never-end-fast", lambda: stream(b"HTTP/1.1 200 OK\r\n",
         repeat(b"X-Filler: a header line\r\n" * 1000)),
         3, "unknown", BROKEN),
    Case("100k-header-lines", lambda: serve(IDLE, headers={f"X-H{i}": "v" for i in range(100_000)}),
         3, "unknown", BROKEN),
    Case("http-0.9-reply", lambda: close_after(IDLE),
         3, "unknown", BROKEN),
    Case("non-utf8-in-other-families", lambda: serve(IDLE_WITH_BAD_BYTES),
         0, "idle", None),
    Case("non-utf8-in-a-counted-line", lambda: serve(
         b'vllm:num_requests_waiting 0\nvllm:num_requests_running{model="\xff\xfe"} 0\n'),
         3, "unknown", "not UTF-8"),
    Case("nul-bytes-8MiB", lambda: stream(head_bytes(Content_Length=str(8 * MIB)),
         repeat(b"\0" * (64 * KIB), 8 * MIB)),
         3, "unknown", NOT_METRICS),
    Case("1M-counted-series", lambda: stream(head_bytes(Transfer_Encoding="chunked"),
         chunked(series(1_000_000))),
         3, "unknown", OVER_CAP),
    Case("300k-counted-series-under-the-cap", lambda: stream(head_bytes(),
         series(300_000)),
         3, "unknown", "more than 2048 counted series"),
    Case("16MiB-of-counted-name-prefixes", lambda: stream(head_bytes(),
         repeat(b"vllm:num_\n" * 6553, 16 * MIB - 64 * KIB)),
         3, "unknown", "time ran out scanning the body"),
    Case("label-value-1MiB", lambda: serve(label_body(MIB)),
         0, "idle", None),
    Case("counted-series-at-the-caps-plus-16MiB", lambda: stream(b"", at_the_caps()),
         0, "idle", None),
    Case("accepts-never-reads", lambda: never_read,
         3, "unknown", TIMED_OUT),
    Case("tls-stalls-mid-handshake", lambda: tls_stall,
         3, "unknown", "connect timed out", https=True),
    Case("expired-cert-under-cacert", lambda: serve(IDLE),
         6, "unknown", "misconfigured: cannot connect: TLS verification failed (certificate "
         "has expired)", tls=expired_tls, cacert=True),
    Case("closes-after-status-line", lambda: close_after(b"HTTP/1.1 200 OK\r\n"),
         3, "unknown", BROKEN),
    Case("content-length-over-body-then-close", lambda: close_after(
         response_bytes(IDLE, headers={"Content-Length": str(len(IDLE) + 100)})),
         3, "unknown", "without sending complete message body"),
    Case("content-length-over-body-then-silence", lambda: hold_after(
         response_bytes(IDLE, headers={"Content-Length": str(len(IDLE) + 100)})),
         3, "unknown", TIMED_OUT),
    Case("redirect-loop", lambda: serve(b"", 302, "Found", {"Location": "/metrics"}),
         6, "unknown", "misconfigured: HTTP 302"),
    Case("200-html-login-page", lambda: serve(
         b"<!doctype html><html><body><form action=/login method=post>"
         b"<input name=password type=password></form></body></html>\n",
         headers={"Content-Type": "text/html; charset=utf-8"}),
         3, "unknown", NOT_METRICS),
]  # fmt: skip


def case_argv(case: Case, url: str, cacert: Path) -> list[str]:
    """wait's arguments for a case against a server at url (every read logged: the
    cases count them)."""
    if case.https:
        url = url.replace("http://", "https://", 1)
    args = ["wait", "--url", url, *TIMELINE, "--log-reads", "all", *case.args]
    if case.cacert:
        args += ["--cacert", str(cacert)]
    return args


def busy_for(seconds: float) -> Behaviour:
    """Busy for `seconds` after the server's first request, idle after."""
    started: list[float] = []
    lock = threading.Lock()

    def behaviour(conn: socket.socket) -> None:
        with lock:
            if not started:
                started.append(time.monotonic())
        body = BUSY if time.monotonic() - started[0] < seconds else IDLE
        serve(body)(conn)

    return behaviour


CLOSED = "import os, sys; os.closerange(1, 3); os.execv(sys.argv[1], sys.argv[1:])"
