"""What one read concluded (CONTRACT §2), and the one rule from counted values to
a verdict that /metrics, /v1/loads and several targets all follow."""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

# A body as the readers hold it and the scanners read it.
Body = bytes | bytearray


class Verdict(str, enum.Enum):
    """Exactly one per read."""

    IDLE = "idle"
    BUSY = "busy"
    UNKNOWN = "unknown"
    UNREACHABLE = "unreachable"

    def __str__(self) -> str:
        return self.value


def value_problem(name: str, value: float) -> str | None:
    """Why one counted value cannot be counted (NaN, infinite, negative), or None."""
    if math.isnan(value) or math.isinf(value):
        return f"{name} is {value}"
    if value < 0:
        return f"{name} is negative ({value:g})"
    return None


def count(values: Iterable[float]) -> tuple[Verdict, float | None, str | None]:
    """Counted values (each already checked) to (verdict, total, reason): busy
    when the total is > 0, else idle; unknown when the sum is not finite
    (finite values of 1e308 each whose sum is not)."""
    try:
        total = math.fsum(values)
    except (OverflowError, ValueError):  # ValueError: inf and -inf in one sum
        total = math.inf
    if not math.isfinite(total):
        return Verdict.UNKNOWN, None, "counted total is not finite"
    return (Verdict.BUSY if total > 0 else Verdict.IDLE), total, None


@dataclass(frozen=True)
class Series:
    """One counted sample: canonical gauge name, labels as written, value."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


@dataclass(frozen=True)
class Progress:
    """What a body says of the engine's progress (CONTRACT §2b): its progress
    counters as read, and how much of the counted work it reports as waiting on
    something outside the engine (a KV transfer, a grammar compilation)."""

    counters: tuple[Series, ...] = ()
    external: float = 0.0


# The signals of CONTRACT §2a, by the name the log, `probe` and its JSON give them.
SCHEDULER, SERVER, CONNECTIONS = "scheduler", "server", "connections"


@dataclass(frozen=True)
class Signals:
    """Each signal's own count of one read (CONTRACT §2a: `scheduler`, `server`,
    `connections`); None where the target does not answer it (missing: the others
    decide). Each is a lower bound of the requests held, so the count is the largest."""

    scheduler: float | None = None
    server: float | None = None
    connections: float | None = None
    # Why a signal is missing, as (its name, the reason): what `wait` logs once.
    missing: tuple[tuple[str, str], ...] = ()

    def count(self) -> float | None:
        """The target's count: the largest signal answered (None: none was)."""
        values = [v for v in (self.scheduler, self.server, self.connections) if v is not None]
        return max(values) if values else None

    def holding(self) -> tuple[str, ...]:
        """The signals that read work (> 0), by name: which held the hook."""
        named = (
            (SCHEDULER, self.scheduler),
            (SERVER, self.server),
            (CONNECTIONS, self.connections),
        )
        return tuple(n for n, v in named if v is not None and v > 0)

    def plus(self, other: Signals) -> Signals:
        """Two targets' signals as one round's: each signal summed where answered."""

        def add(a: float | None, b: float | None) -> float | None:
            return b if a is None else a if b is None else a + b

        return Signals(
            add(self.scheduler, other.scheduler),
            add(self.server, other.server),
            add(self.connections, other.connections),
            self.missing + tuple(m for m in other.missing if m not in self.missing),
        )

    def without(self, name: str, why: str) -> Signals:
        """These signals with `name` missing, for `why`."""
        missing = (*tuple(m for m in self.missing if m[0] != name), (name, why))
        return dataclasses.replace(self, **{name: None}, missing=missing)


@dataclass(frozen=True)
class Scan:
    """What a body says: the verdict of a 2xx body (idle, busy or unknown)."""

    verdict: Verdict
    engine: str | None
    in_flight: float | None
    series: tuple[Series, ...] = ()
    reason: str | None = None
    warnings: tuple[str, ...] = ()  # shapes that usually mean trouble (shown by probe)
    progress: Progress | None = None  # None: none could be read (a bad line)
    signals: Signals | None = None  # each signal's count (CONTRACT §2a); None: unknown


@dataclass(frozen=True)
class Reading:
    """One whole read: the scan of its body, or why there was none, and its duration."""

    verdict: Verdict
    engine: str | None
    in_flight: float | None
    series: tuple[Series, ...]
    reason: str | None
    read_ms: float
    warnings: tuple[str, ...] = ()
    # With several targets: each target's own reading, by its display URL.
    parts: tuple[tuple[str, Reading], ...] = ()
    # What was counted: "metrics" (/metrics) or "loads" (SGLang's /v1/loads);
    # with several targets that counted different ones, "mixed".
    source: str | None = None
    status: int | None = None  # the HTTP status of a non-2xx answer
    # The progress counters and external waiting of the body (CONTRACT §2b);
    # with several targets each part has its own and this one is None.
    progress: Progress | None = None
    # Each signal's own count (CONTRACT §2a); in_flight is their combination.
    signals: Signals | None = None

    @classmethod
    def from_scan(cls, scan: Scan, read_ms: float, source: str | None = None) -> Reading:
        return cls(
            scan.verdict,
            scan.engine,
            scan.in_flight,
            scan.series,
            scan.reason,
            read_ms,
            scan.warnings,
            source=source,
            progress=scan.progress,
            signals=scan.signals,
        )

    @classmethod
    def failed(
        cls,
        verdict: Verdict,
        reason: str,
        read_ms: float,
        *,
        source: str | None = None,
        status: int | None = None,
    ) -> Reading:
        return cls(verdict, None, None, (), reason, read_ms, source=source, status=status)

    @property
    def counted(self) -> bool:
        """Whether the read gave a count (idle or busy)."""
        return self.verdict is Verdict.IDLE or self.verdict is Verdict.BUSY

    def per_target(self) -> tuple[tuple[str, Reading], ...]:
        """Each target's own reading by its display URL; a one-target read is its
        own only part, named ""."""
        return self.parts or (("", self),)

    @property
    def scheduler(self) -> float | None:
        """The scheduler's own count: the work that can stall (CONTRACT §2b); the
        whole count where the read carries no signals apart."""
        if self.signals is not None and self.signals.scheduler is not None:
            return self.signals.scheduler
        return self.in_flight


_Counted = TypeVar("_Counted", Scan, Reading)


def with_signals(reading: _Counted, signals: Signals) -> _Counted:
    """The reading (or scan) with these signals, its count and verdict by CONTRACT
    §2a's rule (the largest signal; idle only when every signal answered reads 0).
    One without a count (unknown, unreachable) keeps its verdict: doubt stays doubt."""
    if reading.verdict not in (Verdict.IDLE, Verdict.BUSY):
        return dataclasses.replace(reading, signals=signals)
    total = signals.count()
    verdict = Verdict.BUSY if total is not None and total > 0 else Verdict.IDLE
    return dataclasses.replace(reading, verdict=verdict, in_flight=total, signals=signals)


def engine_shown(reading: Reading, engine: str = "auto") -> str | None:
    """The engine a reading shows, as `--engine` recognises one: a pinned engine's scanner
    names it for any 2xx body (a sidecar's too), so then only with a counted series read."""
    if reading.engine is None or (engine != "auto" and not reading.series):
        return None
    return reading.engine


class Scanner(Protocol):
    """What a Reader needs of a scanner: the Accept header of its format, the
    source it reads (`metrics`, `loads`), and a 2xx body to its Scan, ending by
    `until` on `clock`'s scale."""

    @property
    def accept(self) -> str: ...

    @property
    def source(self) -> str: ...

    def __call__(self, body: Body, *, until: float, clock: Callable[[], float]) -> Scan: ...


def cut_json(body: Body) -> bool:
    """Whether a 2xx body that does not parse as JSON is an engine's answer cut short
    (empty, a 204, a close mid-body on HTTP/1.0: it starts as JSON does), not
    another server's page (CONTRACT §2a: doubt, not missing)."""
    return bytes(body[:64]).lstrip()[:1] in (b"", b"{", b"[")
