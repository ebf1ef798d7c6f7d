"""The rehearsal (rehearsal/, scripts/rehearse): its accounting as pure functions, and a
few cells on a strong scale.

The rollout's arithmetic (one replica at a time, the start accounted), the
projection to 64 and 512 replicas, the recipes built from `drainhook plan`,
which cells a matrix runs and the claims' rules are checked on made-up
numbers. Then real cells at --scale 0.1 (G = 3 s): no hook and drainhook on an
idle vLLM engine and under short requests, and an 8-replica rollout, every
part a real process on loopback, each cell in its own network namespace. The
timings themselves are measured in benchmarks/rehearsal.md, not asserted here
beyond loose bounds.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import pytest

from rehearsal import cell as cell_module
from rehearsal import claims, kubelet, report, rollout, scenarios, strategies
from rehearsal import run as runs
from rehearsal.matrix import jobs
from rehearsal.record import Cell, Read, Request
from rehearsal.strategies import HookTarget
from rehearsal.timeline import POD_ENV, Scale
from tests.conftest import POD_LATE, WAKE_LATE, late
from tests.support.rehearsal import SCALE, rehearse

Cells = dict[tuple[str, str], dict[str, Any]]
FIELDS = {"strategy", "scenario", "completed", "cut", "refused", "sigterm_at_s", "held_s", "scale"}
PLAN_JSON = {
    "grace": 60,
    "settle": 5,
    "exit_reserve": 5,
    "interval": 1,
    "read_timeout": 1,
    "command": ["/usr/local/bin/drainhook", "wait", "--grace", "60", "--engine", "vllm"],
    "applied": {"engine_args": ["--shutdown-timeout", "4"]},
}


# ---- the rollout's accounting ----------------------------------------------------------------


def test_rollout_steps_one_replica_after_another() -> None:
    steps = rollout.steps([10.0, 20.0, 5.0], start=60.0)
    assert [(s.delete, s.exit, s.ready) for s in steps] == [
        (0.0, 10.0, 70.0),
        (70.0, 90.0, 150.0),
        (150.0, 155.0, 215.0),
    ]
    assert rollout.held_total([10.0, 20.0, 5.0]) == 35.0
    assert rollout.duration([10.0, 20.0, 5.0], 60.0) == 215.0 == steps[-1].ready


def test_fleet_projection_is_the_mean_replica_times_the_fleet() -> None:
    # 8 replicas held 10 and 14 s alternately (mean 12), 56 requests: 50 completed,
    # 4 cut, 2 refused.
    holds = [10.0, 14.0] * 4
    for replicas in (8, 64, 512):
        p = rollout.project(holds, (50, 4, 2), replicas, start=60.0)
        assert p.held_total == pytest.approx(12.0 * replicas)
        assert p.rollout == pytest.approx(72.0 * replicas)
        assert (p.completed, p.cut, p.refused) == pytest.approx(
            (50 * replicas / 8, 4 * replicas / 8, 2 * replicas / 8)
        )
    assert rollout.project(holds, (50, 4, 2), 8, 60.0).held_total == rollout.held_total(holds)
    with pytest.raises(ValueError):
        rollout.project([], (0, 0, 0), 64, 60.0)


def cell(strategy: str = "drainhook", **fields: Any) -> Cell:
    values: dict[str, Any] = {
        "strategy": strategy,
        "scenario": "rollout",
        "scale": 0.5,
        "completed": 7,
        "cut": 0,
        "refused": 0,
        "router_lag": 2.0,
        "sigterm_at_s": 5.0,
        "held_s": 6.0,
        "hook_returned_s": 5.0,
        "hook_exit": 0,
        "sigkill": False,
        "reads": 8,
        "grace": strategies.BY_KEY[strategy].grace,
    }
    values.update(fields)
    return Cell(**values)


def test_rollout_row_keeps_the_cell_fields_and_adds_the_rollout() -> None:
    cells = [cell(replica=i, held_s=5.0 + i, netns=100 + i) for i in range(8)]
    cells[3] = cell(replica=3, held_s=8.0, cut=2, completed=5, hook_exit=3, sigkill=True)
    row = rollout.Rollout("drainhook", cells, start=60.0).row()
    assert set(row) >= FIELDS | {"replicas", "held_total_s", "rollout_s", "engine_exit"}
    holds_measured = [5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0]
    assert row["replicas"] == 8
    assert row["held_total_s"] == pytest.approx(sum(holds_measured))  # as measured
    # Every hold and 8 starts of 60 real seconds, at scale 0.5.
    assert row["rollout_s"] == pytest.approx(sum(holds_measured) + 8 * 60 * 0.5)
    assert row["held_s"] == pytest.approx(sum(holds_measured) / 8)
    assert (row["completed"], row["cut"], row["refused"]) == (54, 2, 0)
    assert (row["hook_exit"], row["engine_exit"]) == (3, "sigkill")
    assert row["scenario"] == "rollout"


# ---- recipes, and which cells run -------------------------------------------------------------


def test_drainhook_st_takes_the_plans_values_scaled() -> None:
    plan = strategies.parse_plan(PLAN_JSON)
    assert (plan.grace, plan.deadline, plan.shutdown_timeout) == (60.0, 55.0, 4.0)
    recipe = strategies.BY_KEY["drainhook+plan"].resolved(plan)
    assert (recipe.grace, recipe.shutdown_timeout) == (60.0, 4.0)
    argv = recipe.command(HookTarget("http://127.0.0.1:9/metrics", Scale(0.5)), plan)
    assert argv[:6] == [
        sys.executable,
        "-m",
        "drainhook",
        "wait",
        "--url",
        "http://127.0.0.1:9/metrics",
    ]
    flags = dict(zip(argv[6::2], argv[7::2], strict=True))
    assert flags == {
        "--engine": "vllm",
        "--grace": "30",
        "--settle": "2.5",
        "--exit-reserve": "2.5",
        "--interval": "0.5",
        "--read-timeout": "0.5",
    }
    with pytest.raises(ValueError):
        strategies.BY_KEY["drainhook+plan"].resolved(None)


def test_a_plan_without_its_engine_args_is_an_error() -> None:
    broken = {k: v for k, v in PLAN_JSON.items() if k != "applied"}
    with pytest.raises(KeyError):
        strategies.parse_plan(broken)
    no_value = {**PLAN_JSON, "applied": {"engine_args": ["--shutdown-timeout"]}}
    with pytest.raises(IndexError):
        strategies.parse_plan(no_value)


def test_drainhook_plan_itself_advises_what_the_recipe_reads() -> None:
    """The real CLI, as a process: G 60 for vLLM gives R 5 and, with S = 5 s, no
    --shutdown-timeout (0: vLLM's default)."""
    plan = strategies.ask_plan(60.0)
    assert (plan.grace, plan.exit_reserve, plan.deadline, plan.shutdown_timeout) == (
        60.0,
        5.0,
        55.0,
        0.0,
    )
    assert strategies.ask_plan(30.0).shutdown_timeout == 0.0


def test_recipes_set_their_g_and_vllm_flag() -> None:
    by = strategies.BY_KEY
    assert (by["kserve"].grace, by["kserve"].shutdown_timeout, by["kserve"].sleep) == (60, 45, 15)
    assert (by["llm-d"].grace, by["llm-d"].shutdown_timeout, by["llm-d"].sleep) == (75, 45, 15)
    target = HookTarget("http://127.0.0.1:9/metrics", Scale(0.5))
    assert by["kserve"].command(target) == ["sleep", "7.5"]
    assert by["none"].grace == by["drainhook"].grace == 30


def test_vllm_recipes_skip_sglang_and_a_rollout_is_one_cell_per_replica() -> None:
    chosen = [strategies.BY_KEY[k] for k in ("none", "kserve")]
    picked = [scenarios.BY_KEY[k] for k in ("idle", "sglang-lag", "rollout")]
    got = [(j.strategy.key, j.scenario.key, j.replica) for j in jobs(chosen, picked)]
    assert got[:3] == [
        ("none", "idle", None),
        ("kserve", "idle", None),
        ("none", "sglang-lag", None),
    ]
    assert ("kserve", "sglang-lag", None) not in got
    assert [r for k, s, r in got if k == "kserve" and s == "rollout"] == list(range(8))


def test_the_measuring_recipe_runs_only_where_it_measures_and_the_oracle_everywhere() -> None:
    chosen = [strategies.BY_KEY[k] for k in ("drainhook-st", "oracle")]
    picked = [scenarios.BY_KEY[k] for k in ("idle", "long", "sglang-lag")]
    got = {(j.strategy.key, j.scenario.key) for j in jobs(chosen, picked)}
    assert got == {
        ("drainhook-st", "idle"),
        ("oracle", "idle"),
        ("oracle", "long"),
        ("oracle", "sglang-lag"),
    }
    st = strategies.BY_KEY["drainhook-st"]
    assert (st.grace, st.shutdown_timeout, st.deadline(None)) == (30.0, 4.0, 25.0)
    target = HookTarget("http://127.0.0.1:9/metrics", Scale(0.5))
    assert st.command(target) == strategies.BY_KEY["drainhook"].command(target)
    assert strategies.BY_KEY["oracle"].command(target) == []


def test_slipped_requests_are_those_sent_after_the_idle_read_the_hook_released_on() -> None:
    """Measured seconds at scale 0.5: idle reads at 2.5 and 3.0, SIGTERM at 3.01; the
    listener closes 0.125 s later (0.25 real)."""
    reads = [Read(2.0, 2.01, 1), Read(2.5, 2.51, 0), Read(3.0, 3.01, 0)]
    requests = [
        Request("before", 1.0, 1.1, 2.2, "completed"),
        Request("between-reads", 2.6, 2.7, 2.9, "completed"),  # after the first idle read
        Request("after-last", 3.005, None, 9.0, "cut", None),
        Request("at-the-door", 3.1, None, 9.0, "cut"),
        Request("too-late", 3.2, None, 3.2, "refused"),
    ]
    c = cell(sigterm_at_s=3.01, hook_exit=0, read_log=reads, requests=requests)
    assert c.last_idle_read() == 3.0
    assert [r.id for r in c.slipped()] == ["after-last", "at-the-door"]
    assert c.row()["slipped"] == 2
    # A hook that returned at its deadline released on no idle read: nothing slipped.
    assert cell(sigterm_at_s=3.01, hook_exit=3, read_log=reads, requests=requests).slipped() == []


def test_an_http_error_on_a_connection_taken_before_sigterm_is_a_cut(tmp_path: Any) -> None:
    """A request still in the server (uploading, rendering) when the engine core went gets
    HTTP 500 on a connection accepted before SIGTERM: cut. The same after SIGTERM, or a
    refused connection, is a refusal at the door."""
    base = {"first": None, "last": None, "tokens": 0, "finish_reason": None, "end": 9.0}
    records = [
        {"id": "in-the-server", "sent": 1.0, "connected": 1.0, "outcome": "refused",
         "detail": "HTTP 500"},
        {"id": "at-the-door", "sent": 5.5, "connected": 5.5, "outcome": "refused",
         "detail": "HTTP 500"},
        {"id": "no-listener", "sent": 5.6, "connected": None, "outcome": "refused",
         "detail": "connection refused"},
    ]  # fmt: skip
    path = tmp_path / "load.jsonl"
    path.write_text("".join(json.dumps({**base, **r}) + "\n" for r in records))
    got = {r.id: r.outcome for r in cell_module.read_requests(path, 0.0, 5.0)}
    assert got == {"in-the-server": "cut", "at-the-door": "refused", "no-listener": "refused"}


def test_the_invisible_scenarios_hide_their_requests_from_the_gauges() -> None:
    vllm, sglang = scenarios.BY_KEY["invisible"], scenarios.BY_KEY["invisible-sglang"]
    args = vllm.engine.args()
    assert args[args.index("--render") + 1] == "uniform:1:5"
    assert {"--render-serial", "--step-gauges"} <= set(args)
    assert "--load-tracking" not in args  # vLLM's default: /load reads 0
    args = sglang.engine.args()
    assert args[args.index("--refresh-iterations") + 1] == "40"
    assert float(args[args.index("--prefill") + 1]) == 3.0


def test_sglang_deletes_fall_half_way_between_watchdog_looks() -> None:
    sglang, vllm = scenarios.BY_KEY["sglang-lag"], scenarios.BY_KEY["idle"]
    f = Scale(0.5)  # looks every 2.5 s, from origin 100.0
    assert cell_module.delete_time(103.0, vllm, f, 100.0) == 103.0
    assert cell_module.delete_time(103.0, sglang, f, 100.0) == pytest.approx(103.75)
    assert cell_module.delete_time(103.75, sglang, f, 100.0) == pytest.approx(103.75)
    assert cell_module.delete_time(103.76, sglang, f, 100.0) == pytest.approx(106.25)


def test_hooks_run_as_inside_a_pod() -> None:
    env = kubelet.hook_env()
    assert {k: env[k] for k in POD_ENV} == POD_ENV
    assert not [k for k in env if k.startswith("DRAINHOOK_")]


def test_the_router_lag_20_scenario_keeps_its_own_lag() -> None:
    lagging = scenarios.BY_KEY["router-lag-20"]
    assert lagging.lag(2.0) == 20.0 and scenarios.BY_KEY["long"].lag(2.0) == 2.0
    # Its work ends by 24 s: before drainhook's D (25 s at G 30) and drainhook+plan's (55 s).
    assert lagging.ends_before_deadline(2.0, 25.0) and not lagging.ends_before_deadline(2.0, 23.0)


# ---- the claims, as rules on made-up runs -----------------------------------------------------


def made_run(drainhook_hold: float, kserve_hold: float, drainhook_cut: int = 0) -> runs.Run:
    plan = strategies.parse_plan(PLAN_JSON)
    mine = [
        cell("drainhook+plan", replica=i, held_s=drainhook_hold, cut=drainhook_cut)
        for i in range(8)
    ]
    base = [cell("kserve", replica=i, held_s=kserve_hold) for i in range(8)]
    idle = [
        cell("drainhook+plan", scenario="idle", held_s=drainhook_hold, completed=0),
        cell("kserve", scenario="idle", held_s=kserve_hold, completed=0),
    ]
    rollouts = [
        rollout.Rollout("drainhook+plan", mine, 60.0),
        rollout.Rollout("kserve", base, 60.0),
    ]
    return runs.Run(idle, rollouts, Scale(0.5), 1.0, plan)


@pytest.mark.parametrize(
    ("mine", "base", "cut", "holds"),
    [
        (4.0, 8.0, 0, True),  # exactly half
        (4.1, 8.0, 0, False),  # a little more than half
        (2.0, 8.0, 1, False),  # short, but it cut a request kserve did not
    ],
)
def test_rollout_halving_claim(mine: float, base: float, cut: int, holds: bool) -> None:
    claim = claims.rollout_half(made_run(mine, base, cut), "drainhook+plan")
    assert claim is not None and claim.holds is holds
    assert "accelerator-seconds" in claim.evidence
    assert (claim.why == "") is holds


@pytest.mark.parametrize(
    ("mine", "holds"),
    [
        (5.25, True),  # 0.25 s over the oracle's 5 s: ratio 1.05 exactly
        (5.5, False),  # I/2 over: within I/2 + 100 ms, but ratio 1.10 > 1.05
        (5.6, False),  # past I/2 + 100 ms too
    ],
)
def test_rollout_oracle_claim_states_the_hold_against_the_physical_floor(
    mine: float, holds: bool
) -> None:
    """Measured seconds at scale 0.5: the oracle holds each replica 2.5 (5 real s)."""
    run = made_run(mine / 2, 8.0)
    floor = [cell("oracle", replica=i, held_s=2.5) for i in range(8)]
    run.rollouts = [*run.rollouts, rollout.Rollout("oracle", floor, 60.0)]
    plain = [cell("drainhook", replica=i, held_s=mine / 2) for i in range(8)]
    run.rollouts = [*run.rollouts, rollout.Rollout("drainhook", plain, 60.0)]
    claim = claims.rollout_oracle(run, "drainhook")
    assert claim is not None and claim.holds is holds
    assert f"{mine - 5:+.2f} s per replica" in claim.evidence
    assert f"ratio {mine / 5:.3f}" in claim.evidence
    assert claims.rollout_oracle(made_run(3.0, 8.0), "drainhook+plan") is None  # no oracle ran
    table = "\n".join(report.rollout_table(run))
    # Each recipe's hold against the oracle's and kserve's, in seconds and as a ratio.
    assert f"| drainhook | 30 | 8 | {mine:.1f}-{mine:.1f} | {mine:.2f} | {mine - 5:+.2f} |" in table
    # held total, over the oracle's, / oracle, / kserve (whose replicas are held 16 real s)
    over = f"{8 * (mine - 5):+.1f}"
    assert f"| {8 * mine:.1f} | {over} | {mine / 5:.2f} | {mine / 16:.2f} |" in table


def test_idle_halving_claim() -> None:
    assert claims.idle_half(made_run(3.0, 8.0), "drainhook+plan").holds  # type: ignore[union-attr]
    assert not claims.idle_half(made_run(4.5, 8.0), "drainhook+plan").holds  # type: ignore[union-attr]
    assert claims.idle_half(made_run(3.0, 8.0), "drainhook") is None  # it did not run


@pytest.mark.parametrize(
    ("sigterm", "holds"),
    [
        (3.5, True),  # S + I + 1 = 7 real s after the last end (2 s real): 4.5 measured
        (4.5, True),  # exactly 7 real s later
        (4.6, False),  # a little more: held for the lagging gauges
    ],
)
def test_release_after_work_claim(sigterm: float, holds: bool) -> None:
    """Measured seconds at scale 0.5: the last request ends at 1.0 (2 real s)."""
    done = [Request("r1", -1.0, -0.9, 0.5, "completed"), Request("r2", 0.0, 0.1, 1.0, "completed")]
    lag = cell("drainhook", scenario="sglang-lag", sigterm_at_s=sigterm, requests=done)
    run = runs.Run([lag], [], Scale(0.5), 1.0, strategies.parse_plan(PLAN_JSON))
    claim = claims.released_after_work(run, "drainhook")
    assert claim is not None and claim.holds is holds
    assert "`sglang-lag`: last request ended at 2.00 s" in claim.evidence
    assert claims.released_after_work(run, "drainhook+plan") is None  # no such cell


def test_a_wedged_engines_cuts_are_explained_against_no_hooks_refusals() -> None:
    """`hung`: no hook cuts fewer only because its SIGTERM refuses the router's last
    requests; the report says so, with both sums, instead of leaving it bare."""
    hung = [
        cell("none", scenario="hung", completed=0, cut=5, refused=2, held_s=15.0),
        cell("drainhook", scenario="hung", completed=0, cut=7, refused=0, held_s=15.0),
    ]
    run = runs.Run(hung, [], Scale(0.5), 1.0, None)
    (line,) = [ln for ln in claims.better(run) if ln.startswith("- **hung**")]
    assert "no hook (cut 5 vs 7)" in line, line
    assert "refused instead of accepted" in line and "cut + refused 7 against drainhook's 7" in line


def test_a_wedged_engine_held_to_g_is_put_down_to_g_not_the_flag() -> None:
    """`hung` under drainhook+plan (G 60, --shutdown-timeout 4): the others' shorter holds
    are their G of 30 s; the report says so and does not blame the recipe's own flag
    (nor the poll script's read phase)."""
    hung = [
        cell("poll-script", scenario="hung", completed=0, cut=7, held_s=15.0, grace=30.0),
        cell("drainhook+plan", scenario="hung", completed=0, cut=7, held_s=30.0, grace=60.0,
             shutdown_timeout=4.0),
    ]  # fmt: skip
    run = runs.Run(hung, [], Scale(0.5), 1.0, None)
    (line,) = [ln for ln in claims.better(run) if ln.startswith("- **hung**")]
    assert "poll script (held 30.00 s vs 60.00 s, G 30)" in line, line
    assert "until its own G, 30 s here against drainhook+plan's 60" in line, line
    assert "--shutdown-timeout 4` keeps the engine" not in line, line
    assert "phase difference" not in line, line


def test_report_written_again_from_the_kept_data(tmp_path: Any) -> None:
    run = made_run(4.0, 8.0)
    runs.save(tmp_path / "run.jsonl", run)
    again = runs.load(tmp_path / "run.jsonl")
    assert [c.to_json() for c in again.cells] == [c.to_json() for c in run.cells]
    assert [r.row() for r in again.rollouts] == [r.row() for r in run.rollouts]
    assert again.plan == run.plan
    report.write(tmp_path / "rehearsal.md", again, "long")
    text = (tmp_path / "rehearsal.md").read_text()
    assert "| drainhook+plan | 60 | 8 |" in text
    assert (tmp_path / "rehearsal-rollout.svg").read_text().startswith("<svg")


# ---- real cells, on a strong scale ------------------------------------------------------------


@pytest.fixture(scope="module")
def cells() -> Cells:
    rows = rehearse("--strategies", "none,drainhook", "--scenarios", "idle,short")
    return {(r["strategy"], r["scenario"]): r for r in rows}


def test_every_cell_reports_the_fields(cells: Cells) -> None:
    assert set(cells) == {
        ("none", "idle"),
        ("drainhook", "idle"),
        ("none", "short"),
        ("drainhook", "short"),
    }
    for key, row in cells.items():
        assert set(row) >= FIELDS
        assert row["scale"] == SCALE
        # No hook under traffic: SIGTERM with streams in flight, which stall (vLLM kills
        # its engine core, sends no abort) and keep the engine until the SIGKILL at G.
        stalled = key == ("none", "short")
        assert row["engine_exit"] == ("sigkill" if stalled else "clean"), key
        assert (row["stalled"] > 0) is stalled and row["stalled"] <= row["cut"]
        # Every process was up before the timeline started: the delete came on time.
        assert 0 <= row["late_s"] < late(0.0, WAKE_LATE)


def test_each_cell_ran_in_a_network_namespace_of_its_own(cells: Cells) -> None:
    spaces = {row["netns"] for row in cells.values()}
    assert len(spaces) == len(cells)
    assert os.stat("/proc/self/ns/net").st_ino not in spaces


def test_short_requests_drainhook_cuts_none_where_no_hook_cuts(
    cells: Cells,
) -> None:
    mine, none = cells[("drainhook", "short")], cells[("none", "short")]
    # 37 requests (6/s over 6 real seconds); the same ones in both cells.
    assert mine["completed"] == 37
    assert (mine["cut"], mine["refused"]) == (0, 0)
    # Streams running at the delete stall until the kill at G and are cut; those sent
    # once the listener closed are refused.
    assert none["cut"] > 0 and none["refused"] > 0
    assert none["completed"] + none["cut"] + none["refused"] == 37
    # No hook: SIGTERM at the delete, the engine held to G (3 s here) by the stalled
    # streams. drainhook: after the settle, before D (2.5 s here), then a clean exit.
    assert none["sigterm_at_s"] < late(0.0, WAKE_LATE)
    assert none["held_s"] >= 30 * SCALE
    assert 0.5 <= mine["sigterm_at_s"] <= late(2.5, POD_LATE)
    # A clean exit (engine_exit above) soon after SIGTERM, well before G (3 s here).
    assert mine["held_s"] - mine["sigterm_at_s"] < late(30 * SCALE - 2.5, WAKE_LATE)


def test_idle_drainhook_returns_after_two_reads(
    cells: Cells,
) -> None:
    mine = cells[("drainhook", "idle")]
    assert (mine["completed"], mine["cut"], mine["refused"]) == (0, 0, 0)
    assert mine["reads"] == 2
    assert mine["hook_exit"] == 0
    # S + I = 0.6 s at this scale; the bound leaves room for a loaded machine and
    # stays well short of D = 2.5 s, where a hook that never saw idle would return.
    # The hook counts from its process start as the kernel records it, in 10 ms
    # ticks rounded down: up to one tick (0.1 s here, scaled) before the spawn.
    tick = 0.011 / SCALE
    assert 0.6 - tick <= mine["sigterm_at_s"] <= late(0.6, POD_LATE)
    assert mine["held_s"] >= mine["sigterm_at_s"]


def test_a_rollout_is_one_row_per_recipe_with_its_totals() -> None:
    rows = {
        r["strategy"]: r
        for r in rehearse("--strategies", "none,drainhook", "--scenarios", "rollout")
    }
    assert set(rows) == {"none", "drainhook"}
    for row in rows.values():
        assert row["scenario"] == "rollout" and row["replicas"] == 8
        assert len(row["replica_held_s"]) == 8 and len(row["netns"]) == 8
        assert row["held_total_s"] == pytest.approx(sum(row["replica_held_s"]), abs=1e-3)
        assert row["rollout_s"] == pytest.approx(row["held_total_s"] + 8 * 60 * SCALE, abs=1e-3)
        # 7 requests per departing replica (1/s from 4 s before the delete to 2 s after).
        assert row["completed"] + row["cut"] + row["refused"] == 56
    mine, none = rows["drainhook"], rows["none"]
    assert (mine["completed"], mine["cut"], mine["refused"]) == (56, 0, 0)
    assert none["cut"] + none["refused"] > 0
    # No hook: SIGTERM at each delete. drainhook: not before the settle (0.5 s here), and
    # on average well before D (2.5 s), where a hook that never saw idle would return.
    assert none["sigterm_at_s"] < late(0.0, WAKE_LATE)
    assert min(mine["replica_held_s"]) > 5.0 * SCALE
    assert mine["sigterm_at_s"] < late(25 * SCALE - POD_LATE, POD_LATE)


def test_the_report_shows_no_file_names_from_the_command_line() -> None:
    argv = ["--data", "run.jsonl", "--scale", "0.5", "--report=out.md", "--json"]
    assert runs.shown_argv(argv) == "--scale 0.5 --json"
