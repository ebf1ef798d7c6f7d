"""The scanner against prometheus_client's parser, on generated expositions.

Hypothesis writes well-formed Prometheus text: the counted gauges of both
engines (either separator) with random label sets and values, among random
other families (gauges, counters, histograms, untyped; NaN and ±Inf values),
HELP/TYPE lines and comments that mention counted names, label values full of
escapes, `}`, `,`, `=` and `#`, optional timestamps, LF or CRLF, `# EOF`.

The samples the scanner counts must be exactly the counted samples the
reference parser finds (same canonical name, labels, value), minus the
SGLang's per-priority breakdown (CONTRACT §3). Label sets are drawn without `tp_rank`
and unique per gauge, so the scanner's tp_rank merge has nothing to merge.
The syntax is restricted to what both parsers read the same way.
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from drainhook.engines.exposition import scan
from drainhook.engines.gauges import ENGINES
from drainhook.engines.verdict import Verdict

Labels = tuple[tuple[str, str], ...]
Sample = tuple[str, Labels, float]

COUNTED = {name: engine.name for engine in ENGINES for name in engine.counted}
PREFIXES = [engine.prefix for engine in ENGINES]


def canonical(name: str) -> str | None:
    """The counted gauge a sample name is, by CONTRACT §3 (either separator)."""
    for prefix in PREFIXES:
        if name.startswith(f"{prefix}_"):
            name = f"{prefix}:{name[len(prefix) + 1 :]}"
    return name if name in COUNTED else None


# --- the generator --------------------------------------------------------------------

LOOK_ALIKES = [
    "vllm:num_requests_waiting_by_reason",
    "vllm_num_requests_waiting_by_reason",
    "vllm:num_requests_kv_fetch_by_stage",
    "vllm:num_requests_running_total",
    "xvllm:num_requests_running",
    "vllm:num_preemptions",
    "vllm:kv_cache_usage_perc",
    "sglang:num_decode_host_receive_queue_reqs",
    "sglang:num_retracted_reqs",
    "sglang_num_paused_reqs",
    "sglang:num_used_tokens",
    "xsglang_num_queue_reqs",
]
FRAGMENTS = [*COUNTED, *LOOK_ALIKES, "}", "{", ",", "=", '"', "\\", "\n", " # ", " 1", "\t", "é"]

# No `tp_rank` (its series would be merged) and no `le` (histograms add their own).
label_names = st.one_of(
    st.sampled_from(["engine", "model_name", "dp_rank", "pid", "priority", "reason"]),
    st.from_regex(r"[a-zA-Z][a-zA-Z0-9_]{0,6}", fullmatch=True),
).filter(lambda n: n not in ("tp_rank", "le"))

label_values = st.lists(
    st.one_of(
        st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=4),
        st.sampled_from(FRAGMENTS),
    ),
    max_size=4,
).map("".join)

label_sets = st.dictionaries(label_names, label_values, max_size=4)

counts = st.one_of(
    st.integers(0, 10**6).map(str),
    st.floats(0, 1e12, allow_nan=False).map(repr),
    st.floats(0, 1e6, allow_nan=False).map(lambda x: f"{x:.3e}"),
    st.floats(0, 1e6, allow_nan=False).map(lambda x: f"{x:E}"),
    st.sampled_from(["0", "0.0", "1", "1e3", "2.5E-1", "+3", ".5", "7."]),
)
any_values = st.one_of(
    counts, st.sampled_from(["NaN", "+Inf", "-Inf", "-1", "-0.5"]), st.floats().map(repr)
)
timestamps = st.one_of(st.none(), st.integers(-(10**13), 10**13).map(str))
blanks = st.sampled_from([" ", "\t", "  "])
help_texts = st.lists(
    st.one_of(
        st.sampled_from([*COUNTED, *LOOK_ALIKES, "9", "requests"]),
        st.from_regex(r"[a-z ]{0,8}", fullmatch=True),
    ),
    max_size=5,
).map(" ".join)


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@st.composite
def sample_line(draw: st.DrawFn, name: str, labels: dict[str, str], value: str) -> str:
    if labels:
        inner = ",".join(f'{k}="{escape(v)}"' for k, v in labels.items())
        inner += draw(st.sampled_from(["", ","]))
        label_text = "{" + inner + "}"
    else:
        label_text = draw(st.sampled_from(["", "{}"]))
    line = draw(st.sampled_from(["", " ", "\t"])) + name + label_text + draw(blanks) + value
    stamp = draw(timestamps)
    if stamp is not None:
        line += draw(blanks) + stamp
    return line


@st.composite
def family(
    draw: st.DrawFn, name: str, kind: str, samples: list[tuple[str, dict[str, str], str]]
) -> list[str]:
    lines = []
    if draw(st.booleans()):
        lines.append(f"# HELP {name} {draw(help_texts)}".rstrip())
    if kind != "untyped" or draw(st.booleans()):
        lines.append(f"# TYPE {name} {kind}")
    for sample_name, labels, value in samples:
        lines.append(draw(sample_line(sample_name, labels, value)))
    return lines


@st.composite
def counted_families(draw: st.DrawFn) -> list[list[str]]:
    """Families of counted gauges: per gauge, unique label sets, each series under
    either separator (a family per separator used)."""
    families = []
    for gauge in draw(st.lists(st.sampled_from(sorted(COUNTED)), unique=True, max_size=6)):
        series = draw(
            st.lists(label_sets, max_size=4, unique_by=lambda d: tuple(sorted(d.items())))
        )
        by_form: dict[str, list[tuple[str, dict[str, str], str]]] = {}
        for labels in series:
            form = draw(st.sampled_from([gauge, gauge.replace(":", "_", 1)]))
            by_form.setdefault(form, []).append((form, labels, draw(counts)))
        for form, samples in by_form.items():
            families.append(
                draw(family(form, draw(st.sampled_from(["gauge", "untyped"])), samples))
            )
    return families


@st.composite
def other_families(draw: st.DrawFn) -> list[list[str]]:
    names = st.one_of(
        st.sampled_from(LOOK_ALIKES),
        st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,12}", fullmatch=True),
    ).filter(lambda n: canonical(n) is None)
    families = []
    for name in draw(st.lists(names, unique=True, max_size=5)):
        kind = draw(st.sampled_from(["gauge", "counter", "untyped", "histogram"]))
        series = draw(st.lists(label_sets, max_size=3))
        samples: list[tuple[str, dict[str, str], str]] = []
        for labels in series:
            if kind == "counter":
                samples.append((f"{name}_total", labels, draw(any_values)))
            elif kind == "histogram":
                for le in ("0.5", "+Inf"):
                    samples.append((f"{name}_bucket", {**labels, "le": le}, draw(counts)))
                samples.append((f"{name}_sum", labels, draw(any_values)))
                samples.append((f"{name}_count", labels, draw(counts)))
            else:
                samples.append((name, labels, draw(any_values)))
        family_name = f"{name}_total" if kind == "counter" else name
        families.append(draw(family(family_name, kind, samples)))
    comments = draw(st.lists(help_texts.map(lambda t: f"# note: {t}"), max_size=2))
    families.extend([c] for c in comments)
    return families


@st.composite
def expositions(draw: st.DrawFn) -> str:
    families = draw(st.permutations(draw(counted_families()) + draw(other_families())))
    lines = [line for fam in families for line in fam]
    if draw(st.booleans()):
        lines.append("# EOF")
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    final_eol = bool(lines) and draw(st.booleans())
    return eol.join(lines) + (eol if final_eol else "")


# --- the comparison ----------------------------------------------------------------------


def reference(text: str) -> list[Sample]:
    """The counted samples prometheus_client finds, SGLang's per-priority breakdown
    dropped (a vLLM series with a priority label is counted: CONTRACT §3)."""
    found = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            name = canonical(s.name)
            if name is None or (name.startswith("sglang:") and s.labels.get("priority")):
                continue
            found.append((name, tuple(s.labels.items()), float(s.value)))
    return sorted(found, key=repr)


@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(expositions())
def test_scanner_agrees_with_prometheus_client(text: str) -> None:
    body = text.encode()
    expected = reference(text)

    scans = {engine.name: scan(body, engine.name) for engine in ENGINES}
    got = sorted(
        ((s.name, s.labels, s.value) for sc in scans.values() for s in sc.series), key=repr
    )
    assert got == expected

    # The verdict of each pinned engine follows from those samples alone.
    for engine in ENGINES:
        mine = [value for name, _, value in expected if COUNTED[name] == engine.name]
        present = {name for name, _, _ in expected}
        result = scans[engine.name]
        assert result.engine == engine.name
        if all(name in present for name in engine.required):
            total = math.fsum(mine)
            assert result.verdict is (Verdict.BUSY if total > 0 else Verdict.IDLE)
            assert result.in_flight == total
        else:
            assert result.verdict is Verdict.UNKNOWN
            assert result.reason is not None and "required gauge missing" in result.reason
