"""One event, two renderings (STYLE 21): every log line is built once as fields
and written as text or JSON, and the two carry the same facts, field for field."""

from __future__ import annotations

import io
import json

import pytest

from drainhook.engines.verdict import Reading, Series, Verdict
from drainhook.hook.drain import Outcome, Result
from drainhook.hook.log import (
    Event,
    Log,
    read_event,
    summary_event,
    text_value,
    warning_event,
)
from drainhook.hook.stall import Frozen, Stall
from tests.support.logs import fields

BUSY = Reading(
    Verdict.BUSY, "vllm", 2.0, (Series("vllm:num_requests_running", (), 2.0),), None, 3.25
)
PARTS = Reading(
    Verdict.BUSY,
    "vllm",
    2.0,
    (),
    None,
    4.0,
    parts=(
        ("http://127.0.0.1:8000/metrics", BUSY),
        ("http://127.0.0.1:8001/metrics", Reading.failed(Verdict.UNREACHABLE, "refused", 1.0)),
    ),
    source="metrics",
)
FAILED = Reading.failed(Verdict.UNKNOWN, 'HTTP 503 "busy" = later', 12.5)
STALL = Stall(
    after=5.0,
    targets=(Frozen("", 5.0, 2.0, 2.0, (Series("vllm:generation_tokens_total", (), 2299.0),)),),
)

EVENTS: list[Event] = [
    read_event(5.0041, 1, BUSY),
    read_event(6.5, 2, PARTS),
    read_event(7.25, 3, FAILED),
    warning_event("G = 5s is under 15s", "grace-range", "there is no room"),
    warning_event("a plain warning"),
    summary_event(Result(Outcome.DRAINED, 6.0, 2, FAILED), 0, "t", 25.0),
    summary_event(Result(Outcome.STALLED, 12.0, 9, BUSY, stall=STALL), 5, "t", 25.0),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.kind)
def test_text_and_json_carry_the_same_fields(event: Event) -> None:
    as_json = json.loads(event.json())
    assert as_json.pop("event") == event.kind
    as_text = fields(event.text())
    present = {k: v for k, v in as_json.items() if v is not None or k in event.shown}
    assert set(as_text) == set(present)
    for key, value in present.items():
        if isinstance(value, dict):
            assert json.loads(as_text[key]) == value, key
        elif isinstance(value, str):
            assert as_text[key] == value, key  # unquoted by the reader
        else:
            assert as_text[key] == text_value(value), key
    assert set(as_json) == {k for k, _ in event.fields}  # JSON: every field, null too


def test_a_field_with_no_value_is_left_out_of_text_unless_shown() -> None:
    line = read_event(5.0, 1, FAILED).text()
    assert "in_flight=-" in line and "source=" not in line and "targets=" not in line
    summary = summary_event(Result(Outcome.DEADLINE, 25.0, 20, None), 3, "t", 25.0)
    assert "reason=-" in summary.text() and "after_sigterm=" not in summary.text()


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "-"),
        (3, "3"),
        (2.0, "2"),
        (1234567.5, "1234567.5"),
        ("plain", "plain"),
        ("two words", '"two words"'),
        ('a "q"', '"a \\"q\\""'),
        ("k=v", '"k=v"'),
        (["a", "b"], "a,b"),
        ([], "-"),
        ({"seconds": 5}, '"{\\"seconds\\":5}"'),
    ],
)
def test_text_values(value: object, text: str) -> None:
    assert text_value(value) == text  # type: ignore[arg-type]


def test_quiet_keeps_only_the_summary_on_stderr() -> None:
    stream = io.StringIO()
    log = Log("json", quiet=True, stream=stream)
    log.read(5.0, BUSY)
    log.summary(Result(Outcome.DRAINED, 6.0, 2, BUSY), 0, "t", 25.0)
    assert [json.loads(x)["event"] for x in stream.getvalue().splitlines()] == ["summary"]


def test_wait_help_says_the_pulse_and_the_heartbeat_the_log_keeps() -> None:
    """`--log-reads changes` writes a line at least every PULSE while work remains and
    every HEARTBEAT while idle; its help said 10 s for both."""
    from click.testing import CliRunner

    from drainhook.cli.main import cli
    from drainhook.hook.log import HEARTBEAT, PULSE

    shown = " ".join(CliRunner().invoke(cli, ["wait", "--help"]).output.split())
    assert f"else one every {PULSE:g} s while work remains, {HEARTBEAT:g} s when idle" in shown
