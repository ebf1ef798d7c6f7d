"""The latency histogram scanner (drainhook.planning.histogram): only the wanted family's lines,
both exposition formats, every series summed, and a clear problem (never a wrong
count, never a traceback) for a histogram that cannot be right.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drainhook.engines.grammar import TimeUp
from drainhook.planning.histogram import (
    INF,
    MAX_FAMILY_BYTES,
    MAX_SAMPLES,
    RawSeries,
    difference,
    exact,
    scan_families,
    sum_series,
)

E2E = "vllm:e2e_request_latency_seconds"
SG = "sglang:e2e_request_latency_seconds"


def family_lines(
    counts: dict[str, float],
    labels: str = 'engine="0"',
    name: str = E2E,
    count: float | None = None,
) -> str:
    """A histogram series: one bucket line per le (cumulative counts as given), _count, _sum."""
    lines = [f'{name}_bucket{{{labels},le="{le}"}} {n}' for le, n in counts.items()]
    total = counts.get("+Inf", 0.0) if count is None else count
    lines += [f"{name}_count{{{labels}}} {total}", f"{name}_sum{{{labels}}} 12.5"]
    return "\n".join(lines) + "\n"


SIMPLE = {"1.0": 2.0, "5.0": 7.0, "10.0": 9.0, "+Inf": 10.0}


def one(body: str | bytes, name: str = E2E) -> tuple[dict[tuple[float, ...], float], str | None]:
    """The summed histogram of one family: {bounds: total}, and the family's problem."""
    data = body.encode() if isinstance(body, str) else body
    fam = scan_families(data, [name])[name]
    if fam.problem is not None:
        return {}, fam.problem
    h = sum_series(name, fam.series.values())
    return {(*h.bounds, INF): h.total}, None


def hist(body: str, name: str = E2E):  # type: ignore[no-untyped-def]
    fam = scan_families(body.encode(), [name])[name]
    assert fam.problem is None, fam.problem
    return sum_series(name, fam.series.values())


# -- reading a family -----------------------------------------------------------------


def test_one_series() -> None:
    h = hist(family_lines(SIMPLE))
    assert h.bounds == (1.0, 5.0, 10.0)
    assert h.cumulative == (2.0, 7.0, 9.0, 10.0)
    assert h.total == 10 and h.series == 1
    assert h.buckets() == [(0.0, 1.0, 2.0), (1.0, 5.0, 5.0), (5.0, 10.0, 2.0), (10.0, INF, 1.0)]


def test_every_series_is_summed() -> None:
    body = family_lines(SIMPLE, 'engine="0"') + family_lines(
        {"1.0": 1.0, "5.0": 1.0, "10.0": 3.0, "+Inf": 3.0}, 'engine="1"'
    )
    h = hist(body)
    assert h.cumulative == (3.0, 8.0, 12.0, 13.0)
    assert h.series == 2


def test_other_families_and_look_alikes_are_not_read() -> None:
    """`_created` (prometheus_client writes it as its own gauge family), a longer name,
    the name inside a HELP text or a label value, another histogram: none counts, and
    none of them may be malformed enough to matter."""
    body = (
        f"# HELP {E2E}_created Histogram of e2e request latency in seconds.\n"
        f"# TYPE {E2E}_created gauge\n"
        f'{E2E}_created{{engine="0"}} 1.7e9\n'
        f'{E2E}_createdx{{engine="0"}} garbage garbage\n'
        f'{E2E}_bucket_total{{le="1.0"}} 99\n'
        f'some_metric{{about="{E2E}_bucket"}} 5\n'
        f'vllm:request_queue_time_seconds_bucket{{le="1.0"}} not a number\n'
        f"# HELP other mentions {E2E}_bucket in its text\n" + family_lines(SIMPLE)
    )
    assert one(body) == ({(1.0, 5.0, 10.0, INF): 10.0}, None)


def test_type_line_alone_marks_the_family_present_with_no_requests() -> None:
    """SGLang labels its histogram per request (is_streaming): before the first one,
    /metrics has the family's HELP and TYPE lines and no sample."""
    body = (
        f"# HELP {SG} Histogram of End-to-end request latency in seconds\n# TYPE {SG} histogram\n"
    )
    fam = scan_families(body.encode(), [SG])[SG]
    assert fam.seen and not fam.series and fam.problem is None
    h = sum_series(SG, fam.series.values())
    assert h.total == 0 and h.quantile(0.999) is None


def test_a_body_without_the_family() -> None:
    fam = scan_families(b"vllm:num_requests_running 0\n", [E2E])[E2E]
    assert not fam.seen and not fam.series


@pytest.mark.parametrize(
    "transform",
    [
        lambda t: t.replace("vllm:", "vllm_"),  # OpenMetrics escaping of ':'
        lambda t: t.replace("\n", "\r\n"),  # CRLF
        lambda t: t.replace("} ", "}\t"),  # a tab before the value
        lambda t: t.replace('le="1.0"', 'le="1"').replace('le="+Inf"', 'le="Inf"'),
        lambda t: t.replace('{engine="0",', '{ engine = "0" , '),  # blanks in the label set
        lambda t: t.replace("\n", " 1700000000000\n"),  # timestamps
        lambda t: t + "# EOF\n",
        lambda t: "\n".join("  " + line for line in t.splitlines()) + "\n",  # leading blanks
    ],
    ids=["underscore", "crlf", "tab", "le-forms", "blanks", "timestamps", "eof", "indented"],
)
def test_exposition_variants(transform) -> None:  # type: ignore[no-untyped-def]
    assert one(transform(family_lines(SIMPLE))) == ({(1.0, 5.0, 10.0, INF): 10.0}, None)


def test_openmetrics_exemplars_are_dropped() -> None:
    body = family_lines(SIMPLE).replace(
        'le="5.0"} 7.0', 'le="5.0"} 7.0 # {trace_id="abc"} 4.2 1700000000.0'
    )
    assert one(body) == ({(1.0, 5.0, 10.0, INF): 10.0}, None)


def test_count_stands_for_a_missing_inf_bucket() -> None:
    counts = {k: v for k, v in SIMPLE.items() if k != "+Inf"}
    assert one(family_lines(counts, count=10.0)) == ({(1.0, 5.0, 10.0, INF): 10.0}, None)


def test_series_with_other_bounds_are_summed_at_the_shared_ones() -> None:
    """Another --custom-histogram-buckets on one engine: its cumulative counts at the
    bounds both have are exact, so the sum there is too; the rest is left out."""
    other = {"1.0": 1.0, "2.0": 2.0, "10.0": 4.0, "+Inf": 4.0}
    h = hist(family_lines(SIMPLE) + family_lines(other, 'engine="1"'))
    assert h.bounds == (1.0, 10.0)
    assert h.cumulative == (3.0, 13.0, 14.0)
    assert h.dropped == (2.0, 5.0)


# -- what cannot be right ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (family_lines({"1.0": 5.0, "5.0": 3.0, "+Inf": 6.0}), "not cumulative"),
        (family_lines({"1.0": 2.0, "5.0": 7.0, "+Inf": 6.0}), "not cumulative"),
        (family_lines({"1.0": math.nan, "+Inf": 6.0}), "a count of nan"),
        (family_lines({"1.0": 1.0, "+Inf": math.inf}), "a count of inf"),
        (family_lines({"1.0": -1.0, "+Inf": 6.0}), "a count of -1"),
        (family_lines({"1.0": 1.0, "+Inf": 6.0}, count=7.0), "_count is 7 but the +Inf bucket 6"),
        (family_lines({"1.0": 1.0, "5.0": 2.0}).replace(f"{E2E}_count", "x_count"), "neither"),
        (family_lines({"1.0": 1.0, "+Inf": 2.0}) + f'{E2E}_bucket{{engine="0",le="1.0"}} 1\n',
         "written twice"),
        (family_lines({"1.0": 1.0, "+Inf": 2.0}) + f'{E2E}_count{{engine="0"}} 2\n',
         "_count written twice"),
        (f'{E2E}_bucket{{engine="0"}} 1\n', "without one le label"),
        (f'{E2E}_bucket{{le="1",le="2"}} 1\n', "without one le label"),
        (f'{E2E}_bucket{{le="soon"}} 1\n', "is not a number"),
        (f'{E2E}_bucket{{le="NaN"}} 1\n', "not an upper bound"),
        (f'{E2E}_bucket{{le="1.0"}} many\n', "malformed line"),
        (f'{E2E}_bucket{{le="1.0" 1\n', "malformed line"),
        (f'{E2E}_bucket{{le="1.0"}} 1 # no exemplar\n', "malformed line"),
    ],
    ids=[
        "decreasing", "inf-below-bucket", "nan", "inf-count", "negative", "count-disagrees",
        "no-inf-no-count", "bucket-twice", "count-twice", "no-le", "two-le", "le-word",
        "le-nan", "value-word", "unclosed", "hash-not-exemplar",
    ],
)  # fmt: skip
def test_a_histogram_that_cannot_be_right_is_a_problem(body: str, words: str) -> None:
    found, problem = one(body)
    assert found == {}
    assert problem is not None and problem.startswith(E2E + ": ")
    assert words in problem
    assert "\n" not in problem


def test_a_line_that_is_not_utf8_is_a_problem() -> None:
    body = family_lines(SIMPLE).encode() + f'{E2E}_bucket{{x="'.encode() + b'\xff"} 1\n'
    assert "not UTF-8" in str(one(body)[1])


def test_a_problem_in_another_family_does_not_touch_this_one() -> None:
    body = family_lines(SIMPLE) + f'{SG}_bucket{{le="x"}} 1\n'
    fams = scan_families(body.encode(), [E2E, SG])
    assert fams[E2E].problem is None
    assert "not a number" in str(fams[SG].problem)


def test_the_lines_read_are_bounded() -> None:
    pad = "x" * 1000
    lines = (MAX_FAMILY_BYTES // 1000) + 1
    body = "".join(f'{E2E}_bucket{{e="{i}",le="+Inf",pad="{pad}"}} 1\n' for i in range(lines))
    assert one(body) == ({}, f"{E2E}: lines over 4 MiB")


def test_the_samples_kept_are_bounded_per_family() -> None:
    """One family over the bound is a problem of its own; another family is read whole."""
    over = "".join(f'{E2E}_bucket{{e="{i}",le="+Inf"}} 1\n' for i in range(MAX_SAMPLES + 1))
    under = "".join(f'{SG}_bucket{{e="{i}",le="+Inf"}} 1\n' for i in range(MAX_SAMPLES // 2))
    fams = scan_families((over + under).encode(), [E2E, SG])
    assert fams[E2E].problem == f"{E2E}: more than {MAX_SAMPLES} samples"
    assert fams[SG].problem is None
    assert sum_series(SG, fams[SG].series.values()).total == MAX_SAMPLES // 2


def test_the_scan_ends_by_the_reads_deadline() -> None:
    body = family_lines(SIMPLE).encode() * 2000
    ticks = iter(range(10**6))
    with pytest.raises(TimeUp, match="time ran out"):
        scan_families(body, [E2E], until=10.0, clock=lambda: float(next(ticks)))


def test_lines_of_other_families_cost_nothing_to_the_bounds() -> None:
    """A 20 MiB body of other histograms is skipped unread, whatever its size."""
    filler = 'vllm:request_queue_time_seconds_bucket{le="1.0"} 1\n' * 400_000
    found, problem = one(filler + family_lines(SIMPLE))
    assert problem is None and found == {(1.0, 5.0, 10.0, INF): 10.0}


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000), st.sampled_from([E2E, SG]))
def test_hostile_bytes_never_raise_anything_else(data: bytes, name: str) -> None:
    prefix = name.encode()
    body = data.replace(b"A", prefix + b'_bucket{le="').replace(b"B", b"\n" + prefix)
    try:
        fams = scan_families(body, [name])
    except TimeUp:
        return
    fam = fams[name]
    if fam.problem is None:
        h = sum_series(name, fam.series.values())
        assert all(a <= b for a, b in zip(h.cumulative, h.cumulative[1:], strict=False))
        assert all(c >= 0 and math.isfinite(c) for c in h.cumulative)


LABEL_NAMES = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,6}", fullmatch=True)
LABEL_VALUES = st.text(st.characters(blacklist_characters='"\\\n', codec="utf-8"), max_size=12)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["_bucket", "_count", "_sum", "_created", ""]),
            st.lists(st.tuples(LABEL_NAMES, LABEL_VALUES), max_size=5),
            st.sampled_from(["0.5", "1", "+Inf", "x"]),
            st.sampled_from(["0", "3.0", "1e2", "-1", "NaN", "+Inf", "7 123", '2 # {a="b"} 1']),
        ),
        max_size=12,
    )
)
def test_lines_read_the_same_indented_or_not(
    lines: list[tuple[str, list[tuple[str, str]], str, str]],
) -> None:
    """A line that starts with the name and the same line indented (blanks before a
    name are allowed) find the same series and problems: one grammar reads both."""
    text = []
    for suffix, pairs, le, value in lines:
        labels = [f'{k}="{v}"' for k, v in pairs] + ([f'le="{le}"'] if suffix == "_bucket" else [])
        text.append(f"{E2E}{suffix}{{{','.join(labels)}}} {value}")
    plain = scan_families("\n".join(text).encode(), [E2E])[E2E]
    full = scan_families("\n".join(" " + t for t in text).encode(), [E2E])[E2E]
    assert (plain.seen, plain.problem) == (full.seen, full.problem)
    assert {k: (s.buckets, s.count) for k, s in plain.series.items()} == {
        k: (s.buckets, s.count) for k, s in full.series.items()
    }


# -- quantiles, exactly -------------------------------------------------------------------


def test_quantile_is_the_upper_bound_of_the_bucket_holding_it() -> None:
    h = hist(family_lines({"1.0": 500.0, "5.0": 998.0, "10.0": 999.0, "+Inf": 1000.0}))
    assert h.quantile(0.5) == 1.0  # 500 of 1000 at or under 1 s
    assert h.quantile(0.501) == 5.0
    assert h.quantile(0.998) == 5.0  # 998 >= 0.998 x 1000 exactly: no float slip to 10
    assert h.quantile(0.999) == 10.0  # 999 >= 999
    assert h.quantile(0.9991) == INF
    assert h.quantile(1.0) == INF


def test_quantile_comparison_is_exact_where_floats_are_not() -> None:
    # 0.28 x 25 is 7.000000000000001 in binary floats: a float comparison would
    # wrongly say 7 requests are fewer than the 28th percentile of 25.
    assert 0.28 * 25 > 7
    h = hist(family_lines({"1.0": 7.0, "2.0": 25.0, "+Inf": 25.0}))
    assert h.quantile(0.28) == 1.0


def test_exact_reads_a_float_as_it_prints() -> None:
    assert exact(0.999) == (999, 1000)  # not the binary float just below it
    assert exact(30.0) == (300, 10)
    assert exact(1e-05) == (1, 100000)
    assert exact(1.5e20) == (150000000000000000000, 1)
    assert exact(-2.5) == (-25, 10)
    assert exact(-0.5) == (-5, 10)


def test_at_most_is_known_only_at_bounds() -> None:
    h = hist(family_lines(SIMPLE))
    assert h.at_most(0.5) == 0  # below the smallest bound: nothing is known to be that short
    assert h.at_most(1.0) == 2
    assert h.at_most(7.0) == 7  # inside (5, 10]: only the 7 under 5 s are known
    assert h.at_most(100.0) == 9  # the +Inf bucket is never known to end


# -- two reads ---------------------------------------------------------------------------


def series(**buckets: float) -> RawSeries:
    return RawSeries({float(k.lstrip("b").replace("_", ".")) if k != "inf" else INF: v
                      for k, v in buckets.items()})  # fmt: skip


def test_difference_of_two_reads() -> None:
    key = (("engine", "0"),)
    before = {key: series(b1=2, b5=7, inf=10)}
    after = {key: series(b1=2, b5=17, inf=30)}
    got, resets = difference(before, after)
    assert resets == 0
    assert got[0].buckets == {1.0: 0, 5.0: 10, INF: 20}


def test_a_reset_between_the_reads_counts_the_second_read_whole() -> None:
    key = (("engine", "0"),)
    before = {key: series(b1=2, b5=7, inf=10)}
    after = {key: series(b1=1, b5=3, inf=3)}
    got, resets = difference(before, after)
    assert resets == 1
    assert got[0].buckets == {1.0: 1, 5.0: 3, INF: 3}


def test_new_and_vanished_series_between_the_reads() -> None:
    old, new = (("engine", "0"),), (("engine", "1"),)
    got, resets = difference({old: series(b1=5, inf=5)}, {new: series(b1=1, inf=4)})
    assert resets == 0
    assert [s.buckets for s in got] == [{1.0: 1, INF: 4}]


def test_changed_bounds_between_the_reads_are_a_restart() -> None:
    key = (("engine", "0"),)
    got, resets = difference({key: series(b1=2, inf=10)}, {key: series(b2=20, inf=30)})
    assert resets == 1 and got[0].buckets == {2.0: 20, INF: 30}


LATENCY_SAMPLES = sorted(
    p
    for p in (Path(__file__).parent / "samples").rglob("*.txt")
    if b"e2e_request_latency_seconds_bucket" in p.read_bytes()
)


@pytest.mark.parametrize("path", LATENCY_SAMPLES, ids=lambda p: p.name)
def test_the_latency_histogram_agrees_with_prometheus_clients_parser(path: Path) -> None:
    """The oracle (issue 58): prometheus_client's own parser on the same real bodies
    (vLLM's and SGLang's, text and OpenMetrics) gives, summed over every series, the
    same cumulative count at every bound and the same total as the scanner."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om
    from prometheus_client.parser import text_string_to_metric_families as text

    body = path.read_bytes()
    name = SG if b"sglang:e2e_request_latency_seconds" in body else E2E
    h = hist(body.decode(), name)
    parse = om if body.rstrip().endswith(b"# EOF") else text
    # The parser takes one spelling of a family's name (the scanner reads both, as
    # contract §3 has it): its samples written with `_` are given with `:`.
    spelled = body.decode().replace(name.replace(":", "_") + "_", name + "_")
    summed: dict[float, float] = {}
    for family in parse(spelled):
        for sample in family.samples:
            if sample.name == f"{name}_bucket":
                bound = float(sample.labels["le"])
                summed[bound] = summed.get(bound, 0.0) + sample.value
    assert summed, path
    assert h.dropped == ()  # every series shares the bounds in these bodies
    assert [summed[b] for b in (*h.bounds, INF)] == list(h.cumulative)
    assert sorted(summed) == [*h.bounds, INF]
