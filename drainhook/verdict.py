"""What one read of /metrics concluded (CONTRACT §2)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Verdict(str, enum.Enum):
    """Exactly one per read."""

    IDLE = "idle"
    BUSY = "busy"
    UNKNOWN = "unknown"
    UNREACHABLE = "unreachable"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Series:
    """One counted sample: canonical gauge name, labels as written, value."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


@dataclass(frozen=True)
class Scan:
    """What a body says: the verdict of a 2xx body (idle, busy or unknown)."""

    verdict: Verdict
    engine: str | None
    in_flight: float | None
    series: tuple[Series, ...] = ()
    reason: str | None = None
    warnings: tuple[str, ...] = ()  # shapes that usually mean trouble (shown by probe)


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

    @classmethod
    def from_scan(cls, scan: Scan, read_ms: float) -> Reading:
        return cls(
            scan.verdict,
            scan.engine,
            scan.in_flight,
            scan.series,
            scan.reason,
            read_ms,
            scan.warnings,
        )

    @classmethod
    def failed(cls, verdict: Verdict, reason: str, read_ms: float) -> Reading:
        return cls(verdict, None, None, (), reason, read_ms)
