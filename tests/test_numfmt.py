"""One rule for numbers in every command's text and JSON (drainhook.numfmt)."""

from __future__ import annotations

import pytest

from drainhook.numfmt import json_number, number, seconds


@pytest.mark.parametrize(
    ("value", "text"),
    [(30.0, "30"), (0.5, "0.5"), (1234567.5, "1234567.5"), (0.1 + 0.2, "0.30000000000000004")],
)
def test_whole_numbers_lose_the_fraction_and_others_stay_exact(value: float, text: str) -> None:
    assert number(value) == text  # never rounded: `:g` wrote 1234567.5 as 1.23457e+06
    assert seconds(value) == text + "s"
    assert float(number(value)) == value


def test_json_numbers_are_ints_when_whole() -> None:
    assert (json_number(30.0), json_number(0.5)) == (30, 0.5)
    assert type(json_number(30.0)) is int
