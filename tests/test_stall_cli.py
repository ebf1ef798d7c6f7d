"""Stall detection end to end (CONTRACT §2b, §5): the real CLI (and the packaged
binary, when DRAINHOOK_BINARY names it) against loopback servers whose
progress counters are frozen or moving.

A shrunk timeline: S = 0.2 s, I = 0.1 s, W = 0.6 s, D = 2.5 s. A frozen engine
is released `stalled` (exit 5) at about S + W, long before D; every healthy
case (moving counters, work waiting outside the engine, no counters at all,
W off) runs to D and exits 3, as it would without stall detection, which is
what tells a hook that calls everything stalled from one that does it right.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from drainhook.hook.termination import HANG_SAID, HANG_UNTIL_KILL, HANG_WHY
from tests.conftest import HOOK_LATE, SPAWN_LATE, late
from tests.support.logs import fields
from tests.support.loopback import Behaviour, Loopback, read_request, response_bytes, sample, serve
from tests.support.process import Hook, Run

SETTLE, INTERVAL, WINDOW = 0.2, 0.1, 0.6
D = 2.5
TIMELINE = ("--settle", str(SETTLE), "--interval", str(INTERVAL), "--read-timeout", "0.3",
            "--grace", "3", "--exit-reserve", "0.5")  # fmt: skip
TICK = 0.011  # the kernel's resolution of the process start

# vLLM V1 /metrics: 2 running, 1 waiting; of the waiting, `deferred` wait for a KV pull.
BODY = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="m"}} {running}
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}
# TYPE vllm:num_requests_waiting_by_reason gauge
vllm:num_requests_waiting_by_reason{{engine="0",model_name="m",reason="capacity"}} {capacity}
vllm:num_requests_waiting_by_reason{{engine="0",model_name="m",reason="deferred"}} {deferred}
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{engine="0",model_name="m"}} {tokens}
vllm:generation_tokens_created{{engine="0",model_name="m"}} 1.7e+09
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_count{{engine="0",model_name="m"}} {steps}
"""


def body(
    running: int = 2, waiting: int = 1, deferred: int = 0, tokens: int = 500, steps: int = 50
) -> bytes:
    text = BODY.format(
        running=running,
        waiting=waiting,
        capacity=waiting - deferred,
        deferred=deferred,
        tokens=float(tokens),
        steps=float(steps),
    )
    return text.encode()


FROZEN = body()


def moving() -> Behaviour:
    """Each read sees a token more than the last: a healthy, slow engine."""
    served = 0

    def behaviour(conn: socket.socket) -> None:
        nonlocal served
        served += 1
        read_request(conn)
        conn.sendall(response_bytes(body(tokens=500 + served, steps=50 + served)))

    return behaviour


def wait(hook: Hook, url: str, *extra: str, env: dict[str, str] | None = None) -> Run:
    return hook("wait", "--url", url, *TIMELINE, *extra, env=env, timeout=15)


def assert_stalled(run: Run) -> dict[str, str]:
    assert run.code == 5, run.stderr
    summary = fields(run.summary)
    assert (summary["outcome"], summary["exit"]) == ("stalled", "5"), run.stderr
    # The window opens at the first read (S) and closes W later: S + W, never before.
    bound = late(SETTLE + WINDOW + INTERVAL, SPAWN_LATE, run.starved)
    assert SETTLE + WINDOW - TICK <= run.elapsed <= bound  # and so before D
    return summary


def assert_held_to_d(run: Run) -> None:
    assert run.code == 3, run.stderr
    assert fields(run.summary)["outcome"] == "deadline", run.stderr
    assert D - 0.1 <= run.elapsed <= late(D, SPAWN_LATE, run.starved)


@pytest.mark.reads
def test_frozen_counters_are_released_stalled_at_s_plus_w(hook: Hook, tmp_path: Path) -> None:
    message = tmp_path / "termination-log"
    with Loopback(serve(FROZEN)) as srv:
        run = wait(hook, srv.url, "--stall-after", str(WINDOW), "--termination-log", str(message))
    summary = assert_stalled(run)
    reads = [fields(line) for line in run.lines if " read=" in line]
    assert all(r["verdict"] == "busy" and r["in_flight"] == "3" for r in reads)
    assert len(reads) >= 2 and srv.connections == len(reads)
    # The summary and the termination message name the frozen counters with their values.
    for text in (summary["reason"], message.read_text()):
        assert "vllm:generation_tokens_total=500" in text
        assert "vllm:iteration_tokens_total_count=50" in text
    assert message.read_text().startswith("drainhook: stalled at ")
    # vLLM's requests of a wedged engine hang after SIGTERM until the kill at G (its API
    # server stays while their clients are connected): the summary and message say so.
    assert summary["after_sigterm"] == HANG_UNTIL_KILL
    assert message.read_text().rstrip("\n").endswith(HANG_SAID)


def test_the_json_summary_carries_the_stall(hook: Hook) -> None:
    with Loopback(serve(FROZEN)) as srv:
        run = wait(hook, srv.url, "--stall-after", str(WINDOW), "--log-format", "json")
    assert run.code == 5, run.stderr
    summary = json.loads(run.summary)
    assert (summary["outcome"], summary["exit"]) == ("stalled", 5)
    assert (summary["after_sigterm"], summary["after_sigterm_why"]) == (HANG_UNTIL_KILL, HANG_WHY)
    stall = summary["stall"]
    assert stall["counters"] == {
        "vllm:generation_tokens_total": 500.0,
        "vllm:iteration_tokens_total_count": 50.0,
    }
    assert (stall["work"], stall["in_flight"], stall["stall_after"]) == (3, 3, WINDOW)
    assert WINDOW <= stall["seconds"] <= late(WINDOW + INTERVAL, HOOK_LATE, run.starved)


def test_the_variable_and_exit_zero(hook: Hook) -> None:
    with Loopback(serve(FROZEN)) as srv:
        run = wait(hook, srv.url, "--exit-zero", env={"DRAINHOOK_STALL_AFTER": str(WINDOW)})
    assert run.code == 0, run.stderr
    assert fields(run.summary)["outcome"] == "stalled"


@pytest.mark.parametrize(
    ("serving", "extra"),
    [
        pytest.param(moving, ("--stall-after", str(WINDOW)), id="moving-counters"),
        # A KV pull (or a grammar compilation) with counters flat: every request
        # is deferred, waiting on something outside the engine.
        pytest.param(
            lambda: serve(body(running=0, waiting=3, deferred=3)),
            ("--stall-after", str(WINDOW)),
            id="kv-wait",
        ),
        pytest.param(lambda: serve(FROZEN), ("--stall-after", "0"), id="off"),
        pytest.param(lambda: serve(FROZEN), (), id="default-w-past-d"),
    ],
)
def test_healthy_or_off_holds_to_the_deadline(
    hook: Hook, serving: Callable[[], Behaviour], extra: tuple[str, ...]
) -> None:
    with Loopback(serving()) as srv:
        run = wait(hook, srv.url, *extra)
    assert_held_to_d(run)
    assert "stall" not in run.summary


def test_an_engine_without_progress_counters_never_stalls_and_says_so_once(hook: Hook) -> None:
    busy = sample("sglang-mp-dp2.txt")  # busy 6, no forward pass yet: no counter
    with Loopback(serve(busy)) as srv:
        run = wait(hook, srv.url, "--stall-after", str(WINDOW), "--source", "metrics")
    assert_held_to_d(run)
    said = [line for line in run.lines if "no progress counter" in line]
    assert len(said) == 1 and said[0].startswith("drainhook warning=")


# -- probe and plan ----------------------------------------------------------------


def test_probe_json_progress_tells_a_frozen_engine_from_a_moving_one(hook: Hook) -> None:
    def two(server: Behaviour) -> tuple[dict[str, float], dict[str, float]]:
        with Loopback(server) as srv:
            runs = [hook("probe", "--url", srv.url, "--json") for _ in range(2)]
        for run in runs:
            assert run.code == 1, run.stderr  # busy
        first, second = (json.loads(run.stdout) for run in runs)
        assert first["waiting_outside"] == 0
        return first["progress"], second["progress"]

    a, b = two(serve(FROZEN))
    assert a == b == {"vllm:generation_tokens_total": 500, "vllm:iteration_tokens_total_count": 50}
    a, b = two(moving())
    assert b["vllm:generation_tokens_total"] == a["vllm:generation_tokens_total"] + 1


def test_probe_text_shows_each_progress_counter(hook: Hook) -> None:
    with Loopback(serve(body(deferred=1))) as srv:
        run = hook("probe", "--url", srv.url)
    assert run.code == 1, run.stderr
    lines = run.stdout.splitlines()
    assert "progress   2 counters that move while the engine works" in lines
    assert "waiting    1 on something outside the engine (never a stall)" in lines
    assert any(
        line.split() == ['vllm:generation_tokens_total{engine="0",model_name="m"}', "500"]
        for line in lines
    )


def test_plan_shows_w_and_warns_when_it_cannot_trigger(hook: Hook) -> None:
    long = hook("plan", "--grace", "210", "--output", "json")
    assert long.code == 0, long.stderr
    data = json.loads(long.stdout)
    assert (data["stall_after"], data["instants"]["stall_earliest"]) == (120, 125)
    assert [w["code"] for w in data["warnings"]] == []
    text = hook("plan", "--grace", "210").stdout
    assert "t=125s" in text and "`stalled`" in text
    short = hook("plan", "--stall-after", "30")  # G = 30: D = 25 < S + W = 35
    assert short.code == 0, short.stderr
    assert "stall-after-deadline:" in short.stdout
    assert "--stall-after 30" in short.stdout  # the preStop command carries it
    default = hook("plan")  # the default W with the default G: off, shown, not warned
    assert "stall detection off" in default.stdout and "warnings: none" in default.stdout


SGLANG_FROZEN = b"""# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 2.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 0.0
# TYPE sglang:realtime_tokens_total counter
sglang:realtime_tokens_total{model_name="m",mode="decode",tp_rank="0",pp_rank="0"} 900.0
"""


def test_a_stalled_sglang_says_nothing_of_vllm_s_shutdown(hook: Hook) -> None:
    """`after_sigterm` is vLLM's measured shutdown: a stalled SGLang (its own drain after
    SIGTERM, read in its code) is released `stalled` without it."""
    with Loopback(serve(SGLANG_FROZEN)) as srv:
        run = wait(hook, srv.url, "--stall-after", str(WINDOW), "--log-format", "json")
    assert run.code == 5, run.stderr
    summary = json.loads(run.summary)
    assert (summary["outcome"], summary["stall"]["in_flight"]) == ("stalled", 2)
    assert summary["stall"]["counters"] == {"sglang:realtime_tokens_total": 900.0}
    assert (summary["after_sigterm"], summary["after_sigterm_why"]) == (None, None)
