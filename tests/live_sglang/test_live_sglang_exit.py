"""SGLang's exit after the hook: `plan`'s advice for SGLang against the live engine.

One engine, one case: `wait --settle 0.5` on the idle engine returns `drained`
within S + I (the confirming read I/4 after the first, the server's count at
0), SIGTERM at once (the conformance episode `sglang-idle-sigterm`), and the process exits
within the exit reserve `plan --engine sglang` advises, so the kubelet's kill
never comes first. Ends the engine.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import SPAWN_LATE, late
from tests.live.conftest import Hook
from tests.support import conformance

pytestmark = pytest.mark.live


def test_sglang_exits_within_the_advised_reserve(
    start_engine: Callable[..., Any], hook: Hook, record: Any
) -> None:
    advice = hook("plan", "--engine", "sglang", "--grace", "30", "--output", "json")
    assert advice.code in (0, 1), advice.stderr
    reserve = json.loads(advice.stdout)["applied"]["exit_reserve"]
    episode = conformance.EPISODES["sglang-idle-sigterm"]
    with start_engine("idle") as engine:
        run = hook("wait", "--url", engine.url(), "--grace", "30", "--settle", "0.5")
        assert run.code == 0 and "outcome=drained" in run.stderr, run.stderr
        assert run.elapsed <= late(0.5 + 1.0, SPAWN_LATE, run.starved), run.stderr
        seen = conformance.run(engine, episode)
    record(
        "sglang SIGTERM after wait (idle)",
        wait_elapsed_s=round(run.elapsed, 3),
        advised_reserve_s=reserve,
        **conformance.numbers(seen),
    )
    assert conformance.mismatch(seen, episode) == [], conformance.summary(seen)
    assert seen.exit is not None and seen.exit <= reserve - 1.0, (seen.exit, reserve)
