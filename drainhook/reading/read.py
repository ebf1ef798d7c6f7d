"""One read: a GET of the metrics URL, turned into exactly one verdict (CONTRACT §2),
on httpcore's public extension points: no redirect followed, no proxy or .netrc,
the body read raw. Failures: reading.failures; the deadline: reading.deadline."""

from __future__ import annotations

import ssl
import time
import typing
from collections.abc import Callable

import httpcore

from drainhook.engines.exposition import MetricsScanner
from drainhook.engines.verdict import Body, Reading, Scanner, Verdict
from drainhook.reading.body import gather
from drainhook.reading.config import DEFAULT_MAX_BODY, DEFAULT_READ_TIMEOUT
from drainhook.reading.deadline import Deadline, DeadlineBackend
from drainhook.reading.failures import NoBody, classify, status_reason
from drainhook.reading.target import Target

T = typing.TypeVar("T")

USER_AGENT = "drainhook"


class Reader:
    """Reads one target: `read(left)` returns one Reading within `read_timeout`, and
    within `left` (the time to D), and never raises (but for a signal handler's
    exception). `scanner` turns a 2xx body into its verdict and names the Accept
    header; `clock` times, bounds and ends the read."""

    def __init__(
        self,
        target: Target,
        *,
        scanner: Scanner | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        ssl_context: ssl.SSLContext | None = None,
        tls_server_name: str | None = None,
        api_key: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.target = target
        self._scanner: Scanner = scanner or MetricsScanner()
        self._max_body = max_body
        self._read_timeout = read_timeout
        self._clock = clock
        self._deadline = Deadline(clock)
        self._started = 0.0
        self._answered = False  # a 2xx seen: a 3xx or 4xx is then no wrong target
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
        self._extensions: dict[str, object] = {}
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
            network_backend=DeadlineBackend(self._deadline),
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

    def read(self, left: float) -> Reading:
        """One read, ending within --read-timeout and `left` seconds, whatever the
        server does."""
        return self.read_with(left, self._scan)

    def read_with(self, left: float, parse: Callable[[Body, float], T]) -> T | Reading:
        """One GET within --read-timeout and `left` whose body goes to `parse(body, until)`
        (what it raises passes through): the one place a failure becomes its verdict."""
        self._deadline.start(min(left, self._read_timeout))
        self._started = self._clock()
        body = bytearray()
        try:
            try:
                self._fetch(body)
            except NoBody as exc:
                return Reading.failed(
                    Verdict.UNKNOWN, exc.reason, self._ms(), source=self.source, status=exc.status
                )
            except Exception as exc:
                verdict, reason = classify(exc)
                return Reading.failed(verdict, reason, self._ms(), source=self.source)
            return parse(body, self._deadline.at)
        finally:
            # Shrunk in place before it is freed: glibc raises its mmap threshold to
            # the largest block freed, and every later body over 128 KiB would then
            # grow on the heap by copying (RSS 45-74 MB against 43 in the hostile
            # cases). Now, too, not when the collector frees a failed read's frames.
            body.clear()

    def _scan(self, body: Body, until: float) -> Reading:
        """`read`'s parse: the scan is part of the read and ends by its deadline too."""
        try:
            found = self._scanner(body, until=until, clock=self._clock)
        except Exception as exc:  # a scanner's bug: the read is unknown, as any
            verdict, reason = classify(exc)
            return Reading.failed(verdict, reason, self._ms(), source=self.source)
        return Reading.from_scan(found, self._ms(), self.source)

    def _ms(self) -> float:
        """Milliseconds since the current read started."""
        return (self._clock() - self._started) * 1000.0

    def _fetch(self, body: bytearray) -> None:
        """Read the body into `body`, or raise why there is none to scan."""
        with self._pool.stream(
            b"GET", self._url, headers=self._headers, extensions=self._extensions
        ) as response:
            status = response.status
            if not 200 <= status < 300:
                raise NoBody(status_reason(status, self._answered), status)
            self._answered = True
            gather(response, body, self._max_body)
