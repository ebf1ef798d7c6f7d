"""The drain strategies compared: what the kubelet runs as the container's preStop.

Each is either nothing, the kubelet's own sleep action (no process), or an
exec hook: a real command the kubelet emulator starts in its own process group.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from rehearsal.timeline import (
    EXIT_RESERVE,
    GRACE,
    INTERVAL,
    READ_TIMEOUT,
    SETTLE,
    Scale,
)

HOOKS = Path(__file__).resolve().parent / "hooks"
LOOP_PERIOD = 5.0  # the shell loop's sleep
CURL = shutil.which("curl")


@dataclass(frozen=True)
class HookTarget:
    """What a hook is pointed at, for one cell."""

    url: str
    scale: Scale


@dataclass(frozen=True)
class Strategy:
    key: str
    label: str
    what: str
    kind: str  # none | sleep | exec
    sleep: float = 0.0  # real seconds, for the kubelet's sleep action

    def command(self, target: HookTarget) -> list[str]:
        """The exec hook's argv (empty for none and sleep)."""
        f = target.scale
        if self.key == "sleep-15":
            return ["sleep", f.flag(15.0)]
        if self.key == "curl-loop":
            if CURL:
                return ["bash", str(HOOKS / "curl_loop.sh"), target.url, f.flag(LOOP_PERIOD)]
            return [sys.executable, str(HOOKS / "curl_loop.py"), target.url, f.flag(LOOP_PERIOD)]
        if self.key == "poll-script":
            timing = [GRACE, EXIT_RESERVE, INTERVAL, READ_TIMEOUT]
            return [sys.executable, str(HOOKS / "poll.py"), target.url, *map(f.flag, timing)]
        if self.key == "drainhook":
            return [sys.executable, "-m", "drainhook", "wait", "--url", target.url, *_timing(f)]
        return []


def _timing(f: Scale) -> list[str]:
    """drainhook's timeline flags, scaled; none at all at --scale 1 (its real defaults)."""
    if f.factor == 1.0:
        return []
    flags = {
        "--grace": GRACE,
        "--settle": SETTLE,
        "--exit-reserve": EXIT_RESERVE,
        "--interval": INTERVAL,
        "--read-timeout": READ_TIMEOUT,
    }
    return [arg for name, value in flags.items() for arg in (name, f.flag(value))]


STRATEGIES: tuple[Strategy, ...] = (
    Strategy("none", "no hook", "SIGTERM at the delete.", "none"),
    Strategy(
        "sleep-5",
        "sleep 5",
        "The kubelet's sleep action, 5 s (no process in the container).",
        "sleep",
        sleep=5.0,
    ),
    Strategy("sleep-15", "sleep 15", "exec `sleep 15`.", "exec"),
    Strategy(
        "curl-loop",
        "curl loop",
        "bash: curl /metrics, grep -m1 each vLLM gauge, compare to 0.0, sleep 5; "
        "no deadline, no curl timeout.",
        "exec",
    ),
    Strategy(
        "poll-script",
        "poll script",
        "Reads every 1 s, returns on the 2nd idle read, stops reading at G - 5 with 1 s "
        "read timeouts; a body without the gauges is idle; sums negative values; no settle.",
        "exec",
    ),
    Strategy(
        "drainhook", "drainhook", "`drainhook wait` with its defaults (S 5, I 1, R 5).", "exec"
    ),
)

BY_KEY = {s.key: s for s in STRATEGIES}
