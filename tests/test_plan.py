"""`drainhook plan`: the instants of CONTRACT §1, the warnings, and the three outputs.

The instants are checked against the drain loop itself, run under a fake clock
on the same config: what `plan` promises is what `wait` does.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import typing

import pytest
import yaml

from drainhook.engines.verdict import Reading, Verdict
from drainhook.errors import UsageError
from drainhook.hook import timeline
from drainhook.hook.config import EXIT_ALLOWANCE, WaitConfig
from drainhook.hook.drain import Outcome, drain
from drainhook.planning import plan as planning
from drainhook.planning import render
from drainhook.reading.config import ReadConfig
from drainhook.reading.target import parse_url
from tests.support.manifests import load_model, parse_hook
from tests.support.process import Hook, Run, base_env

pytestmark = pytest.mark.usefixtures("no_drainhook_env")

# vLLM's /load switch, which plan names for every vLLM (drainhook.plan.engine_flags).
LOAD_TRACKING = "--enable-server-load-tracking"


def make(role: str = "unified", **flags: object) -> planning.Plan:
    return planning.make_plan(planning.wait_config(**{"grace": 30.0, **flags}), role)


def codes(plan: planning.Plan) -> set[str]:
    return {w.code for w in plan.warnings}


# -- the instants ---------------------------------------------------------------------


def test_default_timeline() -> None:
    p = make()
    assert (p.at.settle_end, p.at.first_read, p.at.idle_return) == (5, 5, 6)
    assert (p.at.deadline, p.at.sigterm_latest, p.at.kill) == (25, 25, 30)
    assert p.at.idle_drains
    assert p.at.reads_max == 20  # t = 5, 6, ..., 24
    assert p.warnings == ()
    assert p.command == (
        "/usr/local/bin/drainhook", "wait", "--grace", "30", "--log-file", "/proc/1/fd/1"
    )  # fmt: skip


def test_deadline_is_the_hooks_own() -> None:
    """D comes from WaitConfig.deadline: min(G - R, max-wait)."""
    assert make(grace=60.0, exit_reserve=10.0).at.deadline == 50
    assert make(grace=60.0, max_wait=20.0).at.deadline == 20
    p = make(grace=60.0, max_wait=20.0)
    assert p.at.deadline == p.config.deadline
    assert p.at.kill == 60  # the engine gets all of D..G


def test_linger_moves_the_idle_return_but_never_past_d() -> None:
    assert make(linger=3.0).at.idle_return == 9
    assert make(linger=100.0).at.idle_return == 25


def test_a_settle_past_the_deadline_means_no_read() -> None:
    p = make(grace=10.0, exit_reserve=5.0, settle=6.0)
    assert p.at.first_read is None
    assert p.at.settle_end == 5  # clipped to D
    assert p.at.reads_max == 0
    assert not p.at.idle_drains and p.at.idle_return == 5
    assert codes(p) == {"grace-range", "settle-past-deadline"}  # not no-room: no read at all
    (w,) = [w for w in p.warnings if w.code == "settle-past-deadline"]
    assert "S = 6s" in w.message and "D = 5s" in w.message and "not a single read" in w.message


@pytest.mark.parametrize(
    ("flags", "fires"),
    [
        ({"grace": 30.0, "settle": 25.0}, True),  # S = D: the settle ends at the deadline
        ({"grace": 30.0, "settle": 24.5}, False),  # one read at 24.5 (no-room's case)
        ({"grace": 5.0}, True),  # D = 0
        ({"grace": 300.0, "max_wait": 5.0}, True),  # D = max-wait = S
    ],
)
def test_settle_past_deadline_is_no_first_read(flags: dict[str, float], fires: bool) -> None:
    p = make(**flags)
    assert (p.at.first_read is None) is fires
    assert ("settle-past-deadline" in codes(p)) is fires
    assert "no-room" not in codes(p) if fires else "no-room" in codes(p)


def test_an_exit_reserve_under_two_seconds_moves_the_kill() -> None:
    """The kubelet leaves at least 2 s between SIGTERM and SIGKILL."""
    p = make(exit_reserve=0.5)
    assert p.at.deadline == 29.5
    assert p.at.kill == 31.5
    assert "exit-reserve-short" in codes(p)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def reading(verdict: Verdict) -> Reading:
    total = 0.0 if verdict is Verdict.IDLE else 3.0
    return Reading(verdict, "vllm", total, (), None, 1.0)


@pytest.mark.parametrize(
    "flags",
    [
        {},
        {"grace": 45.0, "exit_reserve": 20.0},
        {"settle": 2.0, "interval": 0.5, "confirm": 3},
        {"linger": 4.0},
        {"grace": 12.0},  # the confirming read lands exactly one second before D
        {"grace": 11.0},  # ... or on D: no drain
        {"grace": 8.0, "settle": 6.0},  # D before the settle ends
        {"grace": 600.0, "max_wait": 42.0},
    ],
)
def test_plan_agrees_with_the_drain_loop(flags: dict[str, float]) -> None:
    """An idle engine's hook returns at idle_return with the plan's outcome; a busy
    one at D after reads_max reads. The loop's own end at D is EXIT_ALLOWANCE early,
    so that the process is gone by D."""
    p = make(**flags)
    loop_deadline = max(0.0, p.at.deadline - EXIT_ALLOWANCE)
    for verdict in (Verdict.IDLE, Verdict.BUSY):
        clock = FakeClock()
        result = drain(
            p.config.timeline(),
            lambda _timeout, v=verdict: reading(v),
            t0=clock.now,
            clock=clock,
            sleep=clock.sleep,
        )
        if verdict is Verdict.IDLE:
            returns = p.at.idle_return if p.at.idle_drains else loop_deadline
            assert result.elapsed == pytest.approx(min(returns, loop_deadline))
            assert result.outcome is (Outcome.DRAINED if p.at.idle_drains else Outcome.DEADLINE)
        else:
            assert result.elapsed == pytest.approx(loop_deadline)
            assert result.outcome is Outcome.DEADLINE
            assert result.reads == p.at.reads_max


# -- the warnings --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "flags", "expected"),
    [
        ("unified", {}, set()),
        ("unified", {"grace": 15.0}, set()),
        ("unified", {"grace": 14.0}, {"grace-range"}),
        ("unified", {"grace": 3600.0}, set()),
        ("unified", {"grace": 3601.0}, {"grace-range"}),
        ("unified", {"grace": 30.5}, {"grace-fraction"}),
        ("unified", {"settle": 5.0}, set()),
        ("unified", {"settle": 4.5}, {"settle-short"}),
        ("unified", {"exit_reserve": 2.0}, set()),
        ("unified", {"exit_reserve": 1.5}, {"exit-reserve-short"}),
        # room: S + (confirm - 1) * I + read timeout <= D
        ("unified", {"grace": 17.0, "exit_reserve": 10.0}, set()),  # 5 + 1 + 1 = 7 = D
        ("unified", {"grace": 17.0, "exit_reserve": 10.5}, {"no-room"}),  # D = 6.5
        ("unified", {"grace": 17.0, "exit_reserve": 10.0, "confirm": 3}, {"no-room"}),
        ("unified", {"grace": 17.0, "exit_reserve": 10.0, "read_timeout": 1.5}, {"no-room"}),
        ("unified", {"grace": 300.0, "max_wait": 6.0}, {"no-room"}),
        # SGLang prefill/decode: R >= 20 and G about 45
        ("prefill", {"engine": "sglang", "grace": 45.0, "exit_reserve": 20.0}, set()),
        ("decode", {"engine": "sglang", "grace": 60.0, "exit_reserve": 25.0}, set()),
        ("decode", {"engine": "sglang", "grace": 45.0, "exit_reserve": 19.0}, {"sglang-pd-exit"}),
        ("prefill", {"engine": "sglang", "grace": 44.0, "exit_reserve": 20.0}, {"sglang-pd-exit"}),
        ("prefill", {"engine": "sglang"}, {"sglang-pd-exit"}),
        # SGLang unified: R >= 10 (its watchdog's 5 s look, then 1-2 s to stop)
        ("unified", {"engine": "sglang"}, {"sglang-exit"}),
        ("unified", {"engine": "sglang", "grace": 35.0, "exit_reserve": 10.0}, set()),
        ("unified", {"engine": "sglang", "exit_reserve": 9.5}, {"sglang-exit"}),
        ("unified", {"exit_reserve": 5.0}, set()),  # auto: it may be vLLM
        # vLLM: --shutdown-timeout only for a settle under the router's 5 s
        ("unified", {"engine": "vllm"}, set()),
        ("unified", {"engine": "vllm", "settle": 3.0}, {"settle-short", "vllm-shutdown-timeout"}),
        ("prefill", {"engine": "vllm"}, {"vllm-prefill-linger"}),
        ("prefill", {"engine": "vllm", "linger": 5.0}, set()),
        ("decode", {"engine": "vllm"}, set()),
        # auto: the role's advice for either engine
        ("prefill", {}, {"sglang-pd-exit", "vllm-prefill-linger"}),
    ],
)
def test_warnings(role: str, flags: dict[str, object], expected: set[str]) -> None:
    p = make(role, **flags)
    assert codes(p) == expected
    for w in p.warnings:
        assert w.message and w.reason


@pytest.mark.parametrize(("reserve", "advice"), [(5.0, 4), (10.0, 9), (2.5, 1)])
def test_vllm_shutdown_timeout_is_r_minus_one(reserve: float, advice: int) -> None:
    p = make(engine="vllm", exit_reserve=reserve, settle=3.0)
    assert codes(p) == {"vllm-shutdown-timeout", "settle-short"}
    assert planning.shutdown_timeout(p) == advice


def test_vllm_shutdown_timeout_without_room() -> None:
    p = make(engine="vllm", exit_reserve=1.5, settle=3.0)
    assert "vllm-shutdown-timeout" in codes(p)  # it says to raise R instead
    assert planning.shutdown_timeout(p) is None


@pytest.mark.parametrize(
    ("settle", "advised"),
    [
        (5.0, False),  # work left at D: N more seconds of G serve it better
        (3.0, True),  # S < 5 s: a slow router may send after the release
        (4.99, True),
    ],
)
def test_vllm_shutdown_timeout_only_where_a_request_can_slip_in_after_the_release(
    settle: float, advised: bool
) -> None:
    """--shutdown-timeout N adds the engine core's teardown to every drained exit (vLLM
    0.32: 4 to 6.3 s against 0.4 s); for a request left at D a larger G does more (the
    engine still serves it), so it pays only for one a slow router sends after the
    release (docs/design.md §7)."""
    p = make(engine="vllm", settle=settle)
    codes = {w.code for w in p.warnings}
    assert ("vllm-shutdown-timeout" in codes) is advised
    assert planning.shutdown_timeout(p) == (4 if advised else None)
    applied = typing.cast(dict[str, typing.Any], render.applied_json(planning.Applied(p, ())))
    timeout = ["--shutdown-timeout", "4"] if advised else []
    assert applied["engine_args"] == [*timeout, "--enable-server-load-tracking"]


@pytest.mark.parametrize(
    ("flags", "engine_args"),
    [
        ({"engine": "vllm"}, [LOAD_TRACKING]),
        ({"engine": "vllm", "settle": 2.0}, ["--shutdown-timeout", "4", LOAD_TRACKING]),
        (
            {"engine": "vllm", "settle": 2.0, "exit_reserve": 10.0},
            ["--shutdown-timeout", "9", LOAD_TRACKING],
        ),
        ({"engine": "vllm", "settle": 2.0, "exit_reserve": 1.5}, [LOAD_TRACKING]),  # no N
        ({"engine": "sglang"}, ["--enable-metrics"]),
        ({}, []),  # auto: which engine's flag is unknown
    ],
)
def test_json_names_the_engine_args_its_advice_gives(
    flags: dict[str, typing.Any], engine_args: list[str]
) -> None:
    """The engine flags the advice names, structured for tooling (the rehearsal reads
    --shutdown-timeout there, inject writes them all): R - 1 whenever the advice can
    give one, what the hook's reads need (SGLang's /metrics, vLLM's /load)."""
    p = make(**flags)
    applied = typing.cast(dict[str, typing.Any], render.to_json(p)["applied"])
    assert applied["engine_args"] == engine_args
    assert engine_args == [a for f in planning.engine_flags(p) if f.add for a in f.args]
    n = planning.shutdown_timeout(p)
    timeout = engine_args[:2] if engine_args[:1] == ["--shutdown-timeout"] else []
    assert timeout == ([] if n is None else ["--shutdown-timeout", str(n)])


def test_each_rule_owns_one_code_and_fires_alone() -> None:
    # A rule is one entry of the two tables: each gives its own code, and a plan with
    # nothing wrong (the defaults, engine auto, unified) hears from none of them.
    assert make().warnings == ()
    owned: dict[str, str] = {}
    cases = [
        make(grace=10.0), make(grace=30.5), make(settle=1.0), make(exit_reserve=1.0),
        make(grace=17.0, exit_reserve=10.5), make(grace=8.0, settle=6.0),
        make("decode", engine="sglang"), make(engine="sglang"), make("prefill", engine="vllm"),
        make(engine="vllm", settle=3.0),
        make(stall_after=30.0), make(interval=0.05),
        planning.make_plan(planning.wait_config(engine="vllm"), api_servers=2),
    ]  # fmt: skip
    rules = [*timeline.TIMELINE_RULES, *planning.ADVICE_RULES]
    for plan in cases:
        found = [(r, r(plan.at)) for r in timeline.TIMELINE_RULES]
        found += [(r, r(plan)) for r in planning.ADVICE_RULES]
        for rule, warning in found:
            if warning is not None:
                assert owned.setdefault(warning.code, rule.__name__) == rule.__name__
    assert len(owned) == len(rules)


def test_the_rules_read_a_wait_config_as_wait_builds_it() -> None:
    # The plan of the very WaitConfig `wait` runs on (a target, log settings):
    # the warnings `wait` could log at its start.
    config = WaitConfig(
        reach=ReadConfig(target=parse_url("http://127.0.0.1:9000/metrics"), engine="vllm"),
        grace=12.0,
        settle=2.0,
        log_format="json",
        quiet=True,
    )
    assert codes(planning.make_plan(config)) == {
        "grace-range",
        "settle-short",
        "vllm-shutdown-timeout",
    }


def test_warnings_name_the_numbers() -> None:
    (w,) = make(grace=17.0, exit_reserve=10.5).warnings
    assert w.code == "no-room"
    (w,) = make("decode", engine="sglang", grace=45.0, exit_reserve=5.0).warnings
    # G rises with R (D stays 40 s): the numbers the fragment will carry.
    assert w.code == "sglang-pd-exit"
    assert [(f.field, f.value) for f in w.fixes] == [("exit_reserve", 20.0), ("grace", 60.0)]
    # A unified SGLang exits 3-7 s after SIGTERM (CONTRACT §7): R 10, G up by as much.
    (w,) = make(engine="sglang", grace=30.0).warnings
    assert w.code == "sglang-exit"
    assert [(f.field, f.value) for f in w.fixes] == [("exit_reserve", 10.0), ("grace", 35.0)]


def test_timeline_rules_and_advice_rules_split_the_table() -> None:
    """`wait` logs TIMELINE_RULES only: every rule is in exactly one of the two, and
    the engine and role advice (about the Pod spec, not the run) is not logged."""
    rules = {r.__name__ for r in timeline.TIMELINE_RULES} | {
        r.__name__ for r in planning.ADVICE_RULES
    }
    assert len(rules) == len(timeline.TIMELINE_RULES) + len(planning.ADVICE_RULES)
    everything = planning.wait_config(grace=7.0, settle=6.0, exit_reserve=1.0, engine="vllm")
    assert {w.code for w in timeline.timeline_warnings(everything)} == {
        "grace-range",
        "settle-past-deadline",
        "exit-reserve-short",
    }
    advised = planning.wait_config(grace=7.0, settle=3.0, exit_reserve=2.0, engine="vllm")
    assert "vllm-shutdown-timeout" in codes(planning.make_plan(advised))
    assert "vllm-shutdown-timeout" not in {w.code for w in timeline.timeline_warnings(advised)}
    config = planning.wait_config(grace=17.0, exit_reserve=10.5, settle=4.6, engine="vllm")
    found = timeline.timeline_warnings(config)
    assert [w.code for w in found] == ["no-room", "settle-short"]  # in RULES' order
    assert found == tuple(w for w in planning.make_plan(config).warnings if w in found)
    assert timeline.timeline_warnings(planning.wait_config(engine="vllm")) == ()
    assert timeline.timeline_warnings(planning.wait_config(grace=30.5)) == (
        planning.make_plan(planning.wait_config(grace=30.5)).warnings
    )


def test_timeline_warnings_never_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(instants: timeline.Instants) -> timeline.PlanWarning | None:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(timeline, "TIMELINE_RULES", (broken,))
    (w,) = timeline.timeline_warnings(planning.wait_config())
    assert w.code == "timeline-unchecked" and "ZeroDivisionError: a bug" in w.message


# -- the advice, applied ------------------------------------------------------------


def applied(role: str = "unified", **flags: object) -> planning.Applied:
    return planning.apply_advice(make(role, **flags))


@pytest.mark.parametrize(
    ("role", "flags", "grace", "reserve"),
    [
        # R rises to 20 and G by as much (D stays), to 45 at least.
        ("decode", {"engine": "sglang"}, 45, 20),  # 30/5 -> 45/20: D 25 -> 25
        ("prefill", {"engine": "sglang", "grace": 60.0}, 75, 20),  # D 55 -> 55
        ("decode", {"engine": "sglang", "exit_reserve": 8.0}, 45, 20),  # D 22 -> 25 (floor)
        ("decode", {"engine": "sglang", "grace": 40.0, "exit_reserve": 25.0}, 45, 25),
        ("decode", {"grace": 30.0}, 45, 20),  # auto: the rule speaks for SGLang too
        # nothing to apply
        ("decode", {"engine": "sglang", "grace": 45.0, "exit_reserve": 20.0}, 45, 20),
        ("decode", {"engine": "vllm"}, 30, 5),
        ("unified", {"engine": "sglang"}, 35, 10),
        ("prefill", {"engine": "vllm", "grace": 10.0}, 10, 5),  # timeline warnings stay
    ],
)
def test_apply_advice_values(role: str, flags: dict[str, object], grace: int, reserve: int) -> None:
    given = make(role, **flags)
    done = planning.apply_advice(given)
    c = done.plan.config
    assert (c.grace, c.exit_reserve) == (grace, reserve)
    assert not {"sglang-exit", "sglang-pd-exit"} & codes(done.plan)  # it follows its advice
    assert c.deadline >= min(given.at.deadline, 25)  # the time to drain is never taken
    changed = {ch.field: (ch.given, ch.applied) for ch in done.changes}
    expect = {}
    if grace != given.at.grace:
        expect["grace"] = (given.at.grace, grace)
    if reserve != given.config.exit_reserve:
        expect["exit_reserve"] = (given.config.exit_reserve, reserve)
    assert changed == expect
    for ch in done.changes:
        code = "sglang-exit: " if role == "unified" else "sglang-pd-exit: "
        assert ch.because and all(b.startswith(code) for b in ch.because)


def test_apply_advice_leaves_the_other_values_alone() -> None:
    given = make("prefill", engine="sglang", settle=3.0, interval=0.5, linger=2.0, max_wait=40.0)
    c = planning.apply_advice(given).plan.config
    assert (c.settle, c.interval, c.linger, c.max_wait) == (3, 0.5, 2, 40)
    assert c.reach == given.config.reach


def observed(
    plan: planning.Plan, latency: float, engine: typing.Literal["vllm", "sglang"] = "sglang"
) -> planning.Plan:
    """plan holding the evidence that 1,000 requests all took `latency` s or less."""
    from drainhook.planning.histogram import Histogram, Observation

    h = Histogram("e2e", (latency,), (1000.0, 1000.0), 1)
    return dataclasses.replace(plan, observed=Observation(engine, h, "test"))


def test_evidence_replaces_g_for_the_applied_reserve_then_the_floors_act() -> None:
    done = planning.apply_advice(observed(make("decode", engine="sglang"), 1.0))
    # G from the evidence is computed with the R the advice chose (20, not the 5 given).
    assert done.plan.at.grace == 45  # 5 + 1 + 20 = 26, raised to the SGLang floor
    (r, g) = done.changes
    assert (g.field, g.given, g.applied) == ("grace", 30, 45)
    assert g.because[0] == "observed: G = ceil(S 5 + p99.9 1 + R 20) = 26"
    assert g.because[1].startswith("sglang-pd-exit: ")
    assert r.text().startswith("--exit-reserve 5 -> 20 (sglang-pd-exit: an SGLang decode")

    lower = planning.apply_advice(observed(make(grace=60.0), 30.0, "vllm"))
    assert [ch.text() for ch in lower.changes] == [
        "terminationGracePeriodSeconds 60 -> 40, lower "
        "(observed: G = ceil(S 5 + p99.9 30 + R 5) = 40)"
    ]
    assert planning.apply_advice(make()).changes == ()


def test_vllm_shutdown_timeout_advice_follows_the_applied_reserve() -> None:
    done = planning.apply_advice(make("decode", grace=30.0, settle=3.0))  # auto: SGLang's R
    assert done.plan.config.exit_reserve == 20
    vllm = planning.make_plan(done.plan.config, "decode", known_engine="vllm")
    assert codes(vllm) == {"vllm-shutdown-timeout", "settle-short"}
    assert planning.shutdown_timeout(vllm) == 19


def test_invalid_values_are_usage_errors() -> None:
    with pytest.raises(UsageError):
        make(grace=-1.0)
    with pytest.raises(UsageError):
        make(interval=0.0)


# -- the command ---------------------------------------------------------------------


def test_command_carries_the_chosen_flags_and_parses() -> None:
    p = planning.make_plan(
        planning.wait_config(
            grace=45.0,
            settle=3.0,
            exit_reserve=20.0,
            interval=0.5,
            read_timeout=0.25,
            confirm=3,
            linger=2.0,
            max_wait=40.0,
            engine="sglang",
        ),
        "prefill",
        "/hook/drainhook",
    )
    name, params, _ = parse_hook(list(p.command))
    assert name == "wait"
    assert p.command[0] == "/hook/drainhook"
    assert (params["grace"], params["settle"], params["exit_reserve"]) == (45, 3, 20)
    assert (params["interval"], params["read_timeout"], params["confirm"]) == (0.5, 0.25, 3)
    assert (params["linger"], params["max_wait"], params["engine"]) == (2, 40, "sglang")


def test_command_leaves_defaults_out_but_always_names_grace() -> None:
    """And --log-file /proc/1/fd/1 (issue 59): the kubelet keeps a hook's own output to
    itself, so without it the hook's lines never reach `kubectl logs`."""
    log = ("--log-file", "/proc/1/fd/1")
    assert make(grace=30.0).command[1:] == ("wait", "--grace", "30", *log)
    assert make(grace=90.0, settle=5.0).command[1:] == ("wait", "--grace", "90", *log)


# -- the outputs, through the CLI ----------------------------------------------------


def test_text_output(hook: Hook) -> None:
    run = hook("plan", "--grace", "45", "--exit-reserve", "20", "--engine", "sglang")
    assert run.code == 0, run.stderr
    out = run.stdout
    for line in ("t=5s", "t=6s", "t=25s", "t=45s", "deadline D = G - R", "SIGTERM at the latest"):
        assert line in out
    assert "preStop: /usr/local/bin/drainhook wait --grace 45 --exit-reserve 20" in out
    assert "warnings: none" in out
    assert run.stderr == ""


def test_text_output_gives_each_warning_its_reason(hook: Hook) -> None:
    run = hook("plan", "--grace", "10", "--settle", "4")
    assert run.code == 0
    assert "warnings (3):" in run.stdout
    for code in ("grace-range:", "settle-short:", "no-room:"):
        assert code in run.stdout
    assert run.stdout.count("why: ") == 3


def test_json_output(hook: Hook) -> None:
    run = hook("plan", "--grace", "60", "--engine", "vllm", "--output", "json")
    assert run.code == 0, run.stderr
    data = json.loads(run.stdout)
    assert data["schema"] == 1
    assert data["instants"] == {
        "hook_start": 0,
        "settle_end": 5,
        "first_read": 5,
        "idle_return": 6,
        "stall_earliest": None,  # S + W = 125 s, after D
        "deadline": 55,
        "sigterm_latest": 55,
        "kill": 60,
    }
    assert data["idle_outcome"] == "drained"
    assert data["reads_max"] == 50
    assert data["exit_window"] == 5
    assert data["termination_grace_period_seconds"] == 60
    assert data["command"] == [
        "/usr/local/bin/drainhook",
        "wait",
        "--grace",
        "60",
        "--engine",
        "vllm",
        "--log-file",
        "/proc/1/fd/1",
    ]
    assert data["warnings"] == []  # with S = 5 s no --shutdown-timeout is advised
    short = json.loads(hook("plan", "--engine", "vllm", "--settle", "3", "--output", "json").stdout)
    w = short["warnings"][-1]
    assert set(w) == {"code", "message", "reason"}
    assert w["code"] == "vllm-shutdown-timeout"


def test_json_output_of_a_plan_with_no_read(hook: Hook) -> None:
    data = json.loads(hook("plan", "--grace", "8", "--settle", "6", "--output", "json").stdout)
    assert data["instants"]["first_read"] is None
    assert data["idle_outcome"] == "deadline"
    assert {w["code"] for w in data["warnings"]} == {"settle-past-deadline", "grace-range"}


def test_plan_reads_the_same_environment_as_wait(hook: Hook) -> None:
    """DRAINHOOK_GRACE set on the container shows in the plan run inside it."""
    run = hook("plan", "--output", "json", env={"DRAINHOOK_GRACE": "90", "DRAINHOOK_SETTLE": "8"})
    data = json.loads(run.stdout)
    assert (data["grace"], data["settle"], data["instants"]["deadline"]) == (90, 8, 85)


def test_yaml_output_is_a_pod_spec_fragment(hook: Hook) -> None:
    run = hook(
        "plan",
        *("--grace", "45", "--exit-reserve", "20", "--engine", "sglang", "--role", "decode"),
        *("--output", "yaml", "--binary", "/hook/drainhook/drainhook"),
    )
    assert run.code == 0, run.stderr
    fragment = yaml.safe_load(run.stdout)
    spec = load_model(fragment, "V1PodSpec", "plan")
    assert spec.termination_grace_period_seconds == 45
    (container,) = spec.containers
    command = container.lifecycle.pre_stop._exec.command
    assert command == [
        "/hook/drainhook/drainhook",
        *("wait", "--grace", "45", "--exit-reserve", "20", "--engine", "sglang"),
        *("--log-file", "/proc/1/fd/1"),  # the kubelet keeps a hook's own output to itself
    ]
    assert str(parse_hook(command)[1]["log_file"]) == "/proc/1/fd/1"
    assert all(isinstance(arg, str) for arg in command)
    name, params, _ = parse_hook(command)
    assert (name, params["grace"]) == ("wait", spec.termination_grace_period_seconds)


def fragment(run: Run) -> tuple[typing.Any, list[str], dict[str, typing.Any]]:
    """The checked Pod spec, the preStop command and its parsed flags of a YAML run."""
    assert run.code == 0, run.stderr
    spec = load_model(yaml.safe_load(run.stdout), "V1PodSpec", "plan")
    (container,) = spec.containers
    command = container.lifecycle.pre_stop._exec.command
    name, params, _ = parse_hook(command)
    assert (name, params["grace"]) == ("wait", spec.termination_grace_period_seconds)
    return spec, command, params


def comments(run: Run, kind: str) -> list[str]:
    return [line for line in run.stdout.splitlines() if line.startswith(f"# {kind}: ")]


@pytest.mark.parametrize(
    ("args", "grace", "reserve", "changed"),
    [
        # the case: defaults, an SGLang decode
        (
            ("--engine", "sglang", "--role", "decode"),
            45,
            20,
            [
                "# changed: --exit-reserve 5 -> 20 (sglang-pd-exit: an SGLang decode server "
                "needs about 20s after SIGTERM)",
                "# changed: terminationGracePeriodSeconds 30 -> 45 (sglang-pd-exit: G rises "
                "with R, so that D stays 25s)",
            ],
        ),
        # an explicit --exit-reserve under the advice is raised too, and named
        (
            ("--grace", "60", "--exit-reserve", "8", "--engine", "sglang", "--role", "prefill"),
            72,
            20,
            [
                "# changed: --exit-reserve 8 -> 20 (sglang-pd-exit: an SGLang prefill server "
                "needs about 20s after SIGTERM)",
                "# changed: terminationGracePeriodSeconds 60 -> 72 (sglang-pd-exit: G rises "
                "with R, so that D stays 52s)",
            ],
        ),
        # values that follow the advice stay
        (("--grace", "45", "--exit-reserve", "20", "--engine", "sglang", "--role", "decode"),
         45, 20, []),
    ],
)  # fmt: skip
def test_yaml_applies_the_roles_advice(
    hook: Hook, args: tuple[str, ...], grace: int, reserve: int, changed: list[str]
) -> None:
    run = hook("plan", *args, "--output", "yaml")
    spec, _, params = fragment(run)
    assert spec.termination_grace_period_seconds == grace
    assert params["exit_reserve"] == reserve
    assert comments(run, "changed") == changed
    assert comments(run, "warning") == []  # the advice applied leaves none standing
    # text and json say the same
    data = json.loads(hook("plan", *args, "--output", "json").stdout)
    assert (data["applied"]["grace"], data["applied"]["exit_reserve"]) == (grace, reserve)
    assert [f"# changed: {c['name']} {c['from']} -> {c['to']} ({'; '.join(c['because'])})"
            for c in data["applied"]["changes"]] == changed  # fmt: skip
    text = hook("plan", *args).stdout
    for line in changed:
        assert "  " + line.removeprefix("# changed: ") in text.splitlines()
    assert ("--output yaml applies the advice" in text) is bool(changed)


def test_yaml_comments_the_advice_it_cannot_apply(hook: Hook) -> None:
    """A vLLM prefill's --linger needs a number only the operator knows (the longest KV
    pull); vLLM's --shutdown-timeout is the engine's own flag: both stay comments."""
    run = hook("plan", "--engine", "vllm", "--role", "prefill", "--exit-reserve", "8",
               "--settle", "3", "--output", "yaml")  # fmt: skip
    spec, _, params = fragment(run)
    assert (spec.termination_grace_period_seconds, params["exit_reserve"]) == (30, 8)
    assert params["linger"] == 0
    assert comments(run, "changed") == []
    (_settle, linger, shutdown) = comments(run, "warning")
    assert linger.startswith("# warning: vllm-prefill-linger: ") and "--linger SECONDS" in linger
    assert "suggest --shutdown-timeout 7 (R - 1)" in shutdown


def test_yaml_shutdown_timeout_advice_matches_the_applied_reserve(hook: Hook) -> None:
    """With the engine unknown and a decode role, the SGLang advice raises R to 20;
    the vLLM advice in the same fragment is then R - 1 = 19, not 4."""
    run = hook("plan", "--role", "decode", "--output", "json")
    data = json.loads(run.stdout)
    assert data["applied"]["exit_reserve"] == 20
    run = hook("plan", "--engine", "vllm", "--grace", "45", "--exit-reserve", "20",
               "--settle", "3", "--role", "decode", "--output", "yaml")  # fmt: skip
    _, _, params = fragment(run)
    (_settle, w) = comments(run, "warning")
    assert "--shutdown-timeout 19 (R - 1)" in w and params["exit_reserve"] == 20


def test_yaml_keeps_the_timeline_warnings_as_comments(hook: Hook) -> None:
    run = hook("plan", "--grace", "8", "--settle", "6", "--output", "yaml")
    spec, _, params = fragment(run)
    assert (spec.termination_grace_period_seconds, params["settle"]) == (8, 6)  # not changed
    assert [w.split(":")[1].strip() for w in comments(run, "warning")] == [
        "grace-range",
        "settle-past-deadline",
    ]


def test_yaml_needs_whole_seconds(hook: Hook) -> None:
    run = hook("plan", "--grace", "30.5", "--output", "yaml")
    assert run.code == 2
    assert run.stdout == ""
    assert len(run.stderr.splitlines()) == 1
    assert "terminationGracePeriodSeconds" in run.stderr


@pytest.mark.parametrize(
    "args", [("--grace", "-1"), ("--role", "both"), ("--output", "xml"), ("--confirm", "0")]
)
def test_usage_errors(hook: Hook, args: tuple[str, ...]) -> None:
    run = hook("plan", *args)
    assert run.code == 2
    assert run.stdout == ""
    assert len(run.stderr.splitlines()) == 1
    assert "Traceback" not in run.stderr


def test_yaml_needs_no_yaml_library() -> None:
    """The hook ships without PyYAML: plan writes its YAML by hand."""
    code = (
        "import sys; sys.modules['yaml'] = None\n"
        "from drainhook.cli.main import run\n"
        "sys.exit(run(['plan', '--output', 'yaml']))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=base_env(),
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "terminationGracePeriodSeconds: 30" in proc.stdout


@pytest.mark.parametrize(
    ("engine", "servers", "warned"),
    [("vllm", 4, True), ("auto", 2, True), ("vllm", 1, False), ("vllm", None, False),
     ("sglang", 4, False)],
)  # fmt: skip
def test_several_vllm_api_servers_warn_that_load_sees_one(
    engine: str, servers: int | None, warned: bool
) -> None:
    """CONTRACT §2a: one GET /load reaches one API-server process."""
    p = planning.make_plan(planning.wait_config(engine=engine), api_servers=servers)
    found = [w for w in p.warnings if w.code == "vllm-api-servers"]
    assert bool(found) is warned
    if warned:
        assert f"with {servers} API servers" in found[0].message
        assert f"the other {servers - 1} hold" in found[0].message
        assert not found[0].fixes  # advice, never a value applied
    applied = planning.apply_advice(p)
    assert applied.plan.api_servers == servers  # kept through the applied advice


def test_every_timeline_flag_is_one_row_that_everything_reads() -> None:
    """Issue 58: hook.config.TIMELINE drives `wait`'s and `plan`'s options, plan's
    wait_config, the preStop command and plan's JSON. Each row is in each: a config
    with every flag off its default is written as a preStop that `wait`'s own parser
    reads back to the same config, and shown in the JSON with its value."""
    from drainhook.cli.main import cli
    from drainhook.hook.config import TIMELINE

    ctx = cli.make_context("drainhook", ["plan"], resilient_parsing=True)
    for command in ("wait", "plan"):
        sub = cli.get_command(ctx, command)
        assert sub is not None
        flags = {opt for p in sub.params for opt in p.opts}
        assert {f.flag for f in TIMELINE} <= flags, command
    off = {"grace": 40, "settle": 7, "exit_reserve": 6, "interval": 0.5, "read_timeout": 0.5}
    off |= {"linger": 1, "confirm": 3, "max_wait": 20, "stall_after": 30, "engine": "vllm"}
    assert set(off) == {f.name for f in TIMELINE} == set(planning.TIMELINE)
    config = planning.wait_config(**off)
    assert {f.name: f.of(config) for f in TIMELINE} == off
    command = planning.prestop_command(config)
    assert [w for w in command if w.startswith("--")] == [f.flag for f in TIMELINE]
    _, params, _ = parse_hook(list(command))
    assert planning.wait_config(**{f.name: params[f.name] for f in TIMELINE}) == config
    shown = render.to_json(planning.make_plan(config))
    assert {f.name: shown[f.name] for f in TIMELINE} == off
    # At the defaults, the command is `wait --grace G` alone.
    assert planning.prestop_command(planning.wait_config())[1:] == ("wait", "--grace", "30")


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("--grace", "60", "--engine", "vllm"), 0),  # no warning
        (("--grace", "30", "--engine", "sglang"), 1),  # sglang-exit stands
        (("--grace", "8", "--settle", "5"), 1),  # no-room, and its G: 8 is raised to 12
    ],
)
def test_strict_exits_1_while_a_warning_stands(
    hook: Hook, args: tuple[str, ...], code: int
) -> None:
    """Issue 59: `plan --strict` for CI, its output written all the same; a "raise G"
    gives the number."""
    run = hook("plan", *args, "--strict", "--output", "json")
    assert run.code == code, run.stderr
    warned = json.loads(run.stdout)["warnings"]
    assert bool(warned) is bool(code)
    assert hook("plan", *args).code == 0  # without --strict, warnings never fail
    for w in warned:
        if w["code"] == "no-room":
            assert "raise G to 12 s" in w["reason"]  # 5 + (2 - 1) x 1 + 1 + 5


def test_a_grace_plan_assumed_is_marked_default_as_waits_start_line(hook: Hook) -> None:
    """Neither --grace nor DRAINHOOK_GRACE: G = 30 is plan's assumption, and its header
    and JSON say so (`grace_from`, as `wait`'s start line); either one given: not."""
    assumed = hook("plan")
    assert assumed.stdout.splitlines()[0].startswith("drainhook plan: G=30s (default) S=5s")
    for given in (hook("plan", "--grace", "30"), hook("plan", env={"DRAINHOOK_GRACE": "30"})):
        assert given.stdout.splitlines()[0].startswith("drainhook plan: G=30s S=5s"), given.stdout
    as_json = hook("plan", "--output", "json")
    assert json.loads(as_json.stdout)["grace_from"] == "default"
    given_json = hook("plan", "--grace", "45", "--output", "json")
    assert json.loads(given_json.stdout)["grace_from"] is None


@pytest.mark.parametrize(
    ("engine", "flag"),
    [("vllm", "--enable-server-load-tracking"), ("sglang", "--enable-metrics"), ("auto", None)],
)
def test_plan_names_the_engine_flags_the_hook_reads_through(engine: str, flag: str | None) -> None:
    """Text and YAML name the engine's own flags as inject adds them (JSON already
    lists them): for auto, whose flag is unknown, none."""
    made = planning.make_plan(planning.wait_config(engine=engine))
    text, fragment = render.render(made, "text"), render.render(made, "yaml")
    listed = render.to_json(made)["applied"]["engine_args"]  # type: ignore[index]
    if flag is None:
        assert "reads through" not in text and "# engine flag:" not in fragment
        return
    assert f"the engine's own flags the hook reads through ({engine}):" in text
    assert f"\n  {flag}: " in text and flag in listed
    assert f"# engine flag: {flag} on the engine's command line" in fragment
    assert yaml.safe_load(fragment)["terminationGracePeriodSeconds"] >= 30  # still YAML


RAISE = re.compile(r"raise G to (\d+) s")
G_CODES = {"grace-range", "settle-past-deadline", "no-room", "stall-after-deadline"}


@pytest.mark.parametrize("settle", [0.5, 2.0, 5.0, 12.0, 40.0])
@pytest.mark.parametrize("reserve", [1.0, 5.0, 20.0])
@pytest.mark.parametrize("stall", [None, 30.0])
def test_a_g_the_advice_names_passes_every_floor(
    settle: float, reserve: float, stall: float | None
) -> None:
    """Following "raise G to N" leaves no warning about G: N is past the room the
    reads need and the range's floor (a G of 6 once named was under 15)."""
    for grace in (3.0, 10.0, 16.0):
        values = {"grace": grace, "settle": settle, "exit_reserve": reserve}
        made = planning.make_plan(planning.wait_config(**values, stall_after=stall))
        for warning in made.warnings:
            for named in RAISE.findall(warning.reason):
                again = planning.wait_config(**{**values, "grace": float(named)}, stall_after=stall)
                left = {w.code for w in planning.make_plan(again).warnings} & G_CODES
                assert left == set(), (values, warning.code, named, left)


def test_observe_says_lower_when_it_lowers_a_g_given() -> None:
    lower = planning.Change("grace", 600.0, 40.0, ("observed: G = 40",))
    higher = planning.Change("grace", 30.0, 40.0, ("observed: G = 40",))
    assert lower.text() == "terminationGracePeriodSeconds 600 -> 40, lower (observed: G = 40)"
    assert higher.text() == "terminationGracePeriodSeconds 30 -> 40 (observed: G = 40)"
