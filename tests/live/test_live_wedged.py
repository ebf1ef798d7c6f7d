"""What a `stalled` release does for a live vLLM: SIGTERM after the hook returns on a
wedged engine (default mode, `--shutdown-timeout 0`).

One engine, one case: two streams in flight, the EngineCore SIGSTOPped, `wait
--stall-after 5` ends `stalled` (exit 5), and SIGTERM follows at once, as the
kubelet sends it. The engine core goes at once; what the API server does with
the wedged streams' connections decides when the Pod goes (CONTRACT §7): it
stays until the kill while they are open. The case ends the engine.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.live.conftest import Hook, HookThread, wait_for
from tests.live.engine import LONGEST, LiveVllm
from tests.live.streams import Streams, gauges

pytestmark = pytest.mark.live

FREEZE_AT = 2.5  # s after the hook's start
LINGER = 10.0  # s after SIGTERM that an API server holding wedged streams is watched
FLAGS = ("--stall-after", "5", "--interval", "1", "--grace", "60", "--settle", "1",
         "--log-format", "json", "--termination-log", "")  # fmt: skip


@pytest.fixture(scope="module")
def engine(start_engine: Callable[..., Any]) -> Iterator[LiveVllm]:
    with start_engine("wedged") as live:
        yield live


def dead(pid: int) -> bool:
    """The process is gone or a zombie (killed, not yet reaped by its parent)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


@pytest.mark.timeout(300)
def test_sigterm_after_a_stalled_release(hook: Hook, engine: LiveVllm, record: Any) -> None:
    """`stalled` (exit 5), then SIGTERM: the frozen EngineCore is gone within 5 s; the
    streams get no byte after the freeze; the API server either stays while their
    connections are open (then the kill at G ends them) or, in vLLM's other ending of
    the same race, ends both with an error event and `[DONE]` and exits."""
    streams = Streams(engine)
    ended = [streams.send(LONGEST / engine.rate) for _ in range(2)]
    wait_for(lambda: gauges(engine) == (2, 0), 10, "two running requests")
    core = engine.engine_core()
    waiting = HookThread(hook, "wait", "--url", engine.url(), *FLAGS)
    frozen = waiting.stop_at(core, FREEZE_AT)
    run = waiting.join(90)
    summary = json.loads(run.stderr.strip().splitlines()[-1])
    assert (run.code, summary["outcome"]) == (5, "stalled"), run.stderr
    assert summary["after_sigterm"] == "hang-until-kill", run.stderr  # what follows here
    engine.sigterm()
    term = time.monotonic()
    wait_for(lambda: dead(core), 5, "the EngineCore gone after SIGTERM")
    core_gone = time.monotonic() - term
    exited = engine.wait_exit(term + LINGER - time.monotonic())
    exit_s = time.monotonic() - term if exited else None
    if exited:
        for s in ended:  # the race's other ending: an error event, then [DONE]
            assert (s.error, s.done) == (True, True), s
        ending = "errored, exited"
    else:
        for s in ended:  # open, silent since the freeze (what was in flight then aside)
            assert s.ended is None and (s.last_byte or 0) <= frozen + 0.5, s
        engine.kill()  # the kubelet's SIGKILL at G
        streams.close()
        for s in ended:
            assert s.ended is not None and not s.done and s.finish is None, s
        ending = f"stalled, held past SIGTERM + {LINGER:g} s"
    record(
        "SIGTERM after a stalled release (default mode)",
        wait_elapsed_s=round(run.elapsed, 3),
        freeze_to_stalled_s=round(waiting.start + run.elapsed - frozen, 3),
        core_gone_s=round(core_gone, 3),
        exit_s=None if exit_s is None else round(exit_s, 3),
        ending=ending,
    )
