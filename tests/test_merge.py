"""Series of several listeners as one set (rounds.merge_series): a series seen on two
listeners (a proxy re-exporting the engine's metrics) counts once, at its max;
different series add up (vLLM's multi-port data parallel)."""

from __future__ import annotations

import math

from drainhook.engines.verdict import Series
from drainhook.reading.rounds import merge_series

RUN, WAIT = "vllm:num_requests_running", "vllm:num_requests_waiting"


def s(name: str, value: float, **labels: str) -> Series:
    return Series(name, tuple(labels.items()), value)


def total(series: tuple[Series, ...]) -> float:
    return math.fsum(x.value for x in series)


def test_a_proxy_copy_counts_once_at_its_max() -> None:
    engine = [s(RUN, 2, engine="0", model_name="m"), s(WAIT, 1, engine="0", model_name="m")]
    proxy = [s(RUN, 3, engine="0", model_name="m"), s(WAIT, 1, engine="0", model_name="m")]
    merged = merge_series([engine, proxy])
    assert merged == (s(RUN, 3, engine="0", model_name="m"), s(WAIT, 1, engine="0", model_name="m"))
    assert total(merged) == 4  # not 7 (summed) and not 3 (first listener only)


def test_data_parallel_ranks_on_their_own_ports_add_up() -> None:
    ranks = [[s(RUN, r + 1, engine=str(r)), s(WAIT, 1, engine=str(r))] for r in range(4)]
    merged = merge_series(ranks)
    assert len(merged) == 8
    assert total(merged) == 1 + 2 + 3 + 4 + 4


def test_label_order_does_not_make_a_series_different() -> None:
    a = Series(RUN, (("engine", "0"), ("model_name", "m")), 5)
    b = Series(RUN, (("model_name", "m"), ("engine", "0")), 4)
    assert merge_series([[a], [b]]) == (a,)


def test_a_label_more_or_a_value_different_is_another_series() -> None:
    a = s(RUN, 1, engine="0")
    b = s(RUN, 1, engine="0", worker_addr="10.0.0.1:30000")  # a gateway's extra label
    c = s(RUN, 1, engine="1")
    d = s(WAIT, 1, engine="0")  # same labels, another gauge
    assert merge_series([[a], [b, c], [d]]) == (a, b, c, d)


def test_tp_rank_is_set_aside_as_in_one_body() -> None:
    # A copy read a moment later whose largest rank changed is the same batch.
    first = s("sglang:num_running_reqs", 4, tp_rank="0", dp_rank="0")
    later = s("sglang:num_running_reqs", 5, tp_rank="2", dp_rank="0")
    assert merge_series([[first], [later]]) == (later,)
    other_dp = s("sglang:num_running_reqs", 5, tp_rank="0", dp_rank="1")
    assert merge_series([[first], [other_dp]]) == (first, other_dp)


def test_order_is_first_seen_and_nothing_in_nothing_out() -> None:
    a, b = s(RUN, 0, engine="0"), s(RUN, 0, engine="1")
    assert merge_series([[b], [a], [b]]) == (b, a)
    assert merge_series([]) == ()
    assert merge_series([[], []]) == ()


def test_equal_values_keep_the_first_copy() -> None:
    a = Series(RUN, (("engine", "0"), ("model_name", "m")), 2)
    b = Series(RUN, (("model_name", "m"), ("engine", "0")), 2)
    assert merge_series([[a], [b]])[0] is a
