"""Numbers as drainhook writes them, in every command's text and JSON: a whole
number without a fraction (`30`), any other exactly in Python's shortest
round-trip form (`1234567.5`, never `:g`'s `1.23457e+06`), `nan`/`inf` as Python
spells them, a missing one as `-`."""

from __future__ import annotations

import math


def number(value: float) -> str:
    """A number as a flag value or in a sentence: `30`, `0.5`, `1234567.5`."""
    if not math.isfinite(value):
        return repr(float(value))
    return str(int(value)) if value == int(value) else repr(value)


def shown(value: float | None) -> str:
    """A number in a log line or a table: `number`, or `-` when there is none."""
    return "-" if value is None else number(value)


def seconds(value: float) -> str:
    """Seconds for a person: `30s`, `0.5s`."""
    return number(value) + "s"


def json_number(value: float | None) -> int | float | None:
    """A number for JSON: an int when whole (3, not 3.0), else as it is; None stays."""
    if value is None or not math.isfinite(value):
        return value
    return int(value) if value == int(value) else value
