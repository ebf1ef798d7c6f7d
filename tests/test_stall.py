"""The stall rule (CONTRACT §2b) under a fake clock, table-tested at its
boundaries, then the scanner's progress counters on real text, then the drain
loop ending `stalled`.

Times are seconds from the hook's start, as the loop hands them to the watch.
Each case is told apart from what a broken rule would give: a rule that never
stalls fails the W and W + ε rows; one that counts from the first read
whatever moved fails the moved-once, reset and idle rows; one that counts
external waiting fails the deferred rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import pytest

from drainhook.engines.exposition import scan
from drainhook.engines.loads import scan_loads
from drainhook.engines.verdict import Progress, Reading, Series, Verdict
from drainhook.hook.config import Timeline
from drainhook.hook.drain import Outcome, drain
from drainhook.hook.run import exit_code
from drainhook.hook.stall import Stall, StallWatch
from drainhook.reading.sources import EngineReader
from tests.support.clock import Clock
from tests.support.loopback import sample

W = 30.0
EPS = 1e-6
S = 5.0
GEN = "vllm:generation_tokens_total"
ITER = "vllm:iteration_tokens_total_count"
LABELS = (("engine", "0"), ("model_name", "m"))


def busy(
    work: float,
    counters: Mapping[str, float] | None = None,
    *,
    external: float = 0.0,
    verdict: Verdict = Verdict.BUSY,
) -> Reading:
    """A counted reading with `work` in flight and these progress counters
    (None: the body had none at all)."""
    found = tuple(Series(n, LABELS, v) for n, v in (counters or {}).items())
    progress = Progress(found, external)
    return Reading(verdict, "vllm", work, (), None, 1.0, progress=progress)


def idle(counters: Mapping[str, float]) -> Reading:
    return busy(0.0, counters, verdict=Verdict.IDLE)


def feed(watch: StallWatch, reads: Sequence[tuple[float, Reading]]) -> list[Stall | None]:
    return [watch.observe(t, r) for t, r in reads]


FLAT = {GEN: 100.0, ITER: 10.0}


@pytest.mark.parametrize(
    ("at", "stalled"),
    [
        pytest.param(S + W - EPS, False, id="W-eps"),
        pytest.param(S + W, True, id="W"),
        pytest.param(S + W + EPS, True, id="W+eps"),
    ],
)
def test_the_window_closes_at_exactly_w(at: float, stalled: bool) -> None:
    watch = StallWatch(W)
    got = feed(watch, [(S, busy(2, FLAT)), (S + 1, busy(2, FLAT)), (at, busy(2, FLAT))])
    assert got[:2] == [None, None]
    assert (got[2] is not None) is stalled
    if stalled:
        stall = got[2]
        assert stall is not None
        assert stall.seconds == pytest.approx(at - S)
        assert (stall.work, stall.in_flight, stall.after) == (2, 2, W)
        assert stall.counters == FLAT  # the frozen counters, their values


@pytest.mark.parametrize(
    ("name", "second", "first_stall"),
    [
        # One counter moves once inside the window: the window opens again there.
        pytest.param("moved-once", {GEN: 101.0, ITER: 10.0}, S + 10 + W, id="moved-once"),
        # A series that appears (SGLang's labelled counters do at their first
        # increment) is a move too.
        pytest.param("appeared", {**FLAT, "vllm:prompt_tokens_total": 5.0}, S + 10 + W, id="new"),
        # A counter that goes down is a reset: the window opens again, as after a move.
        pytest.param("reset", {GEN: 3.0, ITER: 10.0}, S + 10 + W, id="reset"),
        # A series that goes away (an engine restarted without it) is a reset.
        pytest.param("gone", {GEN: 100.0}, S + 10 + W, id="gone"),
    ],
)
def test_a_change_inside_the_window_opens_it_again(
    name: str, second: dict[str, float], first_stall: float
) -> None:
    notes: list[str] = []
    watch = StallWatch(W, notes.append)
    reads = [(S, busy(2, FLAT)), (S + 10, busy(2, second))]
    reads += [(t, busy(2, second)) for t in (S + W, first_stall - EPS, first_stall)]
    got = feed(watch, reads)
    assert got[:4] == [None] * 4  # S + W itself is not a stall: the window opened at S + 10
    assert got[4] is not None and got[4].seconds == pytest.approx(W)
    assert any("reset" in n for n in notes) == (name in ("reset", "gone"))


def test_a_reset_is_neither_progress_nor_a_stall_at_that_read() -> None:
    watch = StallWatch(W)
    got = feed(
        watch,
        [(S, busy(2, FLAT)), (S + W + 5, busy(2, {GEN: 1.0, ITER: 1.0}))],
    )
    assert got == [None, None]  # W has passed, but the read that reset cannot stall
    assert watch.observe(S + 2 * W + 5, busy(2, {GEN: 1.0, ITER: 1.0})) is not None


def test_a_target_without_progress_counters_never_stalls_and_says_so_once() -> None:
    notes: list[str] = []
    watch = StallWatch(W, notes.append)
    got = feed(watch, [(S + k * W, busy(2)) for k in range(5)])
    assert got == [None] * 5
    assert len(notes) == 1 and "no progress counter" in notes[0]


def test_counters_that_could_not_be_read_decide_nothing() -> None:
    watch = StallWatch(W)
    unreadable = Reading(Verdict.BUSY, "vllm", 2.0, (), None, 1.0, progress=None)
    assert feed(watch, [(S, busy(2, FLAT)), (S + W, unreadable)]) == [None, None]
    assert watch.observe(S + W + 1, busy(2, FLAT)) is not None  # the window stayed open


@pytest.mark.parametrize(
    ("work", "external", "stalls"),
    [
        pytest.param(3.0, 3.0, False, id="all-deferred"),  # every request waits on a KV pull
        pytest.param(3.0, 5.0, False, id="external-over-work"),  # never below 0
        pytest.param(4.0, 3.0, True, id="one-running-beside-deferred"),
    ],
)
def test_work_waiting_outside_the_engine_never_counts(
    work: float, external: float, stalls: bool
) -> None:
    watch = StallWatch(W)
    reads = [(S + t, busy(work, FLAT, external=external)) for t in (0.0, W / 2, W, 2 * W)]
    got = feed(watch, reads)
    assert (got[2] is not None) is stalls and (got[3] is not None) is stalls
    if stalls:
        assert got[2] is not None and got[2].work == work - external


def test_idle_and_unknown_reads() -> None:
    """An idle read closes the window (work that comes back starts it anew); a read
    without a count changes nothing and decides nothing."""
    watch = StallWatch(W)
    unknown = Reading.failed(Verdict.UNKNOWN, "read timed out", 1000.0)
    got = feed(
        watch,
        [(S, busy(1, FLAT)), (S + 1, idle(FLAT)), (S + 2, busy(1, FLAT)), (S + W + 1, unknown)],
    )
    assert got == [None] * 4
    assert watch.observe(S + W + 1.5, busy(1, FLAT)) is None  # opened at S + 2, not S
    assert watch.observe(S + W + 2, busy(1, FLAT)) is not None


def round_of(parts: Sequence[tuple[str, Reading]]) -> Reading:
    total = sum(r.in_flight or 0 for _, r in parts)
    verdict = Verdict.BUSY if total else Verdict.IDLE
    return Reading(verdict, "vllm", total, (), None, 1.0, parts=tuple(parts))


@pytest.mark.parametrize(
    ("other", "stalls"),
    [
        pytest.param(lambda t: busy(1, {GEN: 100 + t}), False, id="other-moves"),
        pytest.param(lambda t: idle(FLAT), True, id="other-idle"),
        pytest.param(lambda t: busy(2, FLAT, external=2), False, id="other-waits-outside"),
        pytest.param(lambda t: busy(2), False, id="other-has-no-counters"),
        pytest.param(
            lambda t: Reading.failed(Verdict.UNREACHABLE, "gone", 1.0), True, id="other-exited"
        ),
        pytest.param(lambda t: busy(2, FLAT), True, id="both-frozen"),
    ],
)
def test_several_targets_stall_only_when_every_one_with_work_does(
    other: Callable[[float], Reading], stalls: bool
) -> None:
    watch = StallWatch(W)
    got = [watch.observe(t, round_of([("a", busy(2, FLAT)), ("b", other(t))])) for t in (S, S + W)]
    assert got[0] is None
    assert (got[1] is not None) is stalls
    if stalls:
        assert got[1] is not None and "a" in [f.target for f in got[1].targets]


def test_stall_text_names_counters_work_and_time() -> None:
    watch = StallWatch(W)
    watch.observe(S, busy(3, FLAT, external=1))
    stall = watch.observe(S + W + 0.25, busy(3, FLAT, external=1))
    assert stall is not None
    text = stall.describe()
    for part in ("no progress for 30.2 s", "2 requests that can stall", "(3 in flight)"):
        assert part in text
    assert f"{GEN}=100" in text and f"{ITER}=10" in text


# -- the scanner: progress counters from real text ------------------------------------


def test_vllm_samples_give_their_counters_and_deferred_work() -> None:
    plain = scan(sample("vllm-http-plain.txt"))
    assert plain.progress is not None
    names = {c.name for c in plain.progress.counters}
    assert names == {GEN, ITER, "vllm:prompt_tokens_total", "vllm:estimated_flops_per_gpu_total"}
    assert plain.progress.external == 0
    # NIXL consumer: 3 deferred, and KV-fetch stages 1 + 2 + 0 of the same requests: 3, not 6.
    nixl = scan(sample("vllm-pd-nixl-consumer.txt"))
    assert nixl.progress is not None and nixl.progress.external == 3
    # Two DP engines: one series each, with its own labels.
    dp2 = scan(sample("vllm-single-dp2.txt"))
    assert dp2.progress is not None
    engines = sorted(dict(c.labels)["engine"] for c in dp2.progress.counters if c.name == GEN)
    assert engines == ["0", "1"] and dp2.progress.external == 1  # 1 deferred of 3 waiting


def test_sglang_sample_gives_its_disaggregation_queues_as_external() -> None:
    pd = scan(sample("sglang-mp-pd-prefill-priority.txt"))
    assert pd.verdict is Verdict.BUSY and pd.progress is not None
    assert pd.progress.counters == ()  # no forward pass yet: labelled series not yet written
    outside = sum(
        s.value
        for s in pd.series
        if s.name
        in ("sglang:num_prefill_bootstrap_queue_reqs", "sglang:num_prefill_inflight_queue_reqs")
    )
    assert pd.progress.external == outside > 0


OPENMETRICS = b"""# HELP vllm_generation_tokens Number of generation tokens processed.
# TYPE vllm_generation_tokens counter
vllm_generation_tokens_total{engine="0",model_name="m"} 42.0
vllm_generation_tokens_created{engine="0",model_name="m"} 1.7e+09
# TYPE vllm_iteration_tokens_total histogram
vllm_iteration_tokens_total_bucket{engine="0",le="1.0",model_name="m"} 3.0
vllm_iteration_tokens_total_count{engine="0",model_name="m"} 7.0
vllm_iteration_tokens_total_sum{engine="0",model_name="m"} 99.0
vllm_num_requests_running{engine="0",model_name="m"} 1.0
vllm_num_requests_waiting{engine="0",model_name="m"} 2.0
vllm_num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 1.0
vllm_num_requests_waiting_by_reason{engine="0",model_name="m",reason="deferred"} 1.0
vllm:request_success_total{engine="0",x="generation_tokens_total"} 1.0
# EOF
"""


def test_openmetrics_names_created_and_lookalikes() -> None:
    """`_` for `:`, `_created` and histogram buckets are not progress, a label value
    naming a counter is not one either; the verdict is the same as without them."""
    found = scan(OPENMETRICS)
    assert (found.verdict, found.in_flight) == (Verdict.BUSY, 3.0)
    assert found.progress is not None
    got = {(c.name, c.value) for c in found.progress.counters}
    assert got == {(GEN, 42.0), (ITER, 7.0)}
    assert found.progress.external == 1.0


def test_a_bad_counter_line_leaves_progress_unread_not_the_verdict() -> None:
    body = OPENMETRICS.replace(b"} 42.0", b"} NaN")
    found = scan(body)
    assert (found.verdict, found.in_flight, found.progress) == (Verdict.BUSY, 3.0, None)
    other = scan(b"sglang:num_running_reqs 1\nsglang:num_queue_reqs 0\n", "sglang")
    assert other.progress == Progress((), 0.0)  # read, and none there


def test_loads_counters_and_external_queues() -> None:
    body = (
        b'{"loads": [{"dp_rank": 0, "num_running_reqs": 1, "num_waiting_reqs": 4,'
        b' "total_prefill_uncached_tokens": 900, "decode_moments": [12, 1, 2, 3, 4, 77],'
        b' "timestamp": 5.5, "queues": {"grammar": 1},'
        b' "disaggregation": {"decode_prealloc_queue_reqs": 1, "decode_transfer_queue_reqs": 2}}]}'
    )
    found = scan_loads(body)
    assert (found.verdict, found.in_flight) == (Verdict.BUSY, 6.0)  # 1 + 4 + grammar 1
    assert found.progress is not None
    got = {c.name: c.value for c in found.progress.counters}
    assert got == {"total_prefill_uncached_tokens": 900, "decode_moments.0": 12,
                   "decode_moments.5": 77}  # fmt: skip
    assert found.progress.external == 4  # grammar 1 + prealloc 1 + transfer 2 (inside waiting)


# -- the loop ---------------------------------------------------------------------------


def loop(readings: Sequence[Reading], *, deadline: float, window: float = W) -> tuple[object, ...]:
    clock = Clock()
    served: list[float] = []

    def read(timeout: float) -> Reading:
        served.append(clock.now)
        clock.now += 0.002
        return readings[min(len(served) - 1, len(readings) - 1)]

    timeline = Timeline(settle=S, deadline=deadline, interval=1.0, read_timeout=1.0)
    result = drain(timeline, read, t0=0.0, clock=clock, sleep=clock.sleep, stall=StallWatch(window))
    return result.outcome, result.reads, result.elapsed, result.stall, exit_code(result)


def test_a_frozen_engine_is_released_at_s_plus_w_with_exit_5() -> None:
    outcome, reads, elapsed, stall, code = loop([busy(2, FLAT)], deadline=100.0)
    assert (outcome, code) == (Outcome.STALLED, 5)
    assert reads == W + 1  # reads at S, S + 1, ..., S + W
    assert elapsed == pytest.approx(S + W + 0.002)
    assert isinstance(stall, Stall) and stall.seconds == pytest.approx(W)


def test_a_moving_engine_is_not_and_a_window_past_d_never_ends_the_hook() -> None:
    moving = [busy(2, {GEN: float(n)}) for n in range(200)]
    outcome, *_ = loop(moving, deadline=100.0)
    assert outcome is Outcome.DEADLINE
    outcome, _, elapsed, stall, code = loop([busy(2, FLAT)], deadline=S + W)
    assert (outcome, code, stall) == (Outcome.DEADLINE, 3, None)
    assert elapsed == pytest.approx(S + W)  # the read at S + W is never made: D comes first


def test_a_stall_changes_nothing_while_idle_is_being_confirmed() -> None:
    """Frozen work for W - 1, then idle: the confirming reads run to `drained`."""
    frozen = [busy(2, FLAT)] * int(W)
    outcome, reads, *_ = loop([*frozen, idle(FLAT)], deadline=100.0)
    assert (outcome, reads) == (Outcome.DRAINED, W + 2)


def test_exit_zero_maps_stalled_to_0() -> None:
    clock = Clock()
    result = drain(
        Timeline(settle=S, deadline=100.0, interval=1.0, read_timeout=1.0),
        lambda _t: busy(1, FLAT),
        t0=0.0,
        clock=clock,
        sleep=clock.sleep,
        stall=StallWatch(W),
    )
    assert result.outcome is Outcome.STALLED
    assert (exit_code(result), exit_code(result, exit_zero=True)) == (5, 0)


class Fixed:
    """A reader that always gives one reading."""

    def __init__(self, reading: Reading) -> None:
        self.reading = reading
        self.name = "http://127.0.0.1:30000/metrics"

    def read(self, timeout: float) -> Reading:
        return self.reading

    def close(self) -> None:
        pass


def test_a_read_counted_from_v1_loads_keeps_both_bodies_counters_and_its_external() -> None:
    """--source auto: the work and what waits outside come from /v1/loads, the
    progress counters from both bodies (either may be the one that moves)."""
    metrics = Reading(
        Verdict.BUSY, "sglang", 9.0, (Series("sglang:num_running_reqs", (), 9.0),), None, 1.0,
        progress=Progress((Series("sglang:realtime_tokens_total", (), 40.0),), 5.0),
    )  # fmt: skip
    loads = Reading(
        Verdict.BUSY, "sglang", 3.0, (Series("num_running_reqs", (), 3.0),), None, 1.0,
        progress=Progress((Series("decode_moments.0", (), 7.0),), 1.0),
    )  # fmt: skip
    sides = {"/v1/loads": lambda: Fixed(loads)}
    got = EngineReader(Fixed(metrics), sides=sides).read(1.0)  # type: ignore[arg-type]
    assert (got.source, got.in_flight) == ("loads", 3.0)
    assert got.progress is not None
    assert [c.name for c in got.progress.counters] == [
        "sglang:realtime_tokens_total",
        "decode_moments.0",
    ]
    assert got.progress.external == 1.0
