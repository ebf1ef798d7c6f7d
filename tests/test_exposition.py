"""The line scanner on hand-made edge cases (CONTRACT §2-3).

Every case asserts the verdict and the in-flight total (and, for `unknown`,
why), and is built so that a scanner with the matching bug gives a different
answer: a look-alike carries a non-zero value, a malformed counted line sits
beside a valid series of the same gauge, tp_rank duplicates differ from their
sum, and so on.
"""

from __future__ import annotations

import pytest

from drainhook.engines.exposition import scan
from drainhook.engines.verdict import Scan, Series, Verdict

IDLE, BUSY, UNKNOWN = Verdict.IDLE, Verdict.BUSY, Verdict.UNKNOWN

VLLM_IDLE = ("vllm:num_requests_running 0", "vllm:num_requests_waiting 0")
SGLANG_IDLE = ("sglang:num_running_reqs 0", "sglang:num_queue_reqs 0")


def text(*lines: str, eol: str = "\n") -> bytes:
    """A body of these lines, each ended by eol."""
    return "".join(line + eol for line in lines).encode()


def check(
    body: bytes,
    verdict: Verdict,
    in_flight: float | None,
    reason: str | None = None,
    engine: str = "auto",
) -> Scan:
    """Scan body and assert verdict, total and (for unknown) the reason."""
    got = scan(body, engine)
    assert (got.verdict, got.in_flight) == (verdict, in_flight), got
    if verdict is UNKNOWN:
        assert reason is not None
        assert got.reason is not None and reason in got.reason, got
    else:
        assert got.reason is None, got
        assert got.in_flight == sum(s.value for s in got.series)
    return got


# --- names -------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        'vllm:num_requests_waiting_by_reason{reason="capacity"} 7',
        "vllm_num_requests_waiting_by_reason 7",
        "vllm:num_requests_running_total 7",
        "vllm:num_requests_runnin 7",
        "vllm:num_requests_kv_fetch_by_stage 7",
        "xvllm:num_requests_running 7",
        "xvllm_num_requests_waiting 7",
        "VLLM:num_requests_running 7",
        "vllm::num_requests_running 7",
        "vllm:num_requests_running:rate 7",
        "vllmnum_requests_running 7",
        "vllm:num_running_reqs 7",  # SGLang's gauge under vLLM's prefix
        "vllm:num_requests_waiting_by_reason{ 7",  # a malformed look-alike: not counted either
    ],
)
def test_look_alike_names_are_not_counted(line: str) -> None:
    check(text(*VLLM_IDLE, line), IDLE, 0.0)


@pytest.mark.parametrize(
    "line",
    [
        "sglang:num_decode_host_receive_queue_reqs 7",  # a subset of transfer
        "sglang:num_retracted_reqs 7",  # events per interval, not requests held
        "sglang:num_paused_reqs 7",
        "sglang_num_retracted_reqs 7",
        "sglang:num_requests_running 7",  # vLLM's gauge under SGLang's prefix
        "sglang:num_queue_reqs_by_reason 7",
        "xsglang:num_queue_reqs 7",
    ],
)
def test_sglang_gauges_that_are_not_counted(line: str) -> None:
    check(text(*SGLANG_IDLE, line), IDLE, 0.0)


@pytest.mark.parametrize(
    "name",
    [
        "sglang:num_grammar_queue_reqs",
        "sglang:num_prefill_bootstrap_queue_reqs",
        "sglang:num_prefill_prealloc_queue_reqs",  # the pre-0.5 name of bootstrap
        "sglang:num_prefill_inflight_queue_reqs",
        "sglang:num_decode_prealloc_queue_reqs",
        "sglang:num_decode_transfer_queue_reqs",
        "sglang_num_grammar_queue_reqs",
        "sglang_num_decode_transfer_queue_reqs",
    ],
)
def test_sglang_optional_gauges_are_counted(name: str) -> None:
    got = check(text(*SGLANG_IDLE, f'{name}{{dp_rank="0"}} 3'), BUSY, 3.0)
    assert got.engine == "sglang"
    assert Series(name.replace("sglang_", "sglang:", 1), (("dp_rank", "0"),), 3.0) in got.series


def test_sglang_optional_gauges_are_not_required() -> None:
    check(text(*SGLANG_IDLE), IDLE, 0.0)


def test_underscore_names_are_the_same_gauges() -> None:
    """OpenMetrics output escapes `:` as `_`; the series carry the canonical name."""
    body = text(
        "# HELP vllm_num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm_num_requests_running gauge",
        'vllm_num_requests_running{engine="0",model_name="m"} 2.0',
        "# TYPE vllm_num_requests_waiting gauge",
        'vllm_num_requests_waiting{engine="0",model_name="m"} 1.0',
        "# EOF",
    )
    got = check(body, BUSY, 3.0)
    assert got.engine == "vllm"
    assert {s.name for s in got.series} == {
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
    }


def test_colon_and_underscore_forms_mix() -> None:
    check(text("vllm:num_requests_running 2", "vllm_num_requests_waiting 1"), BUSY, 3.0)


# --- a counted name where it is not a sample ------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "# HELP process_notes like vllm:num_requests_running 9 but not it",
        "# HELP vllm:num_requests_waiting unlike vllm:num_requests_running 9",
        "# vllm:num_requests_running 9",
        "#vllm:num_requests_running 9",
        'notes_info{text="vllm:num_requests_running 9"} 1',
        r'notes_info{text="x\nvllm:num_requests_running 9"} 1',
        'notes_info{a="}", text="vllm:num_requests_waiting{engine=\\"0\\"} 9"} 1',
        "notes_total 1 vllm:num_requests_running",
    ],
)
def test_counted_name_inside_another_line_is_ignored(line: str) -> None:
    check(text(*VLLM_IDLE, line), IDLE, 0.0)


@pytest.mark.parametrize(
    "line",
    ['{"vllm:num_requests_running",engine="1"} 3', ' { "vllm:num_requests_waiting"} 1'],
)
def test_a_quoted_counted_name_is_doubt(line: str) -> None:
    """Prometheus 3's quoted names, a format not asked for: before, the line was
    passed over and the other series read idle with its work present."""
    got = scan(text(*VLLM_IDLE, line))
    assert (got.verdict, got.in_flight) == (Verdict.UNKNOWN, None)
    assert got.reason is not None and "written as a quoted name" in got.reason


# --- label sets ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ("", ()),
        ("{}", ()),
        ("{ }", ()),
        ('{m="x"}', (("m", "x"),)),
        ('{m="x",}', (("m", "x"),)),  # trailing comma
        ('{ m = "x" , n="y" }', (("m", "x"), ("n", "y"))),
        ('{m=""}', (("m", ""),)),
        ('{m="a}b"}', (("m", "a}b"),)),
        ('{m="{"}', (("m", "{"),)),
        (r'{m="say \"hi\" } 1"}', (("m", 'say "hi" } 1'),)),
        (r'{m="C:\\dir\\",n="x"}', (("m", "C:\\dir\\"), ("n", "x"))),
        (r'{m="\\"}', (("m", "\\"),)),
        (r'{m="two\nlines"}', (("m", "two\nlines"),)),
        ('{m="a b, c=d",n="e=f"}', (("m", "a b, c=d"), ("n", "e=f"))),
        ('{m="# not a comment"}', (("m", "# not a comment"),)),
        ('{m="Llama-3.1-8B/é✓"}', (("m", "Llama-3.1-8B/é✓"),)),
        ('{b="2",a="1"}', (("b", "2"), ("a", "1"))),  # kept as written
    ],
)
def test_label_values(labels: str, expected: tuple[tuple[str, str], ...]) -> None:
    got = check(
        text(f"vllm:num_requests_running{labels} 2", "vllm:num_requests_waiting 0"), BUSY, 2.0
    )
    assert Series("vllm:num_requests_running", expected, 2.0) in got.series


# --- which series count ------------------------------------------------------------


@pytest.mark.parametrize(
    ("lines", "in_flight"),
    [
        pytest.param(
            (
                'vllm:num_requests_running{engine="0"} 3',
                'vllm:num_requests_running{engine="1"} 5',
                'vllm:num_requests_waiting{engine="0"} 0',
                'vllm:num_requests_waiting{engine="1"} 1',
            ),
            9.0,
            id="vllm-dp-engines-summed",
        ),
        pytest.param(
            (
                'vllm:num_requests_running{model_name="a"} 1',
                'vllm:num_requests_running{model_name="b"} 2',
                "vllm:num_requests_waiting 0",
            ),
            3.0,
            id="models-summed",
        ),
        pytest.param(
            (
                'sglang:num_running_reqs{dp_rank="0"} 3',
                'sglang:num_running_reqs{dp_rank="1"} 5',
                'sglang:num_queue_reqs{dp_rank="0"} 0',
                'sglang:num_queue_reqs{dp_rank="1"} 0',
            ),
            8.0,
            id="sglang-dp-ranks-summed",
        ),
        pytest.param(
            (
                'sglang:num_running_reqs{pid="101"} 3',
                'sglang:num_running_reqs{pid="102"} 5',
                "sglang:num_queue_reqs 0",
            ),
            8.0,
            id="processes-summed",
        ),
        pytest.param(
            (
                'sglang:num_running_reqs{dp_rank="0",tp_rank="0"} 3',
                'sglang:num_running_reqs{dp_rank="0",tp_rank="1"} 5',
                'sglang:num_queue_reqs{dp_rank="0",tp_rank="0"} 0',
                'sglang:num_queue_reqs{dp_rank="0",tp_rank="1"} 0',
            ),
            5.0,
            id="tp-ranks-max-not-sum",
        ),
        pytest.param(
            (
                'sglang:num_running_reqs{tp_rank="0",dp_rank="0"} 3',
                'sglang:num_running_reqs{dp_rank="0",tp_rank="1"} 5',
                "sglang:num_queue_reqs 0",
            ),
            5.0,
            id="tp-ranks-label-order-irrelevant",
        ),
        pytest.param(
            (
                'sglang:num_running_reqs{dp_rank="0",tp_rank="0"} 2',
                'sglang:num_running_reqs{dp_rank="0",tp_rank="1"} 2',
                'sglang:num_running_reqs{dp_rank="1",tp_rank="0"} 1',
                'sglang:num_running_reqs{dp_rank="1",tp_rank="1"} 3',
                'sglang:num_queue_reqs{dp_rank="1",tp_rank="0"} 4',
                'sglang:num_queue_reqs{dp_rank="1",tp_rank="1"} 4',
            ),
            9.0,  # max per DP rank (2, 3, 4), summed across ranks and gauges
            id="dp-summed-tp-maxed",
        ),
        pytest.param(
            (
                'sglang:num_running_reqs{priority=""} 3',
                'sglang:num_running_reqs{priority="0"} 2',
                'sglang:num_running_reqs{priority="5"} 1',
                'sglang:num_queue_reqs{priority=""} 1',
                'sglang:num_queue_reqs{priority="0"} 1',
            ),
            4.0,
            id="priority-breakdown-skipped",
        ),
        pytest.param(
            (
                'sglang:num_running_reqs{priority=""} 0',
                'sglang:num_running_reqs{priority="0"} 5',
                'sglang:num_queue_reqs{priority=""} 0',
            ),
            0.0,
            id="priority-total-decides",
        ),
        pytest.param(
            (
                'vllm:num_requests_running{priority="1"} 2',
                "vllm:num_requests_waiting 0",
            ),
            2.0,
            id="vllm-priority-label-counted",  # before: skipped as SGLang's, read idle
        ),
    ],
)
def test_series_combination(lines: tuple[str, ...], in_flight: float) -> None:
    check(text(*lines), BUSY if in_flight else IDLE, in_flight)


# --- syntax the scanner must read ---------------------------------------------------


@pytest.mark.parametrize(
    ("body", "in_flight"),
    [
        pytest.param(
            text("vllm:num_requests_running 2", "vllm:num_requests_waiting 1", eol="\r\n"),
            3.0,
            id="crlf",
        ),
        pytest.param(
            text(
                'vllm:num_requests_running{engine="0"} 2 1700000000000',
                "vllm:num_requests_waiting 1",
                eol="\r\n",
            ),
            3.0,
            id="crlf-labels-timestamp",
        ),
        pytest.param(
            b"vllm:num_requests_running 2\nvllm:num_requests_waiting 4", 6.0, id="no-final-newline"
        ),
        pytest.param(
            b"vllm:num_requests_running 2\r\nvllm:num_requests_waiting 4",
            6.0,
            id="crlf-no-final-newline",
        ),
        pytest.param(
            text(*VLLM_IDLE[:1], "vllm:num_requests_waiting 4", "# EOF"), 4.0, id="openmetrics-eof"
        ),
        pytest.param(
            text("vllm:num_requests_running 2 1700000000000", "vllm:num_requests_waiting 0"),
            2.0,
            id="timestamp-ms",
        ),
        pytest.param(
            text("vllm:num_requests_running 2 -1", "vllm:num_requests_waiting 0"),
            2.0,
            id="timestamp-negative",
        ),
        pytest.param(
            text("vllm:num_requests_running 2.0 1700000000.125", "vllm:num_requests_waiting 0"),
            2.0,
            id="timestamp-openmetrics",
        ),
        pytest.param(
            text("vllm:num_requests_running 1e3", "vllm:num_requests_waiting 0"),
            1000.0,
            id="exponent",
        ),
        pytest.param(
            text("vllm:num_requests_running 2.5E-1", "vllm:num_requests_waiting 0"),
            0.25,
            id="exponent-upper-negative",
        ),
        pytest.param(
            text("vllm:num_requests_running 1.5e+2", "vllm:num_requests_waiting 0"),
            150.0,
            id="exponent-plus",
        ),
        pytest.param(
            text("vllm:num_requests_running +3", "vllm:num_requests_waiting .5"),
            3.5,
            id="sign-and-bare-fraction",
        ),
        pytest.param(
            text("vllm:num_requests_running 7.", "vllm:num_requests_waiting 0"),
            7.0,
            id="trailing-point",
        ),
        pytest.param(
            text("vllm:num_requests_running\t2", "vllm:num_requests_waiting\t1\t17"), 3.0, id="tabs"
        ),
        pytest.param(
            text("  vllm:num_requests_running 2", "\tvllm:num_requests_waiting 1"),
            3.0,
            id="leading-blanks",
        ),
        pytest.param(
            text("vllm:num_requests_running 2  ", "vllm:num_requests_waiting 1\t"),
            3.0,
            id="trailing-blanks",
        ),
        pytest.param(
            text('vllm:num_requests_running {engine="0"} 2', "vllm:num_requests_waiting 0"),
            2.0,
            id="blank-before-labels",
        ),
        pytest.param(
            text('vllm:num_requests_running{engine="0"}2', "vllm:num_requests_waiting 0"),
            2.0,
            id="no-blank-after-labels",
        ),
        pytest.param(
            text("", "vllm:num_requests_running 2", "", "vllm:num_requests_waiting 0", ""),
            2.0,
            id="blank-lines",
        ),
        pytest.param(
            text("vllm:num_requests_running -0.0", "vllm:num_requests_waiting 0"),
            0.0,
            id="negative-zero-is-zero",
        ),
    ],
)
def test_syntax_variants(body: bytes, in_flight: float) -> None:
    check(body, BUSY if in_flight else IDLE, in_flight)


# --- values that are not a count ------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("NaN", "vllm:num_requests_waiting is nan"),
        ("nan", "is nan"),
        ("+Inf", "vllm:num_requests_waiting is inf"),
        ("Inf", "is inf"),
        ("-Inf", "is -inf"),
        ("1e400", "is inf"),  # overflows to +Inf
        ("-1", "vllm:num_requests_waiting is negative"),
        ("-0.5", "is negative"),
        ("-1e-9", "is negative"),
    ],
)
def test_values_that_are_not_a_count(value: str, reason: str) -> None:
    check(
        text("vllm:num_requests_running 0", f"vllm:num_requests_waiting {value}"),
        UNKNOWN,
        None,
        reason,
    )


def test_a_bad_value_in_any_series_is_unknown() -> None:
    """One NaN among good series (an optional gauge, a second DP rank) still decides."""
    body = text(
        *SGLANG_IDLE,
        'sglang:num_decode_transfer_queue_reqs{dp_rank="0"} 1',
        'sglang:num_decode_transfer_queue_reqs{dp_rank="1"} NaN',
    )
    check(body, UNKNOWN, None, "sglang:num_decode_transfer_queue_reqs is nan")


# --- malformed lines --------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "vllm:num_requests_running",
        "vllm:num_requests_running ",
        'vllm:num_requests_running{engine="0"}',
        'vllm:num_requests_running{engine="0"} ',
        'vllm:num_requests_running{engine="0" 1',
        'vllm:num_requests_running{engine="0",model_name="m" 1',
        'vllm:num_requests_running{engine="0} 1',
        r'vllm:num_requests_running{engine="0\"} 1',
        "vllm:num_requests_running{engine=0} 1",
        'vllm:num_requests_running{engine="0" model_name="m"} 1',
        'vllm:num_requests_running{engine="0",,model_name="m"} 1',
        "vllm:num_requests_running{,} 1",
        'vllm:num_requests_running{0engine="0"} 1',
        'vllm:num_requests_running{engine="0"}} 1',
        "vllm:num_requests_running abc",
        "vllm:num_requests_running 1_000",
        "vllm:num_requests_running 0x10",
        "vllm:num_requests_running 1,5",
        "vllm:num_requests_running 1 2 3",
        "vllm:num_requests_running 1 later",
        "vllm:num_requests_running 1 NaN",
        "vllm:num_requests_running one",
        "vllm:num_requests_running\r1",
    ],
)
def test_malformed_counted_line_is_unknown(line: str) -> None:
    # A valid series of the same gauge sits beside it: a scanner that skipped
    # the bad line would say idle.
    body = text('vllm:num_requests_running{engine="1"} 0', line, "vllm:num_requests_waiting 0")
    check(body, UNKNOWN, None, "malformed vllm:num_requests_running line")


def test_malformed_optional_gauge_line_is_unknown() -> None:
    check(
        text(*SGLANG_IDLE, "sglang:num_grammar_queue_reqs {"),
        UNKNOWN,
        None,
        "malformed sglang:num_grammar_queue_reqs",
    )


@pytest.mark.parametrize(
    "other",
    [
        b'http_requests_total{handler="/v1" 1',
        b"process_cpu_seconds_total abc",
        b"vllm:prompt_tokens_total NaN",
        b"vllm:kv_cache_usage_perc -Inf",
        b"vllm:e2e_request_latency_seconds_bucket{le=} 1",
        b"this is not a metric line at all",
        b"{} 1",
        b"# TYPE nonsense nonsense nonsense",
        b"# HELP",
        b"x" * 200_000 + b" 1",
        b'model_info{name="\xff\xfe\xc3("} 1',
        b"\xc3\x28\xa0\xa1 garbage \x00",
        b'exotic_metric{a="1"} 1 # {trace_id="abc"} 1.0 1700000000.0',
    ],
)
def test_malformed_other_families_do_not_change_the_verdict(other: bytes) -> None:
    body = b"vllm:num_requests_running 2\n" + other + b"\nvllm:num_requests_waiting 1\n"
    check(body, BUSY, 3.0)


def test_non_utf8_in_a_counted_line_is_malformed() -> None:
    """Text exposition is UTF-8: a label value that is not cannot name a series."""
    body = b'vllm:num_requests_running{model_name="caf\xe9"} 0\nvllm:num_requests_waiting 0\n'
    check(body, UNKNOWN, None, "malformed vllm:num_requests_running line")


def test_non_utf8_elsewhere_is_ignored() -> None:
    body = (
        b'# HELP vllm:num_requests_running caf\xe9\nvllm:num_requests_running{m="caf\xc3\xa9"} 1\n'
    )
    body += b'other_gauge{x="\xff"} 1\nvllm:num_requests_waiting 0\n'
    got = check(body, BUSY, 1.0)
    assert Series("vllm:num_requests_running", (("m", "café"),), 1.0) in got.series


# --- which engine -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "engine", "reason"),
    [
        pytest.param(
            text("vllm:num_requests_running 0"),
            "vllm",
            "required gauge missing: vllm:num_requests_waiting",
            id="vllm-waiting-missing",
        ),
        pytest.param(
            text("vllm:num_requests_waiting 3"),
            "vllm",
            "required gauge missing: vllm:num_requests_running",
            id="vllm-running-missing",
        ),
        pytest.param(
            text("sglang:num_running_reqs 0", "sglang:num_grammar_queue_reqs 0"),
            "sglang",
            "required gauge missing: sglang:num_queue_reqs",
            id="sglang-queue-missing",
        ),
        pytest.param(
            text(
                "# HELP vllm:num_requests_running Running.",
                "# TYPE vllm:num_requests_running gauge",
                "vllm:num_requests_waiting 0",
            ),
            "vllm",
            "required gauge missing: vllm:num_requests_running",
            id="family-declared-without-samples",
        ),
        pytest.param(
            text('sglang:num_running_reqs{priority=""} 0', 'sglang:num_queue_reqs{priority="0"} 0'),
            "sglang",
            "required gauge missing: sglang:num_queue_reqs",
            id="only-a-priority-breakdown",
        ),
        pytest.param(
            text(
                "vllm:num_requests_running_total 0",
                "vllm:num_requests_waiting_by_reason 0",
                "vllm:num_requests_waiting 0",
            ),
            "vllm",
            "required gauge missing: vllm:num_requests_running",
            id="look-alike-does-not-stand-in",
        ),
        pytest.param(
            text(*VLLM_IDLE, *SGLANG_IDLE), None, "both vllm and sglang", id="both-engines"
        ),
        pytest.param(
            text(*VLLM_IDLE, "# TYPE sglang:num_queue_reqs gauge"),
            None,
            "both vllm and sglang",
            id="both-by-type-line",
        ),
        pytest.param(b"", None, "no vllm or sglang", id="empty-body"),
        pytest.param(b"\n\n", None, "no vllm or sglang", id="blank-body"),
        pytest.param(
            text("process_cpu_seconds_total 1.5", "python_info 1"),
            None,
            "no vllm or sglang",
            id="no-engine",
        ),
        pytest.param(
            text("vllm:num_requests_waiting_by_reason 0", "xvllm:num_requests_running 0"),
            None,
            "no vllm or sglang",
            id="only-look-alikes",
        ),
        pytest.param(text("<html>Not Found</html>"), None, "no vllm or sglang", id="html"),
    ],
)
def test_engine_and_required_gauges(body: bytes, engine: str | None, reason: str) -> None:
    got = check(body, UNKNOWN, None, reason)
    assert got.engine == engine


def test_pinned_engine_reads_only_its_gauges() -> None:
    body = text(
        "vllm:num_requests_running 2",
        "vllm:num_requests_waiting 1",
        "sglang:num_running_reqs 0",
        "sglang:num_queue_reqs 0",
    )
    assert check(body, BUSY, 3.0, engine="vllm").engine == "vllm"
    assert check(body, IDLE, 0.0, engine="sglang").engine == "sglang"


def test_pinned_engine_ignores_the_other_engines_bad_lines() -> None:
    body = text(*VLLM_IDLE, "sglang:num_running_reqs NaN", "sglang:num_queue_reqs {")
    assert check(body, IDLE, 0.0, engine="vllm").engine == "vllm"


def test_pinned_engine_without_its_gauges_is_unknown() -> None:
    got = check(
        text("vllm:num_requests_running 2", "vllm:num_requests_waiting 1"),
        UNKNOWN,
        None,
        "required gauge missing",
        engine="sglang",
    )
    assert got.engine == "sglang"
    assert got.reason is not None
    assert "sglang:num_running_reqs" in got.reason and "sglang:num_queue_reqs" in got.reason


def test_unknown_reason_names_the_first_problem() -> None:
    body = text("vllm:num_requests_running -1", "vllm:num_requests_waiting NaN")
    check(body, UNKNOWN, None, "vllm:num_requests_running is negative")


def test_total_that_overflows_is_unknown() -> None:
    """Each sample is finite but their sum is not: no total to report (and no crash)."""
    body = text(
        'vllm:num_requests_running{engine="0"} 1.7e308',
        'vllm:num_requests_running{engine="1"} 1.7e308',
        "vllm:num_requests_waiting 0",
    )
    check(body, UNKNOWN, None, "counted total is not finite")
