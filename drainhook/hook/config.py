"""The hook's configuration (CONTRACT §1, §4): defaults, one frozen value, validation;
the CLI builds it, and nothing below the CLI reads flags or the environment."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from drainhook.errors import UsageError

# G, R and the exit allowance live with the fail-safe, which reads them without this module.
from drainhook.failsafe import DEFAULT_EXIT_RESERVE as DEFAULT_EXIT_RESERVE
from drainhook.failsafe import DEFAULT_GRACE as DEFAULT_GRACE
from drainhook.failsafe import EXIT_ALLOWANCE as EXIT_ALLOWANCE
from drainhook.reading.config import ReadConfig, positive

# A flag's value as its click type converted it (click's own signatures say Any; the
# closed sets are the Literal types click's choices come from): the command line's
# params, and plan's wait_config, which takes them by name.
Parsed = Any
LogFormat = Literal["text", "json"]
LogReads = Literal["changes", "all"]
DEFAULT_SETTLE = 5.0
DEFAULT_INTERVAL = 1.0
DEFAULT_CONFIRM = 2
DEFAULT_LINGER = 0.0
# W of CONTRACT §2b (--stall-after): longer than a healthy engine's longest flat
# stretch, under the engines' own watchdogs (docs/design.md, §2b, has the numbers).
DEFAULT_STALL_AFTER = 120.0


@dataclass(frozen=True)
class Timeline:
    """Seconds from t0 (the hook's start): settle S, deadline D, and the read cadence."""

    settle: float
    deadline: float
    interval: float
    read_timeout: float
    confirm: int = 2
    linger: float = 0.0


@dataclass(frozen=True)
class TerminationLog:
    """Where the line goes; `create`: make the file if it is missing (a path given
    explicitly), or not (the default, used only when it exists)."""

    path: Path
    create: bool


@dataclass(frozen=True)
class WaitConfig:
    """Everything `drainhook wait` needs, read once at the edge."""

    reach: ReadConfig
    grace: float = DEFAULT_GRACE
    settle: float = DEFAULT_SETTLE
    exit_reserve: float = DEFAULT_EXIT_RESERVE
    interval: float = DEFAULT_INTERVAL
    confirm: int = DEFAULT_CONFIRM
    linger: float = DEFAULT_LINGER
    max_wait: float | None = None
    log_format: LogFormat = "text"
    log_reads: LogReads = "changes"  # a read line when something changed; "all": every read
    log_file: Path | None = None
    exit_zero: bool = False
    quiet: bool = False
    termination_log: TerminationLog | None = None  # the outcome's line for the Pod's status
    # W (CONTRACT §2b): None is the default (DEFAULT_STALL_AFTER); 0 turns it off.
    stall_after: float | None = None

    @property
    def stall_window(self) -> float:
        """W in seconds (0: no stall detection)."""
        return DEFAULT_STALL_AFTER if self.stall_after is None else self.stall_after

    @property
    def deadline(self) -> float:
        """D = min(G - R, max-wait), never before t0."""
        d = self.grace - self.exit_reserve
        if self.max_wait is not None:
            d = min(d, self.max_wait)
        return max(0.0, d)

    def timeline(self) -> Timeline:
        return Timeline(
            settle=self.settle,
            deadline=max(0.0, self.deadline - EXIT_ALLOWANCE),
            interval=self.interval,
            read_timeout=self.reach.read_timeout,
            confirm=self.confirm,
            linger=self.linger,
        )

    def check(self) -> None:
        if self.reach.source == "both":
            raise UsageError("--source both is for probe: wait reads one source")
        self.reach.check()
        for flag, value in (
            ("--grace", self.grace),
            ("--settle", self.settle),
            ("--exit-reserve", self.exit_reserve),
            ("--linger", self.linger),
        ):
            _not_negative(flag, value)
        positive("--interval", self.interval)
        if self.max_wait is not None:
            _not_negative("--max-wait", self.max_wait)
        if self.stall_after is not None:
            _not_negative("--stall-after", self.stall_after)
        if self.confirm < 1:
            raise UsageError("--confirm must be at least 1")


def _not_negative(flag: str, value: float) -> None:
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"{flag} must be a finite number of seconds >= 0, not {value}")
