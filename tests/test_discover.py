"""Discovery's reads (drainhook.reading.discovery.search) under a fake clock, with a fake reader:
every candidate read once, in parallel, nothing started or waited for past the
deadline, a reader that never returns abandoned at the deadline. No real waiting.

The fake clock stands still while reads run (they take no fake time); the
fake wait blocks (in real time) only until the threads of the reads meant to
answer have ended, and then, if nothing woke it, moves the clock on by the
whole timeout.
"""

from __future__ import annotations

import ipaddress
import threading
import time
import weakref
from collections.abc import Callable, Iterator

import pytest

from drainhook.engines.verdict import Reading, Series, Verdict
from drainhook.reading.discovery.listeners import Listener
from drainhook.reading.discovery.search import (
    Discovery,
    SearchRecord,
    Tried,
    names_engine,
    read_candidates,
    search,
)
from drainhook.reading.rounds import Discover, Round
from drainhook.reading.target import parse_url

READ_TIMEOUT = 1.0


def engine(total: float = 0.0, name: str = "vllm") -> Reading:
    series = (Series(f"{name}:x", (), total),)
    return Reading(Verdict.BUSY if total else Verdict.IDLE, name, total, series, None, 2.0)


def sidecar_404() -> Reading:
    return Reading.failed(Verdict.UNREACHABLE, "HTTP 404", 1.0)


def plain_text() -> Reading:  # a 200 without engine gauges
    return Reading(Verdict.UNKNOWN, None, None, (), "no vllm or sglang request gauges", 1.0)


def url(port: int) -> str:
    return f"http://127.0.0.1:{port}/metrics"


# Every thread that has called a Pod's read_one (any Pod's: threads of a read
# hung in an earlier Pod are no thread that has yet to start its read).
_ENTERED: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
_ENTERED_LOCK = threading.Lock()


class Pod:
    """A fake Pod: a reading per URL, or HANG (a read that returns only when the
    test ends); a fake clock; and a record of each read's timeout."""

    HANG = None

    def __init__(self, replies: dict[str, Reading | None], now: float = 100.0) -> None:
        self.replies = replies
        self.now = now
        self.timeouts: dict[str, float] = {}
        self.started_at: dict[str, float] = {}
        self.threads: dict[str, threading.Thread] = {}
        self.release = threading.Event()
        self._lock = threading.Lock()

    def clock(self) -> float:
        return self.now

    def read_one(self, u: str, timeout: float) -> Reading:
        with self._lock:
            self.timeouts[u] = timeout
            self.started_at[u] = self.now
            self.threads[u] = threading.current_thread()
        with _ENTERED_LOCK:
            _ENTERED.add(threading.current_thread())
        reply = self.replies[u]
        if reply is None:
            self.release.wait(30)  # hangs until the test is over
            return sidecar_404()
        return reply

    def wait(self, event: threading.Event, timeout: float) -> bool:
        """Wake when a result arrives; when every read that can answer has (its
        thread has ended, so its result is in), time passes: the clock moves
        on by `timeout`, as a real wait that nobody wakes would. A read's thread
        that has started but not yet reached read_one (a loaded machine) is
        waited for first: which read it makes, and so whether it answers, is not
        known before then, and without it the clock would move on too soon."""
        self._until_every_thread_reads()
        with self._lock:
            threads = [t for u, t in self.threads.items() if self.replies[u] is not None]
        for thread in threads:
            thread.join(10)
        if event.is_set():
            return True
        self.now += timeout
        return False

    @staticmethod
    def _until_every_thread_reads(limit: float = 10.0) -> None:
        """Until no discovery thread is alive that has not yet called a Pod's read_one."""
        give_up = time.monotonic() + limit
        while time.monotonic() < give_up:
            with _ENTERED_LOCK:
                entered = set(_ENTERED)
            if not [
                t for t in threading.enumerate()
                if t.name.startswith("drainhook-discover-") and t.is_alive() and t not in entered
            ]:  # fmt: skip
                return
            time.sleep(0.001)


@pytest.fixture
def pods() -> Iterator[Callable[[dict[str, Reading | None]], Pod]]:
    made: list[Pod] = []

    def make(replies: dict[str, Reading | None]) -> Pod:
        made.append(Pod(replies))
        return made[-1]

    yield make
    for pod in made:
        pod.release.set()


def run(pod: Pod, *, left: float = 10.0, max_parallel: int = 64, **kw: object) -> Discovery:
    return read_candidates(
        list(pod.replies),
        pod.read_one,
        read_timeout=READ_TIMEOUT,
        until=pod.now + left,
        clock=pod.clock,
        wait=pod.wait,
        max_parallel=max_parallel,
        **kw,  # type: ignore[arg-type]
    )


def test_every_candidate_read_once_and_only_engines_kept(pods: Callable[..., Pod]) -> None:
    pod = pods({url(15021): sidecar_404(), url(8123): engine(3), url(15090): plain_text()})
    found = run(pod)
    assert [t.url for t in found.found] == [url(8123)]
    assert found.found[0].reading == engine(3)
    assert [t.url for t in found.tried] == [url(15021), url(8123), url(15090)]
    assert found.not_read == ()
    assert pod.now == 100.0  # nothing waited for: every read answered
    assert set(pod.timeouts.values()) == {READ_TIMEOUT}


def test_sixty_four_candidates_one_hanging_end_by_the_deadline(pods: Callable[..., Pod]) -> None:
    replies: dict[str, Reading | None] = {url(p): sidecar_404() for p in range(9000, 9064)}
    replies[url(9040)] = engine(0, "sglang")
    replies[url(9007)] = Pod.HANG
    pod = pods(replies)
    found = run(pod, left=0.5)  # less than a read timeout left before D
    assert pod.now == 100.5  # returned at D, not at D + anything
    assert [t.url for t in found.found] == [url(9040)]
    assert len(found.tried) == 64 and found.not_read == ()
    hung = [t for t in found.tried if t.reading is None]
    assert [t.url for t in hung] == [url(9007)]
    assert hung[0].why == "no answer in time"
    # Every read started at once, each with the read timeout clipped to the time left.
    assert set(pod.started_at.values()) == {100.0}
    assert set(pod.timeouts.values()) == {0.5}


def test_with_time_to_spare_the_search_takes_the_reads_only(pods: Callable[..., Pod]) -> None:
    pod = pods({url(1): Pod.HANG, url(2): engine(1)})
    found = run(pod, left=10.0)
    # The hanging read's own timeout is 1 s; the search waits for it no longer
    # than D, and a real reader returns by its timeout: with a fake one that
    # never does, the search ends at D and says so.
    assert pod.timeouts[url(1)] == READ_TIMEOUT
    assert pod.now == pytest.approx(110.0)
    assert [t.url for t in found.found] == [url(2)]


def test_bounded_parallelism_starts_the_rest_as_reads_end(pods: Callable[..., Pod]) -> None:
    replies: dict[str, Reading | None] = {url(p): sidecar_404() for p in range(1, 11)}
    replies[url(1)] = Pod.HANG
    replies[url(2)] = Pod.HANG
    replies[url(10)] = engine(2)
    pod = pods(replies)
    found = run(pod, max_parallel=3)
    assert [t.url for t in found.found] == [url(10)]
    assert len(pod.timeouts) == 10  # two slots held by hung reads, the third did the rest
    assert found.not_read == ()


def test_no_read_starts_at_or_after_the_deadline(pods: Callable[..., Pod]) -> None:
    replies: dict[str, Reading | None] = {url(p): engine(1) for p in range(1, 6)}
    replies[url(1)] = Pod.HANG
    pod = pods(replies)
    found = run(pod, left=0.5, max_parallel=1)
    assert list(pod.timeouts) == [url(1)]
    assert pod.timeouts[url(1)] == 0.5
    assert found.found == ()
    assert found.not_read == tuple(url(p) for p in range(2, 6))
    assert found.describe().endswith("; 4 not read before the deadline")


def test_deadline_already_passed_reads_nothing(pods: Callable[..., Pod]) -> None:
    pod = pods({url(1): engine(1)})
    found = run(pod, left=0.0)
    assert pod.timeouts == {}
    assert (found.found, found.tried, found.not_read) == ((), (), (url(1),))


def test_no_candidates(pods: Callable[..., Pod]) -> None:
    found = run(pods({}))
    assert (found.found, found.tried, found.not_read) == ((), (), ())
    assert found.describe() == "no other listener in the Pod"


def test_a_reader_that_raises_is_a_failed_read_not_a_crash(pods: Callable[..., Pod]) -> None:
    pod = pods({url(1): engine(1), url(2): sidecar_404()})

    def read_one(u: str, timeout: float) -> Reading:
        if u == url(2):
            raise RuntimeError("bug")
        return pod.read_one(u, timeout)

    found = read_candidates(
        [url(1), url(2)], read_one, read_timeout=1.0, until=200.0, clock=pod.clock, wait=pod.wait
    )
    assert [t.url for t in found.found] == [url(1)]
    broken = found.tried[1].reading
    assert broken is not None and broken.verdict is Verdict.UNKNOWN
    assert broken.reason == "unexpected RuntimeError"


def test_several_engines_are_all_found_in_candidate_order(pods: Callable[..., Pod]) -> None:
    pod = pods({url(8002): engine(1), url(15000): sidecar_404(), url(8001): engine(0)})
    assert [t.url for t in run(pod).found] == [url(8002), url(8001)]


def test_describe_names_every_listener_and_why() -> None:
    d = Discovery(
        (),
        (
            Tried(url(15021), sidecar_404()),
            Tried(url(15090), plain_text()),
            Tried(url(9), None),
        ),
        (),
    )
    assert d.describe() == (
        f"tried 3 listeners: {url(15021)} (HTTP 404); "
        f"{url(15090)} (no vllm or sglang request gauges); {url(9)} (no answer in time)"
    )


def test_a_pinned_engine_needs_its_series() -> None:
    pinned_sidecar = Reading(Verdict.UNKNOWN, "vllm", None, (), "required gauge missing", 1.0)
    assert not names_engine(pinned_sidecar, "vllm")
    assert names_engine(engine(1, "vllm"), "vllm")
    assert not names_engine(engine(1, "sglang"), "vllm")
    assert not names_engine(plain_text(), "auto")
    assert not names_engine(sidecar_404(), "auto")
    # With auto, an engine named by its families counts even when its read is unknown.
    assert names_engine(Reading(Verdict.UNKNOWN, "sglang", None, (), "NaN", 1.0), "auto")


def test_the_engine_rule_is_the_callers(pods: Callable[..., Pod]) -> None:
    pod = pods({url(1): engine(1, "vllm"), url(2): engine(1, "sglang")})
    found = run(pod, is_engine=lambda r: names_engine(r, "sglang"))
    assert [t.url for t in found.found] == [url(2)]


# ---- search: listeners in, every reader made and closed -------------------------


class FakeReader:
    def __init__(self, pod: Pod, url: str, closed: list[str]) -> None:
        self._pod, self._url, self._closed = pod, url, closed

    def read(self, timeout: float) -> Reading:
        return self._pod.read_one(self._url, timeout)

    def close(self) -> None:
        self._closed.append(self._url)


def test_search_plans_reads_makes_and_closes_a_reader_for_each(pods: Callable[..., Pod]) -> None:
    wildcard = [Listener(ipaddress.ip_address("0.0.0.0"), p) for p in (8000, 8123, 15021)]
    many = [Listener(ipaddress.ip_address("::"), p) for p in range(40000, 40070)]
    replies: dict[str, Reading | None] = {url(p): sidecar_404() for p in range(40000, 40070)}
    replies.update({url(8123): engine(4), url(15021): sidecar_404()})
    replies = {u.replace("127.0.0.1:4", "[::1]:4"): r for u, r in replies.items()}
    pod = pods(replies)
    closed: list[str] = []
    found = search(
        lambda u: FakeReader(pod, u, closed),
        read_timeout=READ_TIMEOUT,
        until=pod.now + 5,
        exclude=[("localhost", 8000)],  # the configured target: refused already
        clock=pod.clock,
        listeners=lambda: [*wildcard, *many],
    )
    assert [t.url for t in found.found] == [url(8123)]
    assert len(found.tried) == 64 and url(8000) not in pod.timeouts
    assert sorted(closed) == sorted(t.url for t in found.tried)
    assert found.left_out == tuple(f"http://[::1]:{p}/metrics" for p in range(40062, 40070))
    assert found.describe().endswith("; 8 more not read (at most 64 are)")


def test_a_pids_limit_lowers_parallelism_and_every_read_still_happens(
    pods: Callable[..., Pod],
) -> None:
    """Where no more than 3 threads can run (a container's pids limit), the reads
    go 3 at a time instead: all 12 made once, the engine found, nothing lost."""
    replies: dict[str, Reading | None] = {url(p): sidecar_404() for p in range(1, 13)}
    replies[url(12)] = engine(1)
    pod = pods(replies)
    running = 0  # started since the last wait (the fake wait ends them all)
    refused = 0

    def spawn(task: Callable[[], None], name: str) -> None:
        nonlocal running, refused
        if running >= 3:
            refused += 1
            raise RuntimeError("can't start new thread")
        running += 1
        threading.Thread(target=task, name=name, daemon=True).start()

    def wait(event: threading.Event, timeout: float) -> bool:
        nonlocal running
        woke = pod.wait(event, timeout)
        running = 0
        return woke

    found = read_candidates(
        list(replies),
        pod.read_one,
        read_timeout=1.0,
        until=110.0,
        clock=pod.clock,
        wait=wait,
        spawn=spawn,
    )
    assert [t.url for t in found.found] == [url(12)]
    assert len(found.tried) == 12 and all(t.reading is not None for t in found.tried)
    assert len(pod.timeouts) == 12  # each read once
    assert refused == 1  # once: from then on it starts no more than 3 at a time
    assert pod.now == 100.0


def test_no_thread_at_all_fails_each_read_without_waiting(pods: Callable[..., Pod]) -> None:
    pod = pods({url(1): engine(1), url(2): engine(1)})

    def spawn(task: Callable[[], None], name: str) -> None:
        raise RuntimeError("can't start new thread")

    found = run(pod, spawn=spawn)
    assert found.found == () and pod.timeouts == {} and pod.now == 100.0
    assert [t.why for t in found.tried] == ["no thread: can't start new thread"] * 2


# ---- a Round with discovery: the hook's reader, searching on a first read that was refused ------


REFUSED = Reading.failed(
    Verdict.UNREACHABLE, "cannot connect: connection refused", 0.5, refused=True
)


def ranked(total: float, rank: str) -> Reading:
    """A vLLM engine's reading for one DP rank (its own `engine` label)."""
    series = (Series("vllm:num_requests_running", (("engine", rank),), total),)
    return Reading(Verdict.BUSY if total else Verdict.IDLE, "vllm", total, series, None, 2.0)


class Scripted:
    """A target reader that gives its readings in turn (the last repeats)."""

    def __init__(self, name: str, readings: list[Reading], log: list[str]) -> None:
        self.name = name
        self._readings = readings
        self._log = log

    def read(self, timeout: float) -> Reading:
        self._log.append(self.name)
        return self._readings.pop(0) if len(self._readings) > 1 else self._readings[0]

    def close(self) -> None:
        pass


CONFIGURED = parse_url(url(8000))
WILDCARD = [Listener(ipaddress.ip_address("0.0.0.0"), p) for p in (8000, 8123, 15021)]


def discovering(
    configured: list[Reading],
    found: dict[str, list[Reading]],
    *,
    on_refused: bool = True,
    always: bool = False,
    listed: list[int] | None = None,
) -> tuple[Round, list[str], list[SearchRecord]]:
    """A Round with discovery over one configured target (127.0.0.1:8000) in a Pod whose
    other listeners answer `found` (URL -> readings); `listed` counts the looks at /proc."""
    log: list[str] = []
    searches: list[SearchRecord] = []

    def listeners() -> list[Listener]:
        if listed is not None:
            listed.append(1)
        return WILDCARD

    discover = Discover(
        [CONFIGURED],
        lambda u: Scripted(u, found[u], log),  # one script per URL, shared
        read_timeout=READ_TIMEOUT,
        on_refused=on_refused,
        always=always,
        listeners=listeners,
        on_search=searches.append,
    )
    reader = Round([Scripted(CONFIGURED.display, configured, log)], discover=discover)
    return reader, log, searches


def test_a_refused_first_read_is_answered_by_the_engines_found() -> None:
    busy_then_idle = [ranked(2, "0"), ranked(0, "0")]
    reader, log, searches = discovering(
        [REFUSED], {url(8123): busy_then_idle, url(15021): [sidecar_404()]}
    )
    first = reader.read(1.0)
    # The first read is the search's own read of the engine: busy 2, no read twice.
    assert (first.verdict, first.in_flight) == (Verdict.BUSY, 2)
    assert log[0] == url(8000) and sorted(log[1:]) == sorted([url(8123), url(15021)])
    assert [n for n, _ in first.parts] == [url(8000), url(8123)]
    (search_,) = searches
    assert search_.configured == (url(8000),) and search_.found == (url(8123),)
    assert reader.name == f"{url(8000)},{url(8123)}"
    # From then on: a round over the configured target (0 while it refuses) and the engine.
    log.clear()
    second = reader.read(1.0)
    assert (second.verdict, second.in_flight, second.reason) == (Verdict.IDLE, 0, None)
    assert log == [url(8000), url(8123)]


def test_the_configured_target_answering_later_is_counted_too() -> None:
    reader, _, _ = discovering([REFUSED, REFUSED, ranked(3, "1")], {url(8123): [ranked(1, "0")]})
    assert reader.read(1.0).in_flight == 1
    assert reader.read(1.0).in_flight == 1  # still refused: 0
    back = reader.read(1.0)
    assert (back.verdict, back.in_flight) == (Verdict.BUSY, 4)


def test_nothing_found_stays_unreachable_naming_the_listeners_tried() -> None:
    reader, log, _ = discovering(
        [REFUSED], {url(8123): [plain_text()], url(15021): [sidecar_404()]}
    )
    reading = reader.read(1.0)
    assert reading.verdict is Verdict.UNREACHABLE
    assert reading.reason == (
        "cannot connect: connection refused; no engine elsewhere in the Pod: tried 2 "
        f"listeners: {url(8123)} (no vllm or sglang request gauges); {url(15021)} (HTTP 404)"
    )
    assert sorted(log) == sorted([url(8000), url(8123), url(15021)])


def test_only_a_refused_first_read_searches() -> None:
    listed: list[int] = []
    # Answered first, refused after (an engine that exited): never a search.
    reader, log, _ = discovering(
        [ranked(1, "0"), REFUSED], {url(8123): [ranked(0, "1")]}, listed=listed
    )
    assert reader.read(1.0).verdict is Verdict.BUSY
    assert reader.read(1.0).verdict is Verdict.UNREACHABLE
    assert listed == [] and log == [url(8000), url(8000)]
    # Another cause of unreachable (a status): no search either.
    other = Reading.failed(Verdict.UNREACHABLE, "HTTP 404", 1.0, status=404)
    reader, log, _ = discovering([other], {url(8123): [ranked(0, "1")]}, listed=listed)
    assert reader.read(1.0).reason == "HTTP 404"
    assert listed == [] and log == [url(8000)]
    # Discovery off: a refused read is unreachable as it is.
    reader, log, _ = discovering([REFUSED], {url(8123): [ranked(0, "1")]}, on_refused=False)
    assert reader.read(1.0) is REFUSED and log == [url(8000)]


def test_always_lists_the_engines_and_keeps_the_configured_reading() -> None:
    mine = ranked(1, "0")
    reader, log, searches = discovering([mine], {url(8123): [ranked(5, "1")]}, always=True)
    assert reader.read(1.0) is mine
    assert [t.reading.in_flight for t in searches[0].discovery.found if t.reading] == [5]
    log.clear()
    reader.read(1.0)
    assert log == [url(8000)]  # the found engine is listed, not drained
