"""The rehearsal (rehearsal/, scripts/rehearse), smoke-tested on a strong scale.

Four cells at --scale 0.1 (G = 3 s): no hook and drainhook, on an idle vLLM
engine and under short requests, every part a real process on loopback. The
timings themselves are measured in benchmarks/rehearsal.md, not asserted here
beyond loose bounds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import ROOT, base_env

SCALE = 0.1
Cells = dict[tuple[str, str], dict[str, Any]]
FIELDS = {"strategy", "scenario", "completed", "cut", "refused", "sigterm_at_s", "held_s", "scale"}


@pytest.fixture(scope="module")
def cells() -> Cells:
    out = subprocess.run(
        [
            *(sys.executable, "-m", "rehearsal", "--scale", str(SCALE), "--json"),
            *("--strategies", "none,drainhook", "--scenarios", "idle,short"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=base_env(),
    )
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    return {(r["strategy"], r["scenario"]): r for r in rows}


@pytest.mark.slow
def test_every_cell_reports_the_fields(cells: Cells) -> None:
    assert set(cells) == {
        ("none", "idle"),
        ("drainhook", "idle"),
        ("none", "short"),
        ("drainhook", "short"),
    }
    for row in cells.values():
        assert set(row) >= FIELDS
        assert row["scale"] == SCALE
        assert row["engine_exit"] == "clean"


@pytest.mark.slow
def test_short_requests_drainhook_cuts_none_where_no_hook_cuts(
    cells: Cells,
) -> None:
    mine, none = cells[("drainhook", "short")], cells[("none", "short")]
    # 37 requests (6/s over 6 real seconds); the same ones in both cells.
    assert mine["completed"] == 37
    assert (mine["cut"], mine["refused"]) == (0, 0)
    assert none["cut"] > 0 and none["refused"] > 0
    assert none["completed"] + none["cut"] + none["refused"] == 37
    # No hook: SIGTERM at the delete. drainhook: after the settle, before D (2.5 s here).
    assert none["sigterm_at_s"] < 0.1
    assert 0.5 <= mine["sigterm_at_s"] <= 2.5 + 0.5


@pytest.mark.slow
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
    assert 0.6 - tick <= mine["sigterm_at_s"] <= 0.6 + 1.0
    assert mine["held_s"] >= mine["sigterm_at_s"]
