"""Where and how to read: targets, one HTTP read under its deadline, rounds,
sources, discovery. `TargetReader` is the seam between them: a read of one
target (drainhook.reading.read.Reader), several as one (rounds.Round), SGLang's
two sources (sources.AutoSource), or the search (discovery.search)."""

from __future__ import annotations

from typing import Protocol

from drainhook.engines.verdict import Reading


class TargetReader(Protocol):
    """What a round needs of one target's reader (drainhook.reading.read.Reader)."""

    @property
    def name(self) -> str: ...

    def read(self, timeout: float) -> Reading: ...

    def close(self) -> None: ...
