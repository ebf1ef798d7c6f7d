"""What one read concluded (CONTRACT §2), and the one rule from counted values to
a verdict that /metrics, /v1/loads and several targets all follow."""

from __future__ import annotations

import enum
import math
import mmap
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

# A body as the readers hold it and the scanners read it (an mmap: read.py says why).
Body = bytes | bytearray | mmap.mmap


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
    # Unreachable because the connection was refused (every target's, for a round):
    # the one failure that sends the hook looking for the engine (CONTRACT §2a).
    refused: bool = False
    status: int | None = None  # the HTTP status of a non-2xx answer
    # The progress counters and external waiting of the body (CONTRACT §2b);
    # with several targets each part has its own and this one is None.
    progress: Progress | None = None

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
        )

    @classmethod
    def failed(
        cls,
        verdict: Verdict,
        reason: str,
        read_ms: float,
        *,
        source: str | None = None,
        refused: bool = False,
        status: int | None = None,
    ) -> Reading:
        return cls(
            verdict, None, None, (), reason, read_ms, source=source, refused=refused, status=status
        )

    @property
    def counted(self) -> bool:
        """Whether the read gave a count (idle or busy)."""
        return self.verdict is Verdict.IDLE or self.verdict is Verdict.BUSY

    def per_target(self) -> tuple[tuple[str, Reading], ...]:
        """Each target's own reading by its display URL; a one-target read is its
        own only part, named ""."""
        return self.parts or (("", self),)


def engine_shown(reading: Reading, engine: str = "auto") -> str | None:
    """The engine a reading shows, as `--engine` recognises one (the one
    pinned-engine rule). With `auto` the scanner names an engine only when its
    gauges are in the body; a pinned engine's scanner names that engine for any
    2xx body (a sidecar's too, as `unknown`), so there the reading shows it only
    when at least one of its counted series was read."""
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
