"""How the engine's count is read: the targets, the source and each read's own
limits (CONTRACT §2, §2a), as one frozen value built at the edge."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from drainhook.engines.gauges import LOADS, EngineChoice
from drainhook.errors import UsageError
from drainhook.reading.target import IPVS_DUMMY, Scheme, Target, held_by

DEFAULT_READ_TIMEOUT = 1.0
DEFAULT_MAX_BODY = 16 * 1024 * 1024
DEFAULT_SCHEME: Scheme = "http"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PATH = "/metrics"
LOADS_PATH = LOADS.path  # SGLang's per-DP-rank load report (--source loads, auto)
# --source: "both" is probe's (the two side by side); wait reads one.
Source = Literal["auto", "metrics", "loads", "both"]
DEFAULT_SOURCE: Source = "auto"


@dataclass(frozen=True)
class ReadConfig:
    """How to read the engine's count: the targets, what to count there (source,
    engine), and each read itself (its
    timeout, the body cap, TLS, the API key); `check` holds the loopback rule."""

    target: Target
    engine: EngineChoice = "auto"
    more: tuple[Target, ...] = ()  # further targets, read and summed with the first
    # "auto": /metrics, and SGLang's GET /v1/loads beside it when the body is
    # SGLang's (drainhook.reading.sources); "metrics" or "loads": that one only.
    source: Source = DEFAULT_SOURCE
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
    # The connection signal (CONTRACT §2a) for targets in the Pod: the serving
    # port's connections, read from the network namespace after each read.
    connections: bool = True
    # Read the side signals (vLLM's /load, the connections) on every read, not
    # only on one the scheduler's count says is idle (the only reads they can
    # change: the count is the largest signal). `probe` does, to show each.
    every_signal: bool = False

    @property
    def targets(self) -> tuple[Target, ...]:
        return (self.target, *self.more)

    @property
    def display(self) -> str:
        """The targets as shown (no userinfo), comma-separated."""
        return ",".join(t.display for t in self.targets)

    def check(self) -> None:
        for target in self.targets:
            if not (self.allow_remote or target.is_loopback) and held_by(target.host) == IPVS_DUMMY:
                raise UsageError(
                    f"{target.display} is a Service's ClusterIP, which kube-proxy (IPVS "
                    f"mode) binds to {IPVS_DUMMY} here: a read there lands on whichever "
                    "replica the Service picks; point --host at 127.0.0.1, or at the "
                    "Pod's own IP (status.podIP) for an engine bound to it alone"
                )
            if not self.allow_remote and not target.in_pod:
                raise UsageError(
                    f"{target.display} is neither loopback nor an address of this Pod; a read "
                    "through a Service lands on whichever replica answers (use "
                    "--allow-remote to override)"
                )
        if self.source == "loads" and self.engine == "vllm":
            raise UsageError("--source loads is SGLang's /v1/loads: it cannot read vLLM")
        shown = [t.display for t in self.targets]
        if len(set(shown)) != len(shown):
            raise UsageError("a target is given twice: it would be counted twice")
        if self.max_body < 1:
            raise UsageError("--max-body must be at least 1 byte")
        positive("--read-timeout", self.read_timeout)


def positive(flag: str, value: float) -> None:
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{flag} must be a finite number of seconds > 0, not {value}")
    if value < sys.float_info.min:  # subnormal: it underflowed, and 1/value overflows
        raise UsageError(f"{flag} is too small to be a number of seconds: {value}")
