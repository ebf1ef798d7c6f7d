"""Numbers as drainhook writes them: one rule for every command's text and JSON.

A whole number is written without a fraction (`30`, not `30.0`); any other
is written exactly, as Python's shortest round-trip form (`0.5`, `1234567.5`),
never rounded (`:g` would print 1234567.5 as `1.23457e+06`).
"""

from __future__ import annotations


def number(value: float) -> str:
    """A number as a flag value or in a sentence: `30`, `0.5`, `1234567.5`."""
    return str(int(value)) if value == int(value) else repr(value)


def seconds(value: float) -> str:
    """Seconds for a person: `30s`, `0.5s`."""
    return number(value) + "s"


def json_number(value: float) -> int | float:
    """A number for JSON: an int when whole."""
    return int(value) if value == int(value) else value
