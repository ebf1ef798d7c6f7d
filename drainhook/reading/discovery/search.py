"""Listener discovery (CONTRACT §2a): when every configured target refused the
hook's first read, a search of the Pod's own listeners for the engine. `search`
lists them and reads each candidate once, all at once and never past D
(`read_candidates`), keeping the engines'. Each read runs in a daemon thread,
abandoned if it has not answered by `until`: a pool's workers would hold the exit."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from drainhook.engines.verdict import Reading, Verdict, engine_shown
from drainhook.reading import TargetReader
from drainhook.reading.discovery.listeners import Listener, candidates, read_listeners

ReadOne = Callable[[str, float], Reading]
# At most this many reads at once: with discovery's 64 candidates, every read
# starts at once, and the whole search takes one read timeout at most.
MAX_PARALLEL = 64


@dataclass(frozen=True)
class Tried:
    """One candidate read: its URL, its reading (None: no answer by the deadline),
    and when the reading came, on the search's clock (None: it did not)."""

    url: str
    reading: Reading | None
    at: float | None = None

    @property
    def why(self) -> str:
        """Why this listener is not the engine's, in a few words."""
        if self.reading is None:
            return "no answer in time"
        if self.reading.verdict is Verdict.UNREACHABLE or self.reading.engine is None:
            return self.reading.reason or str(self.reading.verdict)
        return f"{self.reading.engine} {self.reading.verdict}"


@dataclass(frozen=True)
class Discovery:
    """What the search found: the engine listeners (in candidate order), every
    read made, the candidates never read because the time ran out first, and
    the listeners left out past the cap (listeners.MAX_READS)."""

    found: tuple[Tried, ...]
    tried: tuple[Tried, ...]
    not_read: tuple[str, ...]
    left_out: tuple[str, ...] = ()

    def describe(self) -> str:
        """The listeners tried, for an `unreachable` reason or a log line."""
        if not (self.tried or self.not_read or self.left_out):
            return "no other listener in the Pod"
        shown = "; ".join(f"{t.url} ({t.why})" for t in self.tried)
        text = f"tried {len(self.tried)} listener{'s' if len(self.tried) != 1 else ''}"
        text = f"{text}: {shown}" if shown else text
        if self.not_read:
            text += f"; {len(self.not_read)} not read before the deadline"
        if self.left_out:
            cap = len(self.tried) + len(self.not_read)
            text += f"; {len(self.left_out)} more not read (at most {cap} are)"
        return text


def _daemon(task: Callable[[], None], name: str) -> None:
    threading.Thread(target=task, name=name, daemon=True).start()


def names_engine(reading: Reading, engine: str = "auto") -> bool:
    """Whether a listener's reading is an engine's (verdict.engine_shown's rule)."""
    shown = engine_shown(reading, engine)
    return shown is not None and engine in ("auto", shown)


def read_candidates(
    urls: Sequence[str],
    read_one: ReadOne,
    *,
    read_timeout: float,
    until: float,
    clock: Callable[[], float] = time.monotonic,
    is_engine: Callable[[Reading], bool] = names_engine,
    max_parallel: int = MAX_PARALLEL,
    wait: Callable[[threading.Event, float], object] = threading.Event.wait,
    spawn: Callable[[Callable[[], None], str], None] = _daemon,
    left_out: tuple[str, ...] = (),
) -> Discovery:
    """Read every URL once, `max_parallel` at a time, and keep the engines' (`left_out`:
    those past the cap). No read starts at or after `until` (on `clock`), and the call
    returns by then; `wait(event, timeout)` blocks until the event is set or the timeout
    (a fake clock's advances it); where `spawn` cannot start a thread (a pids limit),
    fewer reads run at once, and with none running that read fails."""
    urls = list(urls)
    readings: dict[int, Reading] = {}
    landed: dict[int, float] = {}
    lock, progress = threading.Lock(), threading.Event()
    started, max_parallel = 0, max(1, max_parallel)

    def run(index: int, timeout: float) -> None:
        try:
            reading = read_one(urls[index], timeout)
        except Exception as exc:  # a reader that raised: a bug, not a reason to crash the hook
            reading = Reading.failed(Verdict.UNKNOWN, f"unexpected {type(exc).__name__}", 0.0)
        with lock:
            readings[index] = reading
            landed[index] = clock()
        progress.set()

    while True:
        progress.clear()  # before looking, so a result that lands after is not missed
        with lock:
            done = len(readings)
        left = until - clock()
        if done == len(urls) or left <= 0:
            break
        while started < len(urls) and started - done < max_parallel:
            index, timeout = started, min(read_timeout, left)
            try:
                spawn(functools.partial(run, index, timeout), f"drainhook-discover-{index}")
            except RuntimeError as exc:  # "can't start new thread"
                if started - done > 0:
                    max_parallel = started - done  # wait for one to end, then go on
                    break
                with lock:
                    readings[index] = Reading.failed(Verdict.UNKNOWN, f"no thread: {exc}", 0.0)
                done += 1
            started += 1
        if started - done > 0:
            wait(progress, left)

    with lock:
        tried = tuple(Tried(urls[i], readings.get(i), landed.get(i)) for i in range(started))
    found = tuple(t for t in tried if t.reading is not None and is_engine(t.reading))
    return Discovery(found, tried, tuple(urls[started:]), left_out)


def search(
    reader_for: Callable[[str], TargetReader],
    *,
    read_timeout: float,
    until: float,
    scheme: str = "http",
    path: str = "/metrics",
    exclude: Iterable[tuple[str, int]] = (),
    clock: Callable[[], float] = time.monotonic,
    is_engine: Callable[[Reading], bool] = names_engine,
    listeners: Callable[[], Iterable[Listener]] = read_listeners,
) -> Discovery:
    """Listener discovery whole: list this namespace's listeners, read each once (but
    the `exclude`d (host, port) pairs, already tried) through `reader_for(url)`'s
    reader (closed after its read, or abandoned with its thread), keep the engines'."""
    planned = candidates(listeners(), exclude=exclude)

    def read_one(url: str, timeout: float) -> Reading:
        reader = reader_for(url)
        try:
            return reader.read(timeout)
        finally:
            reader.close()

    return read_candidates(
        planned.urls(scheme, path),
        read_one,
        read_timeout=read_timeout,
        until=until,
        clock=clock,
        is_engine=is_engine,
        left_out=tuple(e.url(scheme, path) for e in planned.left_out),
    )


@dataclass(frozen=True)
class SearchRecord:
    """One search as the hook ran it: the configured targets (as shown), what
    it found, and when it started and ended (on the reader's clock)."""

    configured: tuple[str, ...]
    discovery: Discovery
    started: float
    ended: float

    @property
    def found(self) -> tuple[str, ...]:
        return tuple(t.url for t in self.discovery.found)

    @property
    def found_after(self) -> float | None:
        """Seconds from the search's start to the first engine's answer."""
        times = [t.at for t in self.discovery.found if t.at is not None]
        return min(times) - self.started if times else None
