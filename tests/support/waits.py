"""Waiting on a condition, not a clock."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def until(read: Callable[[], T], done: Callable[[T], object] = bool, within: float = 5.0) -> T:
    """Read until `done` holds of what was read (by default: it is true); that reading.
    Polled every 5 ms; fails after `within` seconds."""
    give_up = time.monotonic() + within
    while not done(got := read()):
        assert time.monotonic() < give_up, f"timed out at {got!r}"  # exact: a poll's give-up
        time.sleep(0.005)
    return got
