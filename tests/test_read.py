"""One read (drainhook.reading.read): every httpcore failure mapped to a verdict, causes a
real server cannot produce on demand (mocked transport), and the Reader against
real loopback servers: the read's own deadline, compressed bodies, the body
cap, redirects, the request it sends, and the name lookup's timeout."""

from __future__ import annotations

import base64
import gzip
import ipaddress
import itertools
import socket
import ssl
import threading
import time
import typing
import zlib
from collections.abc import Callable, Iterator

import httpcore
import pytest

from drainhook.engines.exposition import ACCEPT
from drainhook.engines.verdict import Reading, Scan, Verdict
from drainhook.reading import body as gathering
from drainhook.reading import deadline, failures
from drainhook.reading.read import Reader, classify
from drainhook.reading.target import parse_url
from tests.conftest import READ_LATE, late
from tests.support.loopback import (
    Heard,
    Loopback,
    close_after,
    drip,
    drip_headers,
    hang,
    never_read,
    record,
    reset_after,
    response_bytes,
    sample,
    sequence,
    serve,
)
from tests.support.process import run_delay

IDLE = sample("vllm-single-dp2-idle.txt")
BUSY = sample("vllm-single-dp2.txt")  # in_flight 6
UNKNOWN, UNREACHABLE = Verdict.UNKNOWN, Verdict.UNREACHABLE
# What a read may take beyond its timeout on a loaded 2-core machine.

# ---------------------------------------------------------------------------
# (a) Every exception httpcore exports is either a row of failures.ERRORS or one
# the read cannot raise.

GENERIC = {httpcore.NetworkError, httpcore.TimeoutException, httpcore.ProtocolError}

# CONTRACT §2: timed out, reset or closed mid-response -> unknown; a failure to
# connect (TLS, name resolution) -> unknown, a wrong target; only a refusal is
# unreachable (classify checks it first). A new httpcore class fails
# test_every_exported_exception_is_decided until it is decided here.
EXPECTED: dict[str, Verdict] = {
    "ConnectTimeout": UNKNOWN,
    "ReadTimeout": UNKNOWN,
    "WriteTimeout": UNKNOWN,
    "ConnectError": UNKNOWN,
    "ReadError": UNKNOWN,
    "WriteError": UNKNOWN,
    "RemoteProtocolError": UNKNOWN,
    "LocalProtocolError": UNKNOWN,
}
# What the read cannot raise, and why. Were one raised all the same (a bug), it
# would read `unknown` ("unexpected ..."), never crash the hook.
NOT_RAISED: dict[str, str] = {
    "PoolTimeout": "one read at a time never waits for a pool slot",
    "ProxyError": "no proxy is configured",
    "UnsupportedProtocol": "every target is http or https, with a host (target.parse_url)",
    "ConnectionNotAvailable": "caught inside httpcore's pool (a connection to retry)",
}


def exported_exceptions(module: typing.Any) -> list[type[Exception]]:
    found = (getattr(module, name) for name in module.__all__)
    return [c for c in found if isinstance(c, type) and issubclass(c, Exception)]


CONCRETE = [c for c in exported_exceptions(httpcore) if c not in GENERIC]


def test_every_exported_exception_is_decided() -> None:
    names = {c.__name__ for c in CONCRETE}
    assert names == set(EXPECTED) | set(NOT_RAISED)
    assert not set(EXPECTED) & set(NOT_RAISED)
    assert set(exported_exceptions(httpcore)) >= GENERIC, "a generic base was renamed"


def test_the_rows_are_the_expected_ones_and_no_generic_base() -> None:
    assert {kind.__name__ for kind, _, _ in failures.ERRORS} == set(EXPECTED)
    assert not [kind for kind, _, _ in failures.ERRORS if kind in GENERIC]


@pytest.mark.parametrize("kind", CONCRETE, ids=lambda c: c.__name__)
def test_each_exception_has_its_verdict(kind: type[Exception]) -> None:
    verdict, reason = classify(kind("boom"))
    if kind.__name__ in NOT_RAISED:
        assert (verdict, reason) == (UNKNOWN, f"unexpected {kind.__name__}")
        return
    row = next(r for r in failures.ERRORS if r[0] is kind)
    said = f"{row[2]}: boom"
    if kind is httpcore.ConnectError:  # not a refusal: a wrong target, with its fix (§2)
        said = f"misconfigured: {said}: check --url, --host and --port"
    assert (verdict, reason) == (row[1], said)
    assert verdict is EXPECTED[kind.__name__]


def test_anything_else_is_unknown() -> None:
    assert classify(ZeroDivisionError("x")) == (UNKNOWN, "unexpected ZeroDivisionError")


# ---------------------------------------------------------------------------
# (b) What the transport raises, through the Reader's own transport (its
# deadline-clipping backend and httpcore's pool) to a real loopback server; a
# bug below the Reader, which no server can cause, is raised by the real
# stream once the server has been reached.


@pytest.mark.parametrize(
    ("behaviour", "reason"),
    [
        (reset_after(response_bytes(IDLE)[:4000]), "connection broken while reading"),
        (close_after(b"HTTP/1.1 200 OK\r\n"), "connection closed mid-response"),
    ],
    ids=["reset-mid-body", "closed-after-the-status-line"],
)
def test_what_the_transport_raises_is_a_verdict(
    behaviour: Callable[[socket.socket], None], reason: str
) -> None:
    with Loopback(behaviour) as srv:
        reading, _ = timed_read(srv.url, 10.0)  # time enough on any machine: not a timeout
    assert reading.verdict is UNKNOWN
    assert reading.reason is not None and reading.reason.split(":")[0] == reason, reading.reason
    assert (reading.in_flight, reading.series) == (None, ())
    assert srv.connections == 1


def test_a_bug_below_the_reader_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    def read_fails(self: object, max_bytes: int, timeout: float | None = None) -> bytes:
        raise RuntimeError("a bug below the reader")

    heard = Heard()
    monkeypatch.setattr(deadline.ClippedStream, "read", read_fails)
    with Loopback(record(heard, response_bytes(BUSY))) as srv:
        reading, _ = timed_read(srv.url, 10.0)
        assert heard.wait(1)  # the request went out over the real connection
    assert (reading.verdict, reading.reason) == (UNKNOWN, "unexpected RuntimeError")
    assert (reading.in_flight, reading.series) == (None, ())
    assert srv.connections == 1


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (
            ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number"),
            "TLS handshake failed",
        ),
        (ssl.SSLCertVerificationError(1, "certificate verify failed"), "TLS verification failed"),
        (ssl.SSLEOFError(8, "EOF occurred in violation of protocol"), "TLS handshake failed"),
    ],
    ids=["ssl", "verify", "eof"],
)
def test_a_tls_handshake_failure_is_unreachable(error: ssl.SSLError, words: str) -> None:
    # Through httpcore's real exception mapping: only the handshake itself is
    # replaced.
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)

    def wrap_socket(*args: typing.Any, **kwargs: typing.Any) -> typing.NoReturn:
        raise error

    ctx.wrap_socket = wrap_socket  # type: ignore[method-assign]
    with Loopback(never_read) as srv:
        url = srv.url.replace("http://", "https://", 1)
        reading, took = timed_read(url, ssl_context=ctx)
    assert reading.verdict is UNKNOWN  # a wrong scheme holds (CONTRACT §2)
    assert reading.reason is not None
    assert reading.reason.startswith(f"misconfigured: cannot connect: {words}")
    assert reading.reason.endswith("check --scheme (the listener may speak http) and --cacert")
    assert took < late(0.0, READ_LATE)  # at once


def chain(*excs: BaseException) -> BaseException:
    """excs[0] raised from excs[1], raised from excs[2]..."""
    for outer, inner in itertools.pairwise(excs):
        outer.__cause__ = inner
    return excs[0]


@pytest.mark.parametrize(
    ("exc", "verdict", "reason"),
    [
        (
            chain(
                httpcore.ConnectError("y"),
                socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
            ),
            UNKNOWN,
            "misconfigured: cannot connect: name resolution failed (Name or service not known)"
            ": check --host or --url",
        ),
        (
            chain(httpcore.ConnectError("x"), ConnectionRefusedError(111, "Connection refused")),
            UNREACHABLE,
            "connection refused",
        ),
        (
            chain(httpcore.ReadError("x"), ConnectionResetError(104, "Connection reset by peer")),
            UNKNOWN,
            "connection broken while reading: connection reset",
        ),
        (
            chain(httpcore.ReadError("x"), OSError(32, "Broken pipe")),
            UNKNOWN,
            "connection broken while reading: broken pipe",
        ),
    ],
    ids=["gaierror", "refused", "reset", "oserror"],
)
def test_the_reason_names_the_root_cause(exc: Exception, verdict: Verdict, reason: str) -> None:
    assert classify(exc) == (verdict, reason)


def test_a_looping_exception_chain_is_classified() -> None:
    # A re-raised exception can chain back to itself (a mocked transport does
    # this): the walk to the root cause must end.
    outer, inner = httpcore.ReadError("outer"), RuntimeError("inner")
    outer.__context__, inner.__context__ = inner, outer
    assert classify(outer) == (UNKNOWN, "connection broken while reading: inner")


# ---------------------------------------------------------------------------
# (c) The Reader against real loopback servers.


def timed_read(url: str, timeout: float = 1.0, **kwargs: typing.Any) -> tuple[Reading, float]:
    """One read, and the seconds it took less those this thread waited, runnable,
    for a CPU the machine gave to others (tests.support.process.Run.starved)."""
    reader = Reader(parse_url(url), **kwargs)
    try:
        waited = run_delay()
        start = time.monotonic()
        reading = reader.read(timeout)
        return reading, time.monotonic() - start - (run_delay() - waited)
    finally:
        reader.close()


def assert_timed_out(reading: Reading, took: float, timeout: float) -> None:
    assert reading.verdict is UNKNOWN
    assert reading.reason is not None and "timed out" in reading.reason, reading.reason
    assert took <= late(timeout, READ_LATE), f"read took {took:.3f} s for a {timeout} s timeout"


@pytest.mark.parametrize(
    "behaviour",
    [drip(IDLE[:250], every=0.02), drip_headers(every=0.02), never_read],
    ids=["body-drip", "header-drip", "never-read"],
)
def test_a_read_ends_at_its_timeout_whatever_the_server_does(
    behaviour: Callable[[socket.socket], None],
) -> None:
    # Each socket call alone would wait well under the timeout (a byte every
    # 20 ms); only a deadline on the whole read ends it. The drip lasts 5 s.
    with Loopback(behaviour) as srv:
        reading, took = timed_read(srv.url, 0.3)
    assert_timed_out(reading, took, 0.3)
    assert srv.connections == 1


def test_a_listener_whose_backlog_is_full_times_out_connecting() -> None:
    # A listener that never accepts and whose accept queue is full drops the
    # SYN: the connect itself hangs.
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(4):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            fillers.append(s)
        time.sleep(0.05)
        reading, took = timed_read(f"http://127.0.0.1:{port}/metrics", 0.3)
    finally:
        for s in [*fillers, listener]:
            s.close()
    assert_timed_out(reading, took, 0.3)
    assert reading.reason is not None and reading.reason.startswith("connect timed out")


COMPRESSED = [
    pytest.param({"Content-Encoding": "gzip"}, gzip.compress(IDLE), id="gzip"),
    pytest.param({"Content-Encoding": "x-gzip"}, gzip.compress(IDLE), id="x-gzip"),
    pytest.param({"Content-Encoding": "deflate"}, zlib.compress(IDLE), id="deflate"),
    pytest.param({"Content-Encoding": "identity"}, IDLE, id="identity"),
]


@pytest.mark.parametrize(("headers", "body"), COMPRESSED)
def test_a_compressed_body_is_decoded(headers: dict[str, str], body: bytes) -> None:
    # identity was asked for; a server that compresses anyway is still read.
    with Loopback(serve(body, headers=headers)) as srv:
        reading, _ = timed_read(srv.url)
    assert (reading.verdict, reading.in_flight, reading.engine) == (Verdict.IDLE, 0, "vllm")


@pytest.mark.parametrize(
    ("encoding", "body", "words"),
    [
        ("br", b"\x0b\x02\x80hello\x03", "unsupported content-encoding 'br'"),
        ("gzip", b"not gzip at all", "undecodable gzip body"),
    ],
    ids=["br", "corrupt-gzip"],
)
def test_an_undecodable_body_is_unknown(encoding: str, body: bytes, words: str) -> None:
    with Loopback(serve(body, headers={"Content-Encoding": encoding})) as srv:
        reading, _ = timed_read(srv.url)
    assert reading.verdict is UNKNOWN
    assert reading.reason is not None and words in reading.reason


@pytest.fixture(scope="module")
def gzip_bomb() -> bytes:
    """64 MiB of zeros in about 64 KiB of gzip."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(1 << 20)
    return b"".join(deflate.compress(zeros) for _ in range(64)) + deflate.flush()


class CountingZlib:
    """drainhook.reading.body's zlib, counting the bytes every decompressor produces."""

    def __init__(self) -> None:
        self.inflated = 0
        self.MAX_WBITS = zlib.MAX_WBITS
        self.error = zlib.error

    def decompressobj(self, wbits: int = zlib.MAX_WBITS) -> typing.Any:
        inner = zlib.decompressobj(wbits)
        counter = self

        class Counting:
            def decompress(self, data: bytes, max_length: int = 0) -> bytes:
                out = inner.decompress(data, max_length)
                counter.inflated += len(out)
                return out

            @property
            def unconsumed_tail(self) -> bytes:
                return inner.unconsumed_tail

        return Counting()


def test_a_gzip_bomb_stops_at_the_cap(gzip_bomb: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    cap = 1 << 20
    counting = CountingZlib()
    monkeypatch.setattr(gathering, "zlib", counting)
    with Loopback(serve(gzip_bomb, headers={"Content-Encoding": "gzip"})) as srv:
        reading, took = timed_read(srv.url, 2.0, max_body=cap)
    assert reading.verdict is UNKNOWN
    assert reading.reason == f"body over --max-body ({cap} bytes)"
    assert 0 < counting.inflated <= cap + 1, f"inflated {counting.inflated} bytes, cap {cap}"
    assert took < late(0.0, READ_LATE)  # at the cap, not at the timeout (2 s)


@pytest.mark.parametrize(
    ("cap_minus_size", "verdict"), [(0, Verdict.IDLE), (-1, UNKNOWN), (1, Verdict.IDLE)]
)
def test_max_body_is_inclusive(cap_minus_size: int, verdict: Verdict) -> None:
    with Loopback(serve(IDLE)) as srv:
        reading, _ = timed_read(srv.url, max_body=len(IDLE) + cap_minus_size)
    assert reading.verdict is verdict, reading.reason
    if verdict is UNKNOWN:
        assert reading.reason == f"body over --max-body ({len(IDLE) - 1} bytes)"


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_not_followed(status: int) -> None:
    with Loopback(serve(b"", status, "Moved", headers={"Location": "/metrics"})) as srv:
        reading, _ = timed_read(srv.url)
    assert reading.verdict is UNKNOWN and reading.reason is not None
    assert reading.reason.startswith(f"misconfigured: HTTP {status}: ")
    assert srv.connections == 1


@pytest.mark.parametrize(
    ("status", "fix"),
    [
        (301, "check --url"),
        (308, "check --url"),
        (401, "--api-key-file"),
        (404, "check --path"),
        (418, "check --url"),
        (429, None),
        (500, None),
        (503, None),
        (599, None),
    ],
)
def test_a_status_is_doubt_and_a_wrong_target_before_the_first_2xx(
    status: int, fix: str | None
) -> None:
    """CONTRACT §2's rows: every non-2xx is `unknown`, which holds; a 3xx or 4xx
    from a target that never answered 2xx is a wrong target, named with its fix.
    The same Reader, reading again."""
    failing = serve(b"no\n", status, "X")
    with Loopback(sequence(failing, serve(IDLE), failing)) as srv:
        reader = Reader(parse_url(srv.url))
        try:
            first, ok, again = (reader.read(2.0) for _ in range(3))
        finally:
            reader.close()
    assert (first.verdict, first.status, again.verdict, again.status) == (
        UNKNOWN, status, UNKNOWN, status
    )  # fmt: skip
    if fix is None:
        assert first.reason == f"HTTP {status}"
    else:
        assert first.reason is not None and first.reason.startswith(f"misconfigured: HTTP {status}")
        assert fix in first.reason
    assert ok.verdict is Verdict.IDLE
    assert again.reason == f"HTTP {status}"
    assert srv.connections == 3


def request_headers(head: bytes) -> tuple[str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    fields = dict(line.split(": ", 1) for line in lines[1:] if line)
    return lines[0], {k.lower(): v for k, v in fields.items()}


def test_the_request_asks_for_text_format_and_identity() -> None:
    heard = Heard()
    with Loopback(record(heard, response_bytes(IDLE))) as srv:
        port = srv.port
        reading, _ = timed_read(srv.url)
    assert reading.verdict is Verdict.IDLE
    request_line, headers = request_headers(heard.heads[0])
    assert request_line == "GET /metrics HTTP/1.1"
    assert headers["accept"] == ACCEPT == "text/plain;version=0.0.4"
    assert headers["accept-encoding"] == "identity"
    assert headers["host"] == f"127.0.0.1:{port}"
    assert "authorization" not in headers and "cookie" not in headers


@pytest.mark.parametrize(
    ("userinfo", "api_key", "sent"),
    [
        ("", None, None),
        ("", "sk-1", "Bearer sk-1"),
        ("u%40x:p%2Fw@", None, "Basic " + base64.b64encode(b"u@x:p/w").decode()),
        ("u:p@", "sk-1", "Basic " + base64.b64encode(b"u:p").decode()),  # the URL's own wins
    ],
    ids=["none", "api-key", "userinfo", "both"],
)
def test_the_request_carries_the_credentials_given(
    userinfo: str, api_key: str | None, sent: str | None
) -> None:
    heard = Heard()
    with Loopback(record(heard, response_bytes(IDLE))) as srv:
        url = f"http://{userinfo}127.0.0.1:{srv.port}/m%65trics?a=b c"
        reading, _ = timed_read(url, api_key=api_key)
    assert reading.verdict is Verdict.IDLE, reading.reason
    request_line, headers = request_headers(heard.heads[0])
    assert request_line == "GET /m%65trics?a=b%20c HTTP/1.1"  # as given, a space encoded
    assert headers.get("authorization") == sent


class FakeLookup:
    """socket.getaddrinfo for names: answers, fails, or hangs until released."""

    def __init__(self, answer: str | None = None, hang: bool = False) -> None:
        self.answer = answer
        self.hang = hang
        self.asked: list[str] = []
        self.release = threading.Event()

    def __call__(self, host: str, port: int, *args: typing.Any, **kw: typing.Any) -> typing.Any:
        try:  # the connect itself looks the chosen address up again: a literal
            ipaddress.ip_address(host)
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (host, port))]
        except ValueError:
            pass
        self.asked.append(host)
        if self.hang:
            self.release.wait(5)
        if self.answer is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (self.answer, port))]


@pytest.fixture
def lookup(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., FakeLookup]]:
    made: list[FakeLookup] = []

    def install(answer: str | None = None, hang: bool = False) -> FakeLookup:
        fake = FakeLookup(answer, hang)
        made.append(fake)
        monkeypatch.setattr(socket, "getaddrinfo", fake)
        return fake

    yield install
    for fake in made:
        fake.release.set()


def test_a_name_is_looked_up_then_read(lookup: Callable[..., FakeLookup]) -> None:
    fake = lookup(answer="127.0.0.1")
    heard = Heard()
    with Loopback(record(heard, response_bytes(IDLE))) as srv:
        port = srv.port
        reading, _ = timed_read(f"http://engine.test:{port}/metrics")
    assert reading.verdict is Verdict.IDLE
    assert fake.asked == ["engine.test"]
    assert request_headers(heard.heads[0])[1]["host"] == f"engine.test:{port}"


def test_a_failed_lookup_is_a_wrong_target(lookup: Callable[..., FakeLookup]) -> None:
    lookup(answer=None)
    reading, took = timed_read("http://engine.test:9/metrics")
    assert reading.verdict is UNKNOWN
    assert reading.reason == (
        "misconfigured: cannot connect: name resolution failed (Name or service not known)"
        ": check --host or --url"
    )
    assert took < late(0.0, READ_LATE)  # at once


def test_a_hung_lookup_is_bounded_by_the_read(lookup: Callable[..., FakeLookup]) -> None:
    fake = lookup(hang=True)
    before = set(threading.enumerate())
    reading, took = timed_read("http://engine.test:9/metrics", 0.2)
    assert_timed_out(reading, took, 0.2)
    assert fake.asked == ["engine.test"]
    # The abandoned lookup must not hold the hook's exit: no thread it left
    # behind may be one the interpreter joins at exit.
    left = [t for t in set(threading.enumerate()) - before if not t.daemon]
    assert left == []


def test_localhost_is_never_looked_up(lookup: Callable[..., FakeLookup]) -> None:
    fake = lookup(answer="127.0.0.2")  # where a hostile /etc/hosts would send it
    with Loopback(serve(IDLE)) as srv:
        reading, _ = timed_read(f"http://localhost:{srv.port}/metrics")
    assert reading.verdict is Verdict.IDLE
    assert fake.asked == []


def test_one_clock_times_the_read_and_bounds_it() -> None:
    # The reader's clock is also its deadline's: a clock that jumps past the
    # timeout right after the read starts ends it before it connects.
    looks = iter([0.0, 0.0])

    def clock() -> float:
        return next(looks, 10.0)

    with Loopback(serve(IDLE)) as srv:
        reader = Reader(parse_url(srv.url), clock=clock)
        try:
            reading = reader.read(1.0)
        finally:
            reader.close()
        assert srv.connections == 0
    assert reading.verdict is UNKNOWN
    assert reading.reason == "connect timed out: the read's time ran out"
    assert reading.read_ms == 10_000.0


class RecordingScanner:
    """A scanner that asks for its own format and counts a fixed verdict."""

    accept = "application/x-drainhook-test"
    source = "test"

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def __call__(self, body: typing.Any, *, until: float, clock: Callable[[], float]) -> Scan:
        self.bodies.append(bytes(body))
        assert until > clock()  # the scan starts before the read's deadline
        return Scan(Verdict.BUSY, "test", 7.0)


def test_the_scanner_is_handed_in() -> None:
    heard = Heard()
    scanner = RecordingScanner()
    with Loopback(record(heard, response_bytes(b"seven"))) as srv:
        reader = Reader(parse_url(srv.url), scanner=scanner)
        try:
            reading = reader.read(1.0)
        finally:
            reader.close()
    assert (reading.verdict, reading.engine, reading.in_flight) == (Verdict.BUSY, "test", 7.0)
    assert reading.source == "test"  # the reading says what counted it
    assert scanner.bodies == [b"seven"]
    assert request_headers(heard.heads[0])[1]["accept"] == scanner.accept


def test_a_read_cut_by_its_deadline_says_so() -> None:
    # A server that answers nothing: the socket's wait is clipped to the read's
    # deadline and runs to it. The reason is the deadline's, whichever of the
    # socket or the clip noticed first.
    with Loopback(hang) as srv:
        reading, took = timed_read(srv.url, 0.2)
    assert reading.verdict is UNKNOWN
    assert reading.reason == "read timed out: the read's time ran out"
    assert took <= late(0.2, READ_LATE)
