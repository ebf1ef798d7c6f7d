"""Shapes that usually mean trouble: `probe` names them; the verdict stays the contract's.
And `wait` says, once at its start, what `plan` would say of its timeline.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from drainhook.engines.exposition import scan
from drainhook.engines.verdict import Verdict
from drainhook.hook.timeline import timeline_warnings
from drainhook.planning import plan as planning
from tests.conftest import HOOK_LATE, late
from tests.support.logs import connections_fit, end_line, fields, hook_lines, start_line
from tests.support.loopback import Loopback, sample, serve
from tests.support.process import Hook, Run

TWO_RUNS = b"""\
vllm:num_requests_running{engine="0",model_name="org/Old-7B"} 2.0
vllm:num_requests_running{engine="0",model_name="org/New-7B"} 0.0
vllm:num_requests_waiting{engine="0",model_name="org/Old-7B"} 0.0
vllm:num_requests_waiting{engine="0",model_name="org/New-7B"} 0.0
"""


def test_several_model_names_warn_of_a_reused_multiproc_dir() -> None:
    found = scan(TWO_RUNS)
    assert (found.verdict, found.in_flight) == (Verdict.BUSY, 2)  # still counted
    assert len(found.warnings) == 1
    assert "org/New-7B, org/Old-7B" in found.warnings[0]
    assert "PROMETHEUS_MULTIPROC_DIR" in found.warnings[0]


def test_one_model_name_gives_no_warning() -> None:
    assert scan(sample("vllm-single-dp2.txt")).warnings == ()
    assert scan(sample("sglang-mp-dp2.txt")).warnings == ()


def test_a_pinned_engine_that_does_not_match_warns() -> None:
    found = scan(sample("sglang-mp-dp2.txt"), "vllm")
    assert found.verdict is Verdict.UNKNOWN
    assert found.warnings == ("--engine vllm does not match the body, which has sglang gauges",)


def test_no_engine_gauges_at_all_warns() -> None:
    for body, engine in ((b"http_requests_total 3\n", "auto"), (b"up 1\n", "sglang")):
        found = scan(body, engine)
        assert found.verdict is Verdict.UNKNOWN
        assert "wrong port, or a routing proxy" in found.warnings[0]


def test_probe_prints_the_warnings(hook: Hook) -> None:
    with Loopback(serve(TWO_RUNS)) as srv:
        text = hook("probe", "--url", srv.url)
        as_json = hook("probe", "--json", "--url", srv.url)
    assert text.code == as_json.code == 1  # busy
    assert "warning    several model_name values" in text.stdout
    assert json.loads(as_json.stdout)["warnings"][0].startswith("several model_name values")


def test_wait_logs_each_warning_once(hook: Hook) -> None:
    with Loopback(serve(TWO_RUNS)) as srv:
        # D = 2.1 s from the process start: room for the interpreter's start-up on a
        # busy machine and 3 reads; the read timeout keeps the no-room warning.
        run = hook(
            "wait", "--url", srv.url, "--settle", "0.1", "--interval", "0.1",
            "--grace", "3", "--exit-reserve", "0.9", "--read-timeout", "2",
        )  # fmt: skip
    assert run.code == 3
    warned = [line for line in run.lines if line.startswith("drainhook warning=")]
    about_reads = [line for line in warned if " code=" not in line]  # not the timeline's
    # At least 3 reads before D = 2.1 s; one fewer per 0.1 s the machine kept the
    # hook off the CPU, but at least 2 for "once" to mean anything.
    fewest = max(2, 3 - math.ceil(run.starved / 0.1))
    assert len(about_reads) == 1 and int(run.summary.split("reads=")[1].split()[0]) >= fewest
    timeline = [fields(line)["code"] for line in warned if " code=" in line]
    assert timeline == ["grace-range", "no-room", "settle-short", "exit-reserve-short"]


# -- the plan's timeline warnings, logged by `wait` at its start ------------------------

IDLE = b"vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n"
BUSY = b"vllm:num_requests_running 3\nvllm:num_requests_waiting 0\n"


def timeline_lines(run: Run) -> list[dict[str, str]]:
    return [fields(line) for line in run.lines if line.startswith("drainhook warning=")]


def codes_of(*flags: str) -> list[str]:
    """What `plan` says of these flags, in its order: the reference for wait's lines."""
    values = dict(zip(flags[::2], flags[1::2], strict=True))
    config = planning.wait_config(
        **{k.lstrip("-").replace("-", "_"): float(v) for k, v in values.items()}
    )
    return [w.code for w in timeline_warnings(config)]


def test_grace_5_says_why_it_returns_at_once(hook: Hook) -> None:
    """`wait --grace 5`: D = G - R = 0, so `deadline` at once; the hook now says why,
    in `plan`'s words, and the outcome and exit code stay what they were."""
    with Loopback(serve(IDLE)) as srv:
        run = hook("wait", "--url", srv.url, "--grace", "5")
        assert srv.connections == 0  # not a single read, as before
    assert run.code == 3
    summary = fields(run.summary)
    assert (summary["outcome"], summary["reads"], summary["exit"]) == ("deadline", "0", "3")
    # Still at once: the hook counts from its process start, so start-up is in it.
    assert float(summary["elapsed"]) < late(1.0, HOOK_LATE, run.starved)  # start-up, no read
    plan = planning.make_plan(planning.wait_config(grace=5.0))
    expected = [w for w in plan.warnings if w.code in ("grace-range", "settle-past-deadline")]
    assert [(w.code, w.message, w.reason) for w in expected] == [
        (f["code"], f["warning"], f["reason"]) for f in timeline_lines(run)
    ]  # the same rules and wording, one line each
    assert start_line(run.lines[0]) and run.lines[-1] == run.summary and len(run.lines) == 5
    assert run.lines[-2].startswith("drainhook: deadline at ")  # the ending in words


def test_a_settle_past_the_deadline_is_said_before_the_sleep(hook: Hook) -> None:
    """`wait --settle 40 --grace 30`, shrunk: the hook sleeps to D without a read; the
    warning comes first, the outcome is the deadline's."""
    flags = ("--settle", "1.2", "--grace", "1", "--exit-reserve", "0.4")  # S 1.2 > D 0.6
    with Loopback(serve(IDLE)) as srv:
        run = hook("wait", "--url", srv.url, *flags, "--log-format", "json")
        assert srv.connections == 0
    assert run.code == 3
    lines = [json.loads(line) for line in run.lines]
    assert [line["event"] for line in lines] == ["start", *["warning"] * 4, "end", "summary"]
    assert [line["code"] for line in lines[1:-2]] == codes_of(*flags)
    (past,) = [line for line in lines if line.get("code") == "settle-past-deadline"]
    assert "not a single read" in past["warning"] and past["reason"]
    assert lines[-1]["outcome"] == "deadline" and lines[-1]["reads"] == 0
    assert lines[-1]["elapsed"] == pytest.approx(0.6, abs=0.3)  # slept to D, not to S


def test_the_exact_examples_warn_as_plan_does() -> None:
    """The two examples with their own numbers (the subprocess runs above are shrunk)."""
    assert codes_of("--grace", "5") == ["grace-range", "settle-past-deadline"]
    assert codes_of("--settle", "40", "--grace", "30") == ["settle-past-deadline"]


@pytest.mark.reads
@pytest.mark.parametrize("log_format", ["text", "json"])
def test_warnings_come_once_before_any_read_and_into_the_log_file(
    hook: Hook, tmp_path: Path, log_format: str
) -> None:
    # D = 2.1 s from the process start: room for the interpreter's start-up and 3 reads.
    flags = ("--settle", "0.1", "--interval", "0.1", "--grace", "3", "--exit-reserve", "0.9")
    log = tmp_path / "hook.log"
    with Loopback(serve(BUSY)) as srv:
        run = hook("wait", "--url", srv.url, *flags, "--log-format", log_format,
                   "--log-file", str(log))  # fmt: skip
        answered = srv.connections
    assert run.code == 3  # busy to D, as without the warnings
    assert run.stderr.splitlines() == log.read_text().splitlines()

    def kind(line: str) -> str:
        if log_format == "json":
            got = json.loads(line)
            return f"{got['event']}:{got.get('code', '')}"
        for name, said in (("start", start_line), ("end", end_line)):
            if said(line):
                return f"{name}:"
        if " read=" in line or " outcome=" in line:
            return "read:" if " read=" in line else "summary:"
        return "warning:" + fields(line).get("code", "")

    kinds = [kind(line) for line in run.lines]
    warnings = [k.split(":")[1] for k in kinds if k.startswith("warning:")]
    assert warnings == codes_of(*flags)  # each once, in plan's order
    first_read = kinds.index("read:")
    assert kinds[0] == "start:" and all(k.startswith("warning:") for k in kinds[1:first_read])
    assert kinds.count("read:") >= 3 and kinds[-2:] == ["end:", "summary:"]
    reads = [json.loads(line) if log_format == "json" else fields(line)
             for line, k in zip(run.lines, kinds, strict=True) if k == "read:"]  # fmt: skip
    assert connections_fit(answered, reads), run.stderr


def test_quiet_keeps_them_in_the_log_file_only(hook: Hook, tmp_path: Path) -> None:
    log = tmp_path / "hook.log"
    run = hook("wait", "--grace", "5", "--quiet", "--log-file", str(log), "--port", "1")
    assert run.code == 3
    assert len(run.lines) == 2 and end_line(run.lines[0]) and run.lines[1] == run.summary
    logged = log.read_text().splitlines()
    assert start_line(logged[0])
    assert end_line(logged[-2])  # the file has every line; stderr the sentence and summary
    assert [fields(line).get("code") for line in logged[1:-2]] == codes_of("--grace", "5")


@pytest.mark.reads
def test_good_values_give_no_warning_line(hook: Hook) -> None:
    """S = 5 s, G = 15 s, R = 2 s: nothing for `plan` to say, so nothing logged."""
    with Loopback(serve(IDLE)) as srv:
        run = hook("wait", "--url", srv.url, "--grace", "15", "--exit-reserve", "2",
                   "--interval", "0.2")  # fmt: skip
    assert codes_of("--grace", "15", "--exit-reserve", "2", "--interval", "0.2") == []
    assert run.code == 0, run.stderr
    assert not [line for line in run.lines if "warning" in line]
    lines = hook_lines(run.lines)  # (the test listener has no /load: that says so once)
    assert [" read=" in line for line in lines] == [True, True, False]
