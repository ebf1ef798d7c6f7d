"""What one cell (a recipe in a scenario, or one replica of a rollout) measured.

All times in a `Cell` are seconds from the delete, as measured (real seconds
times the scale); `grace` and `shutdown_timeout` are the recipe's, in real
seconds. A cell crosses from its network namespace to the runner as JSON.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from rehearsal.timeline import VLLM_LISTENER_CLOSE


@dataclass(frozen=True)
class Request:
    id: str
    sent: float
    first: float | None
    end: float
    outcome: str
    last: float | None = None  # its last event (a stalled stream: long before its end)


@dataclass(frozen=True)
class Read:
    start: float
    end: float | None  # None: never answered
    total: int | None


@dataclass
class Cell:
    """The outcome of one recipe in one scenario (or one replica of a rollout)."""

    strategy: str
    scenario: str
    scale: float
    completed: int
    cut: int
    refused: int
    router_lag: float
    sigterm_at_s: float
    held_s: float
    hook_returned_s: float | None
    hook_exit: int | None
    sigkill: bool
    reads: int
    grace: float = 30.0
    shutdown_timeout: float = 0.0
    replica: int | None = None
    netns: int = 0  # the inode of the network namespace it ran in
    late_s: float = 0.0  # how much later than planned the delete came (a loaded machine)
    stalled: int = 0  # of the cut: streams still open when the engine was killed (vLLM's stall)
    hook_log: str = ""
    requests: list[Request] = field(default_factory=list)
    read_log: list[Read] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        """The cell as one JSON object (`--json`)."""
        return {
            "strategy": self.strategy,
            "scenario": self.scenario,
            "completed": self.completed,
            "cut": self.cut,
            "refused": self.refused,
            "sigterm_at_s": round(self.sigterm_at_s, 4),
            "held_s": round(self.held_s, 4),
            "scale": self.scale,
            "router_lag_s": self.router_lag,
            "hook_returned_s": None
            if self.hook_returned_s is None
            else round(self.hook_returned_s, 4),
            "hook_exit": self.hook_exit,
            "engine_exit": "sigkill" if self.sigkill else "clean",
            "reads": self.reads,
            "hook_elapsed_s": self.hook_elapsed(),
            "grace_s": self.grace,
            "shutdown_timeout_s": self.shutdown_timeout,
            "netns": self.netns,
            "late_s": round(self.late_s, 4),
            "stalled": self.stalled,
            "slipped": len(self.slipped()),
        }

    def last_idle_read(self) -> float | None:
        """When the last read that found the engine idle started (None: none did)."""
        idle = [r.start for r in self.read_log if r.total == 0 and r.end is not None]
        return max(idle) if idle else None

    def slipped(self) -> list[Request]:
        """Requests sent after the idle read a hook released on began and before vLLM's
        listener closed (0.25 s after SIGTERM): work the hook could not see coming. Only
        for a hook that returned 0 (drained) after reading."""
        last = self.last_idle_read()
        if last is None or self.hook_exit != 0:
            return []
        door = self.sigterm_at_s + VLLM_LISTENER_CLOSE * self.scale
        return [r for r in self.requests if last <= r.sent <= door]

    def hook_elapsed(self) -> float | None:
        """drainhook's own `elapsed` (its summary line: from its process start to its return)."""
        for line in reversed(self.hook_log.splitlines()):
            if line.startswith("drainhook outcome="):
                for part in line.split():
                    if part.startswith("elapsed="):
                        return float(part.split("=", 1)[1])
        return None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Cell:
        data = dict(data)
        data["requests"] = [Request(**r) for r in data.get("requests", [])]
        data["read_log"] = [Read(**r) for r in data.get("read_log", [])]
        return cls(**data)
