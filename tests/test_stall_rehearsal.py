"""Stall detection in the simulated engine and the rehearsal (CONTRACT §2b).

The engine's progress counters advance while it streams, stay flat through a
long prefill and a KV pull (the pull shown as deferred waiting), and freeze,
/metrics still answering, when the engine wedges. Then real rehearsal cells
at --scale 0.1: drainhook (--stall-after 10, the scenarios' W) releases a
wedged replica at S + W, where kserve's recipe holds it to G; in the two
healthy flat stretches it releases nothing early (cut 0, exit 0), where a
hook that took flat counters for a stall, or counted the KV pull, would cut
the request.
"""

from __future__ import annotations

import http.client
import threading
import time
from typing import Any

import pytest

from drainhook.engines.exposition import scan
from drainhook.engines.verdict import Verdict
from rehearsal import scenarios
from rehearsal.timeline import INTERVAL, KSERVE_GRACE, SETTLE
from sim import EngineConfig, SimEngine, SimServer, complete
from tests.conftest import POD_LATE, WAKE_LATE, late
from tests.support.rehearsal import SCALE, rehearse
from tests.support.waits import until

TOKEN = 0.02


def metrics(port: int) -> tuple[float | None, dict[str, float], float]:
    """In flight, each progress counter summed, and the external waiting, as the hook reads them."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/metrics")
        body = conn.getresponse().read()
    finally:
        conn.close()
    found = scan(body)
    assert found.verdict in (Verdict.IDLE, Verdict.BUSY) and found.progress is not None
    totals: dict[str, float] = {}
    for c in found.progress.counters:
        totals[c.name] = totals.get(c.name, 0.0) + c.value
    return found.in_flight, totals, found.progress.external


def stream(server: SimServer, tokens: int) -> threading.Thread:
    t = threading.Thread(
        target=complete, args=(server.port, {"max_tokens": tokens}), kwargs={"timeout": 10}
    )
    t.start()
    return t


GEN, STEPS, PROMPT = (
    "vllm:generation_tokens_total",
    "vllm:iteration_tokens_total_count",
    "vllm:prompt_tokens_total",
)


def test_counters_advance_while_it_streams_and_freeze_with_it() -> None:
    engine = SimEngine(EngineConfig(dp=1, token_seconds=TOKEN, freeze_after=0.3))
    with SimServer(engine) as server:
        t = stream(server, 100)  # 2 s of tokens: frozen long before its end
        early = until(lambda: metrics(server.port)[1], lambda c: c[GEN] > 0)
        later = until(lambda: metrics(server.port)[1], lambda c: c[GEN] > early[GEN])
        assert later[STEPS] > early[STEPS]
        assert later[PROMPT] == 512  # once, at the first token
        assert engine.frozen.wait(1)
        frozen = []
        for _ in range(3):
            time.sleep(2 * TOKEN)  # flat over what would be steps: time must pass
            frozen.append(metrics(server.port))
        assert all(f == frozen[0] for f in frozen) and frozen[0][0] == 1  # still busy, flat
        engine.sigterm()  # vLLM's default: the engine core dies, what is left stalls
        t.join(0.5)
        assert t.is_alive()  # no abort, no [DONE]: the stream is held open
        engine.kill()  # the kubelet's SIGKILL at G
        t.join(5)
        assert not t.is_alive()


def test_a_long_prefill_is_flat_then_moves_and_a_kv_pull_is_deferred() -> None:
    engine = SimEngine(EngineConfig(dp=1, token_seconds=TOKEN, prefill_seconds=0.3))
    with SimServer(engine) as server:
        t = stream(server, 20)
        prefill = until(lambda: metrics(server.port), lambda m: m[0] == 1)
        assert prefill == (1, {PROMPT: 0, GEN: 0, STEPS: 0}, 0)
        t.join(5)
        _, after, _ = metrics(server.port)
        assert after[GEN] > 0 and after[PROMPT] == 512
    engine = SimEngine(EngineConfig(dp=1, token_seconds=TOKEN, kv_wait_seconds=0.3))
    with SimServer(engine) as server:
        t = stream(server, 5)
        in_flight, counters, outside = until(lambda: metrics(server.port), lambda m: m[0] == 1)
        assert (in_flight, outside, counters[GEN]) == (1, 1, 0)  # all its work waits outside
        t.join(5)
        assert metrics(server.port)[1][GEN] == 5


# -- the rehearsal ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cells() -> dict[tuple[str, str], dict[str, Any]]:
    rows = rehearse("--strategies", "drainhook,kserve", "--scenarios", "hung,long-prefill,kv-wait")
    return {(r["strategy"], r["scenario"]): r for r in rows}


def test_a_wedged_replica_is_released_at_s_plus_w(cells: dict[tuple[str, str], Any]) -> None:
    w = scenarios.BY_KEY["hung"].stall_after
    assert w is not None
    mine, kserve = cells[("drainhook", "hung")], cells[("kserve", "hung")]
    assert mine["hook_exit"] == 5
    released = mine["hook_returned_s"]
    # The cells run in a network namespace of their own: POD_LATE's level (conftest).
    bound = late(SCALE * (SETTLE + w + INTERVAL), POD_LATE)
    assert SCALE * (SETTLE + w) - 0.02 <= released <= bound
    # kserve's recipe holds the wedged replica to G: its sleep, then vLLM's 45 s drain of
    # requests that never end.
    assert kserve["held_s"] >= SCALE * KSERVE_GRACE - 0.1
    # SIGTERM as the hook returns: vLLM kills its (wedged) engine core then, not at G.
    assert mine["sigterm_at_s"] <= late(released, WAKE_LATE)
    # But its API server stays while the wedged streams' clients are connected (CONTRACT
    # §7; tests/live/test_live_wedged.py: a live vLLM with a frozen EngineCore did not
    # exit in 10 s after SIGTERM): the Pod is still held to its G, whichever recipe ran.
    assert mine["engine_exit"] == "sigkill"
    assert mine["held_s"] >= SCALE * mine["grace_s"] - 0.1


@pytest.mark.parametrize("scenario", ["long-prefill", "kv-wait"])
def test_healthy_flat_counters_release_nothing_early(
    cells: dict[tuple[str, str], Any], scenario: str
) -> None:
    mine = cells[("drainhook", scenario)]
    assert (mine["cut"], mine["refused"], mine["completed"]) == (0, 0, 1)
    assert mine["hook_exit"] == 0  # drained, after the request: never `stalled`
