"""The simulated engine: request accounting, how it answers, and what SIGTERM does to it.

One model serves `drainhook demo` and the rehearsal (rehearsal/engine.py runs
it as a process). Times are seconds as run: the rehearsal scales them before
they get here.

The scheduler runs at most `max_running` requests per DP rank; the rest wait.
On SIGTERM (`SimEngine.sigterm`) it does what the engines do. vLLM with one API
server is calibrated to the live vLLM 0.32 (CPU build, measured; CONTRACT
§7); the rest was read in the engines' code:

- vLLM, `--shutdown-timeout 0` (its default): the engine core is killed
  `core_seconds` after SIGTERM (~20 ms), before it sends any abort. Every
  request still in it stalls: no more tokens, no error, no `[DONE]`, the
  connection held open. The listener closes `listener_seconds` after SIGTERM
  (~0.25 s); the API server then waits, with no bound, for every connection
  with a request in progress to close, so a stalled stream keeps the process
  until the kubelet's SIGKILL (`kill`), and its client ends with a truncated
  body. With none in progress it exits `exit_seconds` after SIGTERM (~0.4 s).
- vLLM, `--shutdown-timeout N`: running and waiting requests go on; a new
  completion gets HTTP 500 at once (`cannot schedule new futures after
  shutdown`); `/health` and `/metrics` keep answering until the listener
  closes. Once no request is left the engine core tears itself down and
  exits a time drawn in `teardown_seconds` later (its worker process first:
  the machine's time, a range, not a constant); if one is left
  at N, vLLM's process manager kills the core then. The stop above follows
  from whichever comes first: a request still running at N stalls, the
  listener closes `listener_seconds` later, the process exits
  `exit_seconds` later with no connection open (live numbers:
  benchmarks/live.md).
- Once the engine core is gone, /metrics shows the values it last published
  (frozen), while the listener lasts.
- vLLM, several API servers (`api_servers` > 1, vLLM's default under internal
  data parallelism): each API server drops its engine connection at once:
  the streams in flight are cut and new completions get HTTP 500, while the
  engine cores go on with the work for nobody until it ends or N. Inferred
  from the code, not observed.
- SGLang (0.5.23, measured live on its CPU engine: CONTRACT §7): `/health`
  answers 503 from SIGTERM on; its watchdog looks at the SIGTERM flag every
  `notice_seconds` (from `notice_origin`), then drains with no bound while
  serving as before (a new request is served), looks again every
  `notice_seconds` until nothing is left, and exits `exit_seconds` later; a
  prefill/decode server never sooner than `exit_after_sigterm` (read in its
  code). With `idle_lag`, /metrics refreshes about once a second while busy
  and shows idle only `idle_lag` after going idle; `GET /v1/loads` is always
  live. A stream stays in `http_requests_active` `stream_tail` after its last
  byte (front.py).

Where the gauges are blind (CONTRACT §2a; read in vLLM 0.32's and SGLang
0.5.23's code): a request is in the HTTP server before its scheduler sees it.

- The body's upload: the server holds the connection, nothing counts it but
  SGLang's `http_requests_active` (up before the body is read) and the
  connection itself (bytes received, none sent).
- `render` (vLLM: chat template, tokenization, media fetch and multimodal
  processing, one at a time per API server with `render_serial`: its
  multimodal executor has one worker, `renderers/base.py`; SGLang: the
  tokenizer manager's): after the body is parsed,
  before the request reaches the scheduler and before any response byte.
  vLLM's `/load` counts it (with `load_tracking`), the gauges do not. A
  request whose render ends after the engine core is gone gets HTTP 500
  (`ENGINE_DEAD_ERROR`, as the live vLLM answered an upload that ended
  after SIGTERM).
- `step_gauges` (vLLM): the gauges are set after each engine step
  (`make_stats` in `update_from_output`), one step per `token_seconds`.
- SGLang: a request being prefilled is in neither `waiting_queue` nor
  `running_batch` (nor `/v1/loads`); with `refresh_iterations` N the gauges
  are set when a prefill batch is scheduled and every N decode iterations
  (SGLang's `decode_log_interval`, 40), and at once when the engine is idle.

What the server itself counts is in `front.py` (`ServerCounts`).

Progress (CONTRACT §2b), the way vLLM counts it: every streamed token adds
one generated token and one step that emitted output, a request's first
token adds its prompt's tokens (once per completed prefill); SGLang's
realtime tokens count the same tokens. `prefill_seconds` holds each request
that long before its first token (a long prompt: counters flat while nothing
else decodes); `kv_wait_seconds` holds it that long as deferred waiting
first (a KV pull: waiting, `reason="deferred"`). `freeze_after`: that long
after the first request arrives the engine freezes as a SIGSTOPped vLLM
EngineCore does: no token more, and /metrics keeps answering the frozen
series; SIGTERM still does what it does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import math
import random
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from sim import pages
from sim.front import ServerCounts
from sim.pages import Shown

EventLog = Callable[..., None]  # log(event, **fields)
Duration = Callable[[Mapping[str, Any]], float]  # a completion request's body -> seconds


def _quiet(event: str, **fields: object) -> None:
    pass


class Answer(enum.Enum):
    """How the engine answers a new completion request."""

    SERVE = "serve"
    ERROR = "error"  # HTTP 500


class Fate(enum.Enum):
    """What happens to the streams still open when the engine stops their requests."""

    STALL = "stall"  # no more bytes; the connection stays open until the process ends
    CUT = "cut"  # the connection is closed


# vLLM's answer to a new completion while `--shutdown-timeout` drains (vLLM 0.32, live).
SHUTDOWN_ERROR = (
    b'{"error":{"message":"cannot schedule new futures after shutdown",'
    b'"type":"InternalServerError","param":null,"code":500}}'
)
# A request whose handler reaches the engine after its core is gone (vLLM 0.32, live:
# an upload that ended after SIGTERM got HTTP 500).
ENGINE_DEAD_ERROR = (
    b'{"error":{"message":"EngineCore encountered an issue. See stack trace (above) for '
    b'the root cause.","type":"InternalServerError","param":null,"code":500}}'
)
# Several API servers that lost their engine connection (read in the code, not observed).
ENGINE_LOST_ERROR = b'{"error":{"message":"engine connection lost","code":500}}'


@dataclass(frozen=True)
class EngineConfig:
    kind: str = "vllm"  # vllm | sglang
    role: str = "unified"  # SGLang: unified | prefill | decode
    dp: int = 2  # DP ranks (vLLM's `engine` label, SGLang's `dp_rank`)
    max_running: int = 2  # running requests per DP rank; the rest wait
    route: int | None = None  # None: round robin over the ranks; else every request to this one
    model: str = "demo/Sim-7B"
    token_seconds: float = 0.05  # one streamed event this often
    api_servers: int = 1  # vLLM: more than one takes the several-API-server path
    shutdown_timeout: float = 0.0  # vLLM --shutdown-timeout
    # vLLM's stop, from SIGTERM (default) or, with --shutdown-timeout N, from N after
    # it or the core's own exit after the drain, whichever comes first:
    core_seconds: float = 0.02  # the engine core is killed (no abort sent)
    listener_seconds: float = 0.25  # the listener is closed
    exit_seconds: float = 0.4  # the process exits, once no request is in progress
    # --shutdown-timeout: drained to the core's own exit, the machine's: each engine
    # draws one value in this range (low, high) from `teardown_seed` (`teardown`)
    teardown_seconds: tuple[float, float] = (3.39, 5.56)
    teardown_seed: str = "1"
    notice_seconds: float = 5.0  # SGLang: its SIGTERM watchdog's period
    notice_origin: float | None = None  # SGLang: when that grid starts (default: the start)
    exit_after_sigterm: float = 0.0  # SGLang prefill/decode: no exit sooner than this
    idle_lag: float = 0.0  # SGLang: /metrics shows idle only this long after going idle
    publish_seconds: float = 1.0  # SGLang with idle_lag: /metrics refreshes this often
    metrics_hang: bool = False  # /metrics accepts the connection and never answers
    prefill_seconds: float = 0.0  # each request's prefill: no token before it
    kv_wait_seconds: float = 0.0  # each request waits this long on a KV pull (deferred) first
    freeze_after: float | None = None  # freeze this long after the first request arrives
    prompt_tokens: int = 512  # tokens of each request's prompt
    render_seconds: float = 0.0  # each request's render (SimEngine.render draws it per request)
    render_serial: bool = False  # vLLM: renders one at a time per API server (its mm executor)
    step_gauges: bool = False  # vLLM: the gauges as of the last engine step
    load_tracking: bool = False  # vLLM --enable-server-load-tracking: /load counts
    refresh_iterations: int = 0  # SGLang: gauges set at each prefill and every N decode steps
    http_active: bool = True  # SGLang: sglang:http_requests_active on /metrics (0.5.23)
    stream_tail: float = 0.0  # SGLang: a stream stays in that count this long after its end


def teardown(config: EngineConfig) -> float:
    """The engine core's teardown after a `--shutdown-timeout` drain: one value in
    `teardown_seconds`, the same for every engine with the same `teardown_seed`."""
    return random.Random(f"{config.teardown_seed}:teardown").uniform(*config.teardown_seconds)


def tokens_duration(token_seconds: float, default_tokens: int = 16) -> Duration:
    """Duration from the request's `max_tokens`: one event per token."""

    def duration(request: Mapping[str, Any]) -> float:
        tokens = request.get("max_tokens", default_tokens)
        count = int(tokens) if isinstance(tokens, (int, float)) else default_tokens
        return max(0, count) * token_seconds

    return duration


@dataclass
class _Rank:
    running: int = 0
    waiting: int = 0
    deferred: int = 0  # of waiting: on a KV pull (vLLM's reason="deferred")
    tokens: int = 0  # generated tokens (vllm:generation_tokens_total)
    steps: int = 0  # steps that emitted output (vllm:iteration_tokens_total_count)
    prompt: int = 0  # prompt tokens of completed prefills (vllm:prompt_tokens_total)
    prefilling: int = 0  # of running: in prefill (SGLang's gauges leave them out)


@dataclass
class SimEngine:
    """The engine's state, shared by its HTTP handlers and its SIGTERM thread."""

    config: EngineConfig = field(default_factory=EngineConfig)
    duration: Duration | None = None  # default: max_tokens x token_seconds
    render: Duration | None = None  # each request's render; default: render_seconds
    log: EventLog = _quiet
    started: float = field(default_factory=time.monotonic)
    sigterm_at: float | None = None
    answer: Answer = Answer.SERVE
    fate: Fate | None = None
    killed: threading.Event = field(default_factory=threading.Event)  # requests stopped
    exited: threading.Event = field(default_factory=threading.Event)  # the process is over
    _ranks: list[_Rank] = field(default_factory=list)
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _next: int = 0
    _streams: set[socket.socket] = field(default_factory=set)
    _open: set[socket.socket] = field(default_factory=set)  # requests in progress
    _published: list[tuple[int, int]] = field(default_factory=list)
    _stop_listening: list[Callable[[], None]] = field(default_factory=list)
    frozen: threading.Event = field(default_factory=threading.Event)  # `freeze_after` came
    # What /metrics shows from the freeze on, or once vLLM's engine core is gone.
    _frozen_at: list[Shown] | None = None
    _first_arrival: float | None = None
    server: ServerCounts = field(default_factory=ServerCounts)
    latencies: list[float] = field(default_factory=list)  # finished requests' e2e seconds
    _render_locks: list[threading.Lock] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._ranks = [_Rank() for _ in range(self.config.dp)]
        self._published = [(0, 0)] * self.config.dp
        self.server = ServerCounts(self.config.api_servers)
        self._render_locks = [threading.Lock() for _ in range(max(1, self.config.api_servers))]
        if self.duration is None:
            self.duration = tokens_duration(self.config.token_seconds)
        if self.render is None:
            render = self.config.render_seconds
            self.render = lambda _request: render

    @property
    def snapshot(self) -> bool:
        """Whether /metrics shows a published snapshot rather than live counts."""
        c = self.config
        if c.kind == "sglang":
            return c.idle_lag > 0 or c.refresh_iterations > 0
        return c.step_gauges

    def start(self) -> None:
        """Start what runs beside the handlers: the thread that publishes the gauges,
        where they are not live (SGLang's lag or refresh, vLLM's steps)."""
        c = self.config
        if c.kind == "sglang" and c.refresh_iterations > 0:
            threading.Thread(target=self._decode_steps, daemon=True).start()
        elif c.kind == "sglang" and c.idle_lag > 0:
            threading.Thread(target=self._publisher, daemon=True).start()
        elif c.kind == "vllm" and c.step_gauges:
            threading.Thread(target=self._engine_steps, daemon=True).start()

    def on_stop_listening(self, stop: Callable[[], None]) -> None:
        """Register how to close the listener (the HTTP server does)."""
        self._stop_listening.append(stop)

    # --- the scheduler ------------------------------------------------------------

    def request_seconds(self, request: Mapping[str, Any]) -> float:
        assert self.duration is not None
        return self.duration(request)

    def answering(self) -> Answer:
        """How the engine answers a new completion now (SIGTERM may have changed it)."""
        return self.answer

    def render_seconds(self, request: Mapping[str, Any]) -> float:
        assert self.render is not None
        return self.render(request)

    def rendered(self, request: Mapping[str, Any], process: int = 0) -> bool:
        """Render the request on API server `process` (in the server, before the
        scheduler; with `render_serial`, after the renders queued there before it);
        whether the engine core is still there to take it."""
        seconds = self.render_seconds(request)
        if seconds <= 0:
            return not self.killed.is_set()
        if not self.config.render_serial:
            self.exited.wait(seconds)
            return not self.killed.is_set()
        lock = self._render_locks[process % len(self._render_locks)]
        while not lock.acquire(timeout=0.02):
            if self.killed.is_set():
                return False
        try:
            if not self.killed.is_set():
                self.exited.wait(seconds)
        finally:
            lock.release()
        return not self.killed.is_set()

    def admit(self) -> int | None:
        """Queue a request on its DP rank and block until it runs; None: the engine
        stopped it while it waited (or had stopped before it came)."""
        with self._cond:
            if self.killed.is_set():
                return None
            if self._first_arrival is None:
                self._first_arrival = time.monotonic()
                if self.config.freeze_after is not None:
                    threading.Thread(target=self._freeze_later, daemon=True).start()
            if self.config.route is None:
                rank = self._next % self.config.dp
                self._next += 1
            else:
                rank = self.config.route
            r = self._ranks[rank]
            r.waiting += 1
            if self.config.kv_wait_seconds > 0:
                r.deferred += 1
                self._cond.wait_for(self.killed.is_set, self.config.kv_wait_seconds)
                r.deferred -= 1
            self._cond.wait_for(lambda: self.killed.is_set() or r.running < self.config.max_running)
            r.waiting -= 1
            if self.killed.is_set():
                self._cond.notify_all()
                return None
            if self.config.kind == "sglang" and self.config.refresh_iterations > 0:
                # A prefill batch is scheduled: the gauges are set, without the request
                # being prefilled (in neither waiting_queue nor running_batch).
                self._published = self.visible()
            r.running += 1
            if self.config.kind == "sglang" and self.config.prefill_seconds > 0:
                r.prefilling += 1
            return rank

    def prefilled(self, rank: int) -> None:
        """The request's prefill on rank is done (SGLang: it joins the running batch)."""
        if self.config.kind != "sglang" or self.config.prefill_seconds <= 0:
            return
        with self._cond:
            self._ranks[rank].prefilling -= 1

    def emitted(self, rank: int, first: bool) -> None:
        """One token streamed on rank (its request's first: its prefill is done)."""
        with self._cond:
            r = self._ranks[rank]
            r.tokens += 1
            r.steps += 1
            if first:
                r.prompt += self.config.prompt_tokens

    def finish(self, rank: int) -> None:
        with self._cond:
            self._ranks[rank].running -= 1
            self._cond.notify_all()

    def counts(self) -> list[tuple[int, int]]:
        """(running, waiting) per DP rank, live."""
        with self._cond:
            return [(r.running, r.waiting) for r in self._ranks]

    def visible(self) -> list[tuple[int, int]]:
        """(running, waiting) per DP rank as the scheduler's own stats see them: SGLang's
        leave out a request being prefilled."""
        with self._cond:
            return [(r.running - r.prefilling, r.waiting) for r in self._ranks]

    def in_flight(self) -> int:
        return sum(run + wait for run, wait in self.counts())

    @contextlib.contextmanager
    def stream(self, conn: socket.socket) -> Iterator[None]:
        """Track a completion's connection while it streams, so that it can be cut."""
        with self._cond:
            self._streams.add(conn)
        try:
            yield
        finally:
            with self._cond:
                self._streams.discard(conn)

    @contextlib.contextmanager
    def serving(self, conn: socket.socket) -> Iterator[None]:
        """A request in progress on conn: vLLM's API server does not exit while one is."""
        with self._cond:
            self._open.add(conn)
        try:
            yield
        finally:
            with self._cond:
                self._open.discard(conn)
                self._cond.notify_all()

    def open_requests(self) -> int:
        with self._cond:
            return len(self._open)

    def hold(self, conn: socket.socket) -> None:
        """Keep conn open with nothing more to send (a stalled stream, a hung page)
        until its client closes it or the process ends."""
        while not self.exited.wait(0.02):
            with contextlib.suppress(OSError):
                ready, _, _ = select.select([conn], [], [], 0)
                if ready and not conn.recv(1, socket.MSG_PEEK):
                    return  # the client closed it
                continue
            return  # the socket is gone

    def kill(self) -> None:
        """SIGKILL: the process ends now; every connection it held is closed."""
        self.log("sigkill")
        with self._cond:
            self.killed.set()
            self._cond.notify_all()
            conns = list(self._open | self._streams)
        self._close_listener()
        self.exited.set()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    # --- the pages ------------------------------------------------------------------

    def gauges(self) -> list[tuple[int, int]]:
        """What /metrics shows: live counts, SGLang's lagging snapshot, or the values
        frozen (a frozen engine's, or vLLM's last once its engine core is gone)."""
        if self._frozen_at is not None:
            return [(s.running, s.waiting) for s in self._frozen_at]
        if self.snapshot:
            return list(self._published)
        return self.visible()

    def shown(self) -> list[Shown]:
        """Each rank as /metrics shows it: the gauges, the deferred, the counters."""
        if self._frozen_at is not None:
            return list(self._frozen_at)
        with self._cond:
            ranks = [dataclasses.replace(r) for r in self._ranks]
        return [
            Shown(run, wait, r.deferred, r.tokens, r.steps, r.prompt)
            for (run, wait), r in zip(self.gauges(), ranks, strict=True)
        ]

    def _freeze_later(self) -> None:
        assert self._first_arrival is not None and self.config.freeze_after is not None
        _sleep_until(self._first_arrival + self.config.freeze_after)
        self.freeze()

    def freeze(self) -> None:
        """Freeze now, as a SIGSTOPped engine core: no token more, /metrics as it is."""
        self._frozen_at = self.shown()
        self.frozen.set()
        self.log("frozen", in_flight=self.in_flight())

    def metrics(self) -> tuple[bytes, int]:
        """The /metrics body and the in-flight total it shows."""
        shown = self.shown()
        c = self.config
        counts = [(s.running, s.waiting) for s in shown]
        if c.kind == "vllm":
            text = pages.vllm_metrics(counts, c.model, shown, list(self.latencies))
        else:
            active = self.server.active() if c.http_active else None
            text = pages.sglang_metrics(counts, c.role, c.model, shown, active)
        return text.encode(), sum(s.running + s.waiting for s in shown)

    def loads(self) -> tuple[bytes, int] | None:
        """SGLang's /v1/loads body (live) and its total; None for vLLM (no such route)."""
        if self.config.kind != "sglang":
            return None
        live = self.visible()
        body = pages.sglang_loads(live, self.config.role)
        return body.encode(), sum(run + wait for run, wait in live)

    def _publisher(self) -> None:
        lag = self.config.idle_lag
        idle_since: float | None = None
        while not self.exited.is_set():
            now = time.monotonic()
            counts = self.visible()
            if any(run + wait for run, wait in counts):
                idle_since = None
                self._published = counts
            else:
                idle_since = now if idle_since is None else idle_since
                if now - idle_since >= lag:
                    self._published = counts
            time.sleep(self.config.publish_seconds)

    def _engine_steps(self) -> None:
        """vLLM: the gauges are set after each engine step (one a token tick)."""
        while not self.exited.is_set():
            if self._frozen_at is None and not self.frozen.is_set():
                self._published = self.counts()
            time.sleep(self.config.token_seconds)

    def _decode_steps(self) -> None:
        """SGLang: a decode iteration every token tick while a request decodes; the
        gauges are set every `refresh_iterations` of them, and at once when idle."""
        steps = 0
        while not self.exited.is_set():
            shown = self.visible()
            if any(run for run, _ in shown):
                steps += 1
                if steps % self.config.refresh_iterations == 0:
                    self._published = shown
            elif self.in_flight() == 0:
                self._published = shown
            time.sleep(self.config.token_seconds)

    # --- SIGTERM --------------------------------------------------------------------

    def sigterm(self) -> None:
        """SIGTERM arrived (once; a second one changes nothing): shut down as the engine does."""
        with self._cond:
            if self.sigterm_at is not None:
                return
            self.sigterm_at = time.monotonic()
        self.log("sigterm")
        c = self.config
        if c.kind == "sglang":
            run = self._sglang_shutdown
        elif c.api_servers > 1:
            run = self._several_api_servers_shutdown
        else:
            run = self._vllm_shutdown
        threading.Thread(target=run, daemon=True).start()

    def _vllm_shutdown(self) -> None:
        c = self.config
        assert self.sigterm_at is not None
        stop = self.sigterm_at
        if c.shutdown_timeout > 0:
            with self._cond:
                self.answer = Answer.ERROR  # new completions: HTTP 500
            drained = self._wait_idle(c.shutdown_timeout)  # those ending within N complete
            stop += c.shutdown_timeout  # the engine core is killed at N ...
            if drained:  # ... unless its own teardown ends first
                stop = min(stop, time.monotonic() + teardown(c))
        self._api_server_stop(stop)

    def _api_server_stop(self, origin: float) -> None:
        """vLLM's stop from `origin`: the engine core killed (what is left stalls), the
        listener closed, the process gone once no request is in progress."""
        c = self.config
        _sleep_until(origin + c.core_seconds)
        with self._cond:
            if self._frozen_at is None:
                self._frozen_at = self.shown()
        self._stop_requests(Fate.STALL)
        _sleep_until(origin + c.listener_seconds)
        self._close_listener()
        self.log("listener-closed", open=self.open_requests())
        _sleep_until(origin + c.exit_seconds)
        with self._cond:
            if self._open:
                self.log("lingering", open=len(self._open))
            self._cond.wait_for(lambda: not self._open)
        self._exit_at(time.monotonic())

    def _several_api_servers_shutdown(self) -> None:
        c = self.config
        with self._cond:
            self.answer = Answer.ERROR
            self.fate = Fate.CUT
        self._cut_streams()
        self.log("dropped", in_flight=self.in_flight())
        if c.shutdown_timeout <= 0 or not self._wait_idle(c.shutdown_timeout):
            self._stop_requests(Fate.CUT)
        self._close_listener()
        self._exit_at(time.monotonic() + c.exit_seconds)

    def _sglang_shutdown(self) -> None:
        c = self.config
        assert self.sigterm_at is not None
        origin = self.started if c.notice_origin is None else c.notice_origin
        period = c.notice_seconds
        ahead = math.floor((self.sigterm_at - origin) / period) + 1
        _sleep_until(origin + ahead * period)
        self.log("noticed")
        # Its tokenizer manager drains every request it holds (`rid_to_state`), in
        # the scheduler or not yet.
        while (left := max(self.in_flight(), self.server.completions())) > 0:
            self.log("draining", in_flight=left)
            time.sleep(period)
        self.log("drained", in_flight=0)
        at = max(time.monotonic() + c.exit_seconds, self.sigterm_at + c.exit_after_sigterm)
        self._exit_at(at)

    def _wait_idle(self, timeout: float) -> bool:
        """Wait until no request is left, up to timeout; whether none is."""
        with self._cond:
            idle = self._cond.wait_for(
                lambda: all(r.running + r.waiting == 0 for r in self._ranks), timeout
            )
        self.log("drained" if idle else "timed-out", in_flight=self.in_flight())
        return idle

    def _stop_requests(self, fate: Fate) -> None:
        """Every request still in the engine ends now; its stream meets `fate`."""
        with self._cond:
            n = sum(r.running + r.waiting for r in self._ranks)
            self.fate = fate if self.fate is None else self.fate
            self.killed.set()
            self._cond.notify_all()
        if self.fate is Fate.CUT:
            self._cut_streams()
        self.log("stalled" if self.fate is Fate.STALL else "killed", requests=n)

    def _cut_streams(self) -> None:
        with self._cond:
            conns = list(self._streams)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def _close_listener(self) -> None:
        for stop in self._stop_listening:
            stop()

    def _exit_at(self, at: float) -> None:
        _sleep_until(at)
        if self.exited.is_set():  # killed meanwhile
            return
        self._close_listener()
        self.log("exit")
        self.exited.set()


def _sleep_until(when: float) -> None:
    while (left := when - time.monotonic()) > 0:
        time.sleep(left)
