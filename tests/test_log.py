"""One event, two renderings (STYLE 21): every log line is built once as fields
and written as text or JSON, and the two carry the same facts, field for field."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import shlex

import pytest

from drainhook.engines.verdict import Reading, Series, Signals, Verdict
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
from drainhook.planning.plan import wait_config
from tests.support.logs import fields
from tests.support.process import ROOT

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


def test_quiet_keeps_only_the_sentence_and_the_summary_on_stderr() -> None:
    stream = io.StringIO()
    log = Log("json", quiet=True, stream=stream)
    log.read(5.0, BUSY)
    log.warning("a warning")
    log.end("drained in 6.0 s after 2 reads; nothing in flight")
    log.summary(Result(Outcome.DRAINED, 6.0, 2, BUSY), 0, "t", 25.0)
    events = [json.loads(x)["event"] for x in stream.getvalue().splitlines()]
    assert events == ["end", "summary"]


def test_wait_help_says_the_pulse_and_the_heartbeat_the_log_keeps() -> None:
    """`--log-reads changes` writes a line at least every PULSE while work remains and
    every HEARTBEAT while idle; its help said 10 s for both."""
    from click.testing import CliRunner

    from drainhook.cli.main import cli
    from drainhook.hook.log import HEARTBEAT, PULSE

    shown = " ".join(CliRunner().invoke(cli, ["wait", "--help"]).output.split())
    assert f"else one every {PULSE:g} s while work remains, {HEARTBEAT:g} s when idle" in shown


def test_the_operations_guides_sample_lines_are_the_tools_own() -> None:
    """docs/operations.md's sample drain: each line's keys are those the hook writes
    for its kind, in the hook's order (`at` second), none it never writes."""
    stream = io.StringIO()
    log = Log(stream=stream, reads="all")
    log.start(dataclasses.replace(wait_config(), grace_default=True), "http://h/metrics", 0.0)
    log.warning("G = 5s is under 15s", code="grace-range", reason="no room")
    signals = Signals(scheduler=0.0, server=0.0, connections=1.0, missing=())
    held = dataclasses.replace(BUSY, source="metrics", signals=signals)
    for n, reading in enumerate((held, FAILED, PARTS)):
        log.read(5.0 + n, reading)
    done = Result(Outcome.DRAINED, 8.0, 4, held)
    log.emit(summary_event(done, 0, "http://h/metrics", 25.0))
    order: dict[str, list[str]] = {}
    for line in stream.getvalue().splitlines():
        keys = [w.split("=", 1)[0] for w in shlex.split(line)[1:]]
        known = order.setdefault(keys[0], [])
        known += [k for k in keys if k not in known]
    order["t"] = [k for k, _ in read_event(0.0, 1, PARTS).fields]
    order["t"].insert(1, "at")
    guide = (ROOT / "docs" / "operations.md").read_text()
    block = guide.split("### What the lines say", 1)[1].split("```", 2)[1]
    samples = [ln for ln in block.splitlines() if ln.startswith("drainhook ")]
    assert len(samples) >= 6
    for sample in samples:
        keys = [w.split("=", 1)[0] for w in shlex.split(sample)[1:]]
        assert keys[1] == "at", sample
        tool = order[keys[0]]
        assert [k for k in tool if k in keys] == keys, (sample, tool)
    assert re.search(r"^drainhook outcome=", block, re.M)
