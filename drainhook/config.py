"""The hook's configuration: defaults, one frozen value, validation (CONTRACT §1, §4).

The CLI builds a `WaitConfig` from flags, environment and the annotations
file; nothing below the CLI reads any of those.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from drainhook.drain import Timeline
from drainhook.errors import UsageError
from drainhook.target import Target
from drainhook.termination import TerminationLog

DEFAULT_GRACE = 30.0  # terminationGracePeriodSeconds when unset
DEFAULT_SETTLE = 5.0
DEFAULT_EXIT_RESERVE = 5.0
DEFAULT_INTERVAL = 1.0
DEFAULT_READ_TIMEOUT = 1.0
DEFAULT_CONFIRM = 2
DEFAULT_LINGER = 0.0
DEFAULT_MAX_BODY = 16 * 1024 * 1024
# W of CONTRACT §2b (--stall-after): longer than a healthy engine's longest flat
# stretch (a 128k-token prefill with nothing else decoding, on vLLM: about 95 s
# on 4 A100s), well under the engines' own 300 s watchdogs; docs/design.md (§2b) has the
# arithmetic.
DEFAULT_STALL_AFTER = 120.0
# The hook's process must be gone by D as the kubelet sees it (it sends SIGTERM
# when the process ends): the loop ends this much before D, for the termination
# message, the summary line and the exit itself (measured 1-5 ms after the loop
# returns; the rest is margin for a busy node). Logged deadlines stay D.
EXIT_ALLOWANCE = 0.02
DEFAULT_SCHEME = "http"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PATH = "/metrics"
LOADS_PATH = "/v1/loads"  # SGLang's per-DP-rank load report (--source loads, auto)
DEFAULT_SOURCE = "auto"
# Set by Kubernetes in every container: where it is, listener discovery is on
# by default (CONTRACT §2a). Read by the CLI, the edge; nothing below it.
IN_POD_VARIABLE = "KUBERNETES_SERVICE_HOST"


@dataclass(frozen=True)
class ReadConfig:
    """How to read the engine's count: the targets, what to count there (source,
    engine), listener discovery when they refuse, and each read itself (its
    timeout, the body cap, TLS, the API key); `check` holds the loopback rule."""

    target: Target
    engine: str = "auto"
    more: tuple[Target, ...] = ()  # further targets, read and summed with the first
    # "auto": /metrics, and SGLang's GET /v1/loads beside it when the body is
    # SGLang's (drainhook.sources); "metrics" or "loads": that one only.
    source: str = DEFAULT_SOURCE
    # Listener discovery (CONTRACT §2a) when every target refuses: on by
    # default inside a Pod only (the CLI decides; off for a config built in code).
    discover: bool = False
    api_key: str | None = field(default=None, repr=False)  # never shown
    max_body: int = DEFAULT_MAX_BODY
    read_timeout: float = DEFAULT_READ_TIMEOUT
    cacert: Path | None = None
    tls_server_name: str | None = None
    insecure: bool = False
    allow_remote: bool = False
    # Read the progress counters (CONTRACT §2b): `wait` turns it off when its
    # stall window cannot close before D; probe always reads them.
    progress: bool = True

    @property
    def targets(self) -> tuple[Target, ...]:
        return (self.target, *self.more)

    @property
    def display(self) -> str:
        """The targets as shown (no userinfo), comma-separated."""
        return ",".join(t.display for t in self.targets)

    def check(self) -> None:
        for target in self.targets:
            if not target.is_loopback and not self.allow_remote:
                raise UsageError(
                    f"{target.display} is not a loopback address; a read through a Service "
                    "lands on whichever replica answers (use --allow-remote to override)"
                )
        if self.source == "loads" and self.engine == "vllm":
            raise UsageError("--source loads is SGLang's /v1/loads: it cannot read vLLM")
        shown = [t.display for t in self.targets]
        if len(set(shown)) != len(shown):
            raise UsageError("a target is given twice: it would be counted twice")
        if self.max_body < 1:
            raise UsageError("--max-body must be at least 1 byte")
        _positive("--read-timeout", self.read_timeout)


# The former name of ReadConfig, kept while work begun under it moves over.
Reach = ReadConfig


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
    log_format: str = "text"
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
        _positive("--interval", self.interval)
        if self.max_wait is not None:
            _not_negative("--max-wait", self.max_wait)
        if self.stall_after is not None:
            _not_negative("--stall-after", self.stall_after)
        if self.confirm < 1:
            raise UsageError("--confirm must be at least 1")


def _not_negative(flag: str, value: float) -> None:
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"{flag} must be a finite number of seconds >= 0, not {value}")


def _positive(flag: str, value: float) -> None:
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{flag} must be a finite number of seconds > 0, not {value}")
