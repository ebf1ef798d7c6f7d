"""Where and how to read. `TargetReader` is the seam between the readers: one GET
(read.Reader), one target's signals (sources.EngineReader), several targets as one
(rounds.Round), and a refusal shown to be the engine gone (assemble.ShownGone)."""

from __future__ import annotations

from typing import Protocol

from drainhook.engines.verdict import Reading


class TargetReader(Protocol):
    """What a round needs of one target's reader (drainhook.reading.read.Reader)."""

    @property
    def name(self) -> str: ...

    def read(self, left: float) -> Reading: ...

    def close(self) -> None: ...
