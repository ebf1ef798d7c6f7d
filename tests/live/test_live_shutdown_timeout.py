"""drainhook against a live vLLM that drains on SIGTERM (`--shutdown-timeout N`).

Two engines, each ended by its case's SIGTERM:
- N = 4 s, one short and one long stream in flight and a new request during the drain
  (conformance `timeout-short-long-late`): the short one completes, the new
  one gets HTTP 500, /health and /metrics answer 200, the long one stalls at N;
- N = 45 s (KServe's and llm-d's), `wait` returns `drained` after a stream,
  SIGTERM at once (conformance `timeout-idle-sigterm`): the drained engine
  exits once its engine core has torn itself down (4 to 6.3 s, by machine), not at N.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.live.conftest import Hook, wait_for
from tests.live.streams import Streams, assert_complete, gauges
from tests.support import conformance

pytestmark = pytest.mark.live

FLAGS = ("--shutdown-timeout", f"{conformance.N:.0f}")


def test_drain_with_short_and_long_streams_and_a_new_request(
    start_engine: Callable[..., Any], record: Any
) -> None:
    episode = conformance.EPISODES["timeout-short-long-late"]
    with start_engine("shutdown-timeout-streams", *FLAGS) as engine:
        seen = conformance.run(engine, episode)
    record("shutdown-timeout: short + long + new request", **conformance.numbers(seen))
    short = seen.streams[0]
    ends = seen.stream_ends
    assert ends[0] is not None and ends[0] > 0, f"the short stream ended before SIGTERM: {ends}"
    assert (short.done, short.tokens) == (True, short.asked), short  # every token asked came
    assert [s.status for s in seen.late] == [500], seen.late
    assert seen.metrics_in_flight == 2, seen.metrics_in_flight  # both still counted then
    assert conformance.mismatch(seen, episode) == [], conformance.summary(seen)


def test_sigterm_right_after_wait_returns(
    start_engine: Callable[..., Any], hook: Hook, record: Any
) -> None:
    episode = conformance.EPISODES["timeout-idle-sigterm"]
    flags = ("--shutdown-timeout", f"{episode.shutdown_timeout:.0f}")
    with start_engine("shutdown-timeout-idle", *flags) as engine:
        streams = Streams(engine)
        streams.send(3.0)
        wait_for(lambda: gauges(engine) == (1, 0), 10, "one running request")
        run = hook("wait", "--url", engine.url(), "--grace", "30", "--settle", "1")
        assert run.code == 0, run.stderr
        assert_complete(streams.join())
        seen = conformance.run(engine, episode)
    record("SIGTERM after wait (shutdown-timeout 45)", **conformance.numbers(seen))
    assert conformance.mismatch(seen, episode) == [], conformance.summary(seen)
