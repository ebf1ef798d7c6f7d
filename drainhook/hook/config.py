"""The hook's configuration (CONTRACT §1, §4): defaults, one frozen value, validation;
the CLI builds it, and nothing below the CLI reads flags or the environment."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from drainhook import failsafe
from drainhook.errors import UsageError

# G, R and the exit allowance live with the fail-safe, which reads them without this module.
from drainhook.failsafe import DEFAULT_EXIT_RESERVE as DEFAULT_EXIT_RESERVE
from drainhook.failsafe import DEFAULT_GRACE as DEFAULT_GRACE
from drainhook.failsafe import EXIT_ALLOWANCE as EXIT_ALLOWANCE
from drainhook.reading.config import DEFAULT_READ_TIMEOUT, ReadConfig, positive

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
class Flag:
    """One flag of the timeline (CONTRACT §1, §4), written once: `name` is its click
    parameter, its field (WaitConfig's, or its ReadConfig's: `reach`), plan's
    wait_config keyword and its JSON key; the flag, `--name` with dashes, reads
    DRAINHOOK_NAME too. `kind` types it; `default` None: unset, standing for `unset`
    (stall_after's 120 s, said in --help and in plan's JSON)."""

    name: str
    kind: Literal["seconds", "count", "engine"]
    default: float | int | str | None
    help: str
    reach: bool = False
    unset: float | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def of(self, config: WaitConfig) -> Any:
        """This flag's value in config (unset: None)."""
        return getattr(config.reach if self.reach else config, self.name)


# The timeline's flags, in the order the preStop command and --help give them.
TIMELINE: tuple[Flag, ...] = (
    Flag("grace", "seconds", DEFAULT_GRACE, "G: the Pod's terminationGracePeriodSeconds."),
    Flag(
        "settle",
        "seconds",
        DEFAULT_SETTLE,
        "S: keep serving untouched this long while routers drop the Pod.",
    ),
    Flag(
        "exit_reserve",
        "seconds",
        DEFAULT_EXIT_RESERVE,
        "R: return by G - R, leaving the engine this long to exit.",
    ),
    Flag(
        "interval",
        "seconds",
        DEFAULT_INTERVAL,
        "I: seconds between reads (I/4 while the work drains, and for the confirming "
        "read when the server's count or connections read the zero).",
    ),
    Flag(
        "read_timeout", "seconds", DEFAULT_READ_TIMEOUT, "Bound on one whole read, seconds.", True
    ),
    Flag(
        "linger",
        "seconds",
        DEFAULT_LINGER,
        "Hold this long after idle is confirmed (clipped to the deadline).",
    ),
    Flag("confirm", "count", DEFAULT_CONFIRM, "Consecutive idle reads that confirm the drain."),
    Flag(
        "max_wait",
        "seconds",
        None,
        "Cap on the wait from the hook's start: D = min(G - R, max-wait).",
    ),
    Flag(
        "stall_after",
        "seconds",
        None,
        "W: return `stalled` (exit 5) when the engine reports work and none of its "
        "progress counters has moved for this long; 0 turns it off",
        unset=DEFAULT_STALL_AFTER,
    ),
    Flag("engine", "engine", "auto", "Engine whose gauges count; auto recognises it.", True),
)


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
    grace_default: bool = False  # neither --grace nor its variable gave G (the start line)

    @property
    def stall_window(self) -> float:
        """W in seconds (0: no stall detection)."""
        return DEFAULT_STALL_AFTER if self.stall_after is None else self.stall_after

    @property
    def deadline(self) -> float:
        """D = min(G - R, max-wait), never before t0 (failsafe.deadline: D's rule)."""
        return failsafe.deadline(self.grace, self.exit_reserve, self.max_wait)

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
