"""A fake clock for the drain loop: `now` moves only when the loop sleeps."""

from __future__ import annotations


class Clock:
    """Call it for the time; its `sleep` advances the time by what was asked."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0, f"slept {seconds}"
        self.now += seconds
