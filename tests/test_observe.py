"""`drainhook plan --observe`: G from the engine's latency histogram (CONTRACT §4).

The bodies in tests/samples/latency/ are what prometheus_client writes for each
engine's own family, labels and default bounds after a list of known request
latencies (scripts/latency_samples.py). For each, the quantiles and G are
computed here by hand, from those latencies and the bounds, and must be what
the tool says, through the pure core and through the real CLI (a saved scrape,
and the same body served on loopback).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from drainhook.engines.gauges import BY_NAME
from drainhook.hook.config import WaitConfig
from drainhook.hook.timeline import PlanWarning
from drainhook.planning import plan as planning
from drainhook.planning.histogram import INF, Observation, ceil_sum, recommend, scan_families
from drainhook.planning.observe import gather
from drainhook.reading.target import read_small_file
from tests.conftest import HOOK_LATE, SPAWN_LATE, late
from tests.support.docparts import part
from tests.support.loopback import Loopback, hang, sequence, serve
from tests.support.manifests import load_model
from tests.support.podns import netns
from tests.support.process import ROOT, Hook, Run, base_env

# vLLM's /load switch, which plan names for every vLLM (drainhook.plan.engine_flags).
LOAD_TRACKING = "--enable-server-load-tracking"

SAMPLES = ROOT / "tests" / "samples" / "latency"
OPERATIONS = ROOT / "docs" / "operations.md"


def body(name: str) -> bytes:
    return (SAMPLES / name).read_bytes()


@dataclass(frozen=True)
class Hand:
    """One distribution computed by hand: requests, p50/p99/p99.9 bounds, G for
    S = R = 5, and the share longer than D - S = 20 s for the default G = 30."""

    file: str
    engine: str
    requests: int
    quantiles: tuple[float, float, float]  # INF: the +Inf bucket
    grace: int | None
    longer: float
    warnings: frozenset[str]


# Each row's arithmetic, from the latencies in scripts/latency_samples.py and the
# engine's default bounds (a latency x lands in the first bucket whose bound >= x):
HAND = [
    # vLLM, two DP engines: 800+700 at 1.2 s -> (1, 1.5]: 1500; 200+200 at 4 s ->
    # (2.5, 5]: 400; 45+50 at 12 s -> (10, 15]: 95; 2+3 at 25 s -> (20, 30]: 5.
    # N = 2000; cumulative 1500 @1.5, 1900 @5, 1995 @15, 2000 @30.
    # p50: 0.5 x 2000 = 1000 <= 1500 -> 1.5. p99: 1980 > 1900, <= 1995 -> 15.
    # p99.9: 1998 > 1995 -> 30. G = ceil(5 + 30 + 5) = 40.
    # G = 30: D - S = 20; known within 20 s: cumulative at 20 = 1995 -> 5/2000 = 0.0025.
    Hand("vllm-chat-dp2.txt", "vllm", 2000, (1.5, 15, 30), 40, 0.0025,
         frozenset({"observe-cuts"})),
    # vLLM: 1000 at 600 s -> (480, 960]; 498 at 3000 s -> (1920, 7680]; 2 at 9000 s -> +Inf.
    # N = 1500; cumulative 1000 @960, 1498 @7680, 1500 @+Inf.
    # p50: 750 -> 960. p99: 1485 -> 7680. p99.9: 1498.5 > 1498 -> +Inf: no G.
    # Nothing is known to end within 20 s: 1500/1500.
    Hand("vllm-long-tail-inf.txt", "vllm", 1500, (960, 7680, INF), None, 1.0,
         frozenset({"observe-inf", "observe-cuts"})),
    # vLLM, 40 requests: 30 at 0.2 s -> (0, 0.3]; 9 at 3 s -> (2.5, 5]; 1 at 45 s -> (40, 50].
    # cumulative 30 @0.3, 39 @5, 40 @50. p50: 20 -> 0.3. p99: 39.6 > 39 -> 50.
    # p99.9: 39.96 -> 50. G = ceil(5 + 50 + 5) = 60. Within 20 s: 39 -> 1/40 = 0.025.
    Hand("vllm-small-sample.txt", "vllm", 40, (0.3, 50, 50), 60, 0.025,
         frozenset({"observe-small-sample", "observe-cuts"})),
    # SGLang, is_streaming="true": 2900 at 7 s -> (6, 8], 100 at 70 s -> (60, 80];
    # is_streaming="false": 990 at 0.5 s -> (0.4, 0.6], 10 at 150 s -> (100, 200].
    # N = 4000; cumulative 990 @0.6, 3890 @8, 3990 @80, 4000 @200.
    # p50: 2000 -> 8. p99: 3960 -> 80. p99.9: 3996 > 3990 -> 200. G = ceil(5 + 200 + 5) = 210.
    # Within 20 s: 3890 -> 110/4000 = 0.0275.
    Hand("sglang-streaming.txt", "sglang", 4000, (8, 80, 200), 210, 0.0275,
         frozenset({"observe-cuts"})),
    # SGLang (OpenMetrics, names written with '_'): 495 at 0.15 s -> (0.1, 0.2];
    # 5 at 0.9 s -> (0.8, 1]. N = 500; cumulative 495 @0.2, 500 @1.
    # p50: 250 -> 0.2. p99: 495 >= 495 exactly -> 0.2. p99.9: 499.5 -> 1.
    # ceil(5 + 1 + 5) = 11, under the 15 s floor: G = 15. Within 20 s: all 500 -> 0.
    Hand("sglang-short-openmetrics.txt", "sglang", 500, (0.2, 0.2, 1), 15, 0.0,
         frozenset({"observe-floor"})),
]  # fmt: skip
IDS = [h.file.removesuffix(".txt") for h in HAND]


def observed_warnings(
    config: WaitConfig, observed: Observation, quantile: float
) -> tuple[PlanWarning, ...]:
    """What plan's OBSERVE_RULES find in a plan of config that holds this evidence."""
    plan = planning.make_plan(config, known_engine=observed.engine)
    plan = dataclasses.replace(plan, observed=observed, quantile=quantile)
    return tuple(w for w in plan.warnings if w.code.startswith("observe-"))


def observe_file(*names: str, **flags: Any) -> tuple[Observation, Any]:
    config = planning.wait_config(**flags)
    observed = gather(
        engine=config.reach.engine,
        files=[SAMPLES / n for n in names],
        read_file=lambda p, cap: read_small_file(p, cap, "--from-file"),
    )
    return observed, recommend(config, observed, 0.999)


def plan_json(run: Run) -> dict[str, Any]:
    assert run.code == 0, run.stderr
    obj: dict[str, Any] = json.loads(run.stdout)
    return obj


# -- the samples are what the generator writes -------------------------------------------


def test_samples_are_current() -> None:
    spec = importlib.util.spec_from_file_location(
        "latency_samples", ROOT / "scripts" / "latency_samples.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["latency_samples"] = module
    spec.loader.exec_module(module)
    assert module.main(["--check"]) == 0, "run scripts/latency_samples.py"
    assert {s.file for s in module.SAMPLES} == {p.name for p in SAMPLES.glob("*.txt")}


def test_default_bounds_are_the_engines() -> None:
    """The bounds the samples carry are the ones the engine table records."""
    for sample, engine in (("vllm-chat-dp2.txt", "vllm"), ("sglang-streaming.txt", "sglang")):
        family = BY_NAME[engine].latency
        fams = scan_families(body(sample), [family.name])
        bounds = {b for s in fams[family.name].series.values() for b in s.buckets}
        assert bounds == {*family.default_bounds, INF}
    vllm, sglang = BY_NAME["vllm"].latency, BY_NAME["sglang"].latency
    assert (vllm.default_bounds[0], vllm.default_bounds[-1]) == (0.3, 7680)
    assert (sglang.default_bounds[0], sglang.default_bounds[-1]) == (0.1, 2400)


# -- five distributions, by hand ------------------------------------------------------


@pytest.mark.parametrize("hand", HAND, ids=IDS)
def test_recommendation_equals_the_hand_computation(hand: Hand) -> None:
    observed, rec = observe_file(hand.file)
    assert observed.engine == hand.engine
    assert observed.requests == hand.requests
    assert tuple(rec.quantiles.values()) == hand.quantiles
    assert rec.latency == hand.quantiles[2]
    assert rec.grace == hand.grace
    assert rec.longer == pytest.approx(hand.longer, abs=1e-12)
    warned = observed_warnings(planning.wait_config(), observed, 0.999)
    assert {w.code for w in warned} == hand.warnings


@pytest.mark.parametrize("hand", HAND, ids=IDS)
def test_cli_from_file_gives_the_hand_computation(hook: Hook, hand: Hand) -> None:
    obj = plan_json(hook("plan", "--from-file", str(SAMPLES / hand.file), "--output", "json"))
    seen = obj["observed"]
    assert obj["recommended_grace"] == hand.grace
    assert seen["requests"] == hand.requests
    assert seen["quantile"] == 0.999
    finite = [None if q == INF else q for q in hand.quantiles]
    assert seen["latency_s"] == finite[2]
    assert seen["quantiles"] == dict(zip(("0.5", "0.99", "0.999"), finite, strict=True))
    assert seen["longer_than_deadline"] == pytest.approx(hand.longer, abs=1e-12)
    assert seen["source"] == str(SAMPLES / hand.file)
    assert seen["engine"] == hand.engine
    assert obj["grace"] == 30  # the plan itself is the one given
    # With S = 5 s no vLLM advice stands (its --shutdown-timeout needs S < 5 s); an
    # SGLang seen in the histogram gets its exit reserve (sglang-exit).
    advice = {"sglang-exit"} if hand.engine == "sglang" else set()
    assert {w["code"] for w in obj["warnings"]} == hand.warnings | advice
    assert obj["engine"] == "auto"  # as given
    applied = obj["applied"]
    reserve = 10 if hand.engine == "sglang" else 5  # G from the histogram with that R
    assert applied["exit_reserve"] == reserve
    if hand.grace is not None:
        grace = max(15, math.ceil(5 + hand.quantiles[2] + reserve))
        assert grace == hand.grace + (reserve - 5) or hand.grace == 15
        assert applied["grace"] == grace
        changes = {c["field"]: c for c in applied["changes"]}
        assert set(changes) == ({"grace", "exit_reserve"} if reserve == 10 else {"grace"})
        assert (changes["grace"]["from"], changes["grace"]["to"]) == (30, grace)
        assert changes["grace"]["because"][0].startswith("observed: G = ceil(S 5 + p99.9 ")
    else:
        assert applied["changes"] == [] and applied["grace"] == 30
    assert applied["command"][applied["command"].index("--grace") + 1] == str(applied["grace"])


def test_the_quantile_flag_moves_the_bound() -> None:
    # vllm-chat-dp2: p99 (1980 <= 1995 at 15) -> G = ceil(5 + 15 + 5) = 25.
    config = planning.wait_config()
    observed, _ = observe_file("vllm-chat-dp2.txt")
    rec = recommend(config, observed, 0.99)
    assert (rec.latency, rec.grace) == (15, 25)
    # p95: 1900 >= 1900 exactly at 5 -> ceil(5 + 5 + 5) = 15.
    assert recommend(config, observed, 0.95).grace == 15


def test_g_follows_the_settle_and_exit_reserve_given() -> None:
    # vllm-chat-dp2, p99.9 = 30: ceil(10 + 30 + 20) = 60; ceil(2.5 + 30 + 2.2) = ceil(34.7) = 35.
    observed, _ = observe_file("vllm-chat-dp2.txt")
    assert (
        recommend(planning.wait_config(settle=10.0, exit_reserve=20.0), observed, 0.999).grace == 60
    )
    assert (
        recommend(planning.wait_config(settle=2.5, exit_reserve=2.2), observed, 0.999).grace == 35
    )


def test_ceil_of_the_exact_decimal_sum() -> None:
    assert 0.2 + 2.2 + 0.6 > 3  # binary floats: 3.0000000000000004
    assert ceil_sum(0.2, 2.2, 0.6) == 3
    assert ceil_sum(5.0, 0.3, 5.0) == 11
    assert ceil_sum(5.0, 30.0, 5.0) == 40
    assert ceil_sum(0.5, 1.0, 0.5) == 2


def test_over_an_hour_is_recommended_with_a_warning() -> None:
    # vllm-long-tail-inf at p99 = 7680: G = ceil(5 + 7680 + 5) = 7690, over 3600.
    observed, _ = observe_file("vllm-long-tail-inf.txt")
    rec = recommend(planning.wait_config(), observed, 0.99)
    assert rec.grace == 7690
    warned = observed_warnings(planning.wait_config(), observed, 0.99)
    assert "observe-grace-range" in {w.code for w in warned}


def test_inf_warning_names_the_largest_bound_and_the_engines_flag() -> None:
    observed, rec = observe_file("vllm-long-tail-inf.txt")
    warned = observed_warnings(planning.wait_config(), observed, 0.999)
    (inf,) = [w for w in warned if w.code == "observe-inf"]
    assert (rec.latency, observed.histogram.largest_bound) == (INF, 7680)
    assert BY_NAME["vllm"].latency.bucket_flag in inf.reason  # the engine's own flag
    assert "--bucket-e2e-request-latency" in BY_NAME["sglang"].latency.bucket_flag


def test_several_files_are_summed() -> None:
    # vllm-chat-dp2 + vllm-small-sample: N = 2040; cumulative 30 @0.3, 1530 @1.5, 1939 @5,
    # 2034 @15, 2039 @30, 2040 @50. p99.9: 2037.96 -> 30: G = 40. p99: 2019.6 -> 15.
    observed, rec = observe_file("vllm-chat-dp2.txt", "vllm-small-sample.txt")
    assert observed.requests == 2040
    assert tuple(rec.quantiles.values()) == (1.5, 15, 30)
    assert rec.grace == 40


# -- outputs ------------------------------------------------------------------------------


def test_text_output_draws_the_histogram_and_the_deadline_line(hook: Hook) -> None:
    run = hook("plan", "--from-file", str(SAMPLES / "vllm-chat-dp2.txt"))
    assert run.code == 0, run.stderr
    out = run.stdout.splitlines()
    rows = {line.split("]")[0].strip() + "]": line for line in out if line.strip().startswith("(")}
    assert rows["(1, 1.5]"].split("|")[0].split()[-1] == "1500"
    assert rows["(1, 1.5]"].count("#") == 40  # the fullest bucket: a whole bar
    assert rows["(2.5, 5]"].count("#") == math.ceil(400 / 1500 * 40)
    assert rows["(20, 30]"].rstrip().endswith("<- p99.9")
    at = [i for i, line in enumerate(out) if "D - S = 20s" in line and "---" in line]
    assert len(at) == 1
    assert out[at[0] - 1].strip().startswith("(15, 20]")  # within D - S above it, cut below
    assert out[at[0] + 1].strip().startswith("(20, 30]")
    text = run.stdout
    assert "recommended: G = 40s  (ceil(S 5s + p99.9 30s + R 5s) = 40s)" in text
    assert "preStop: /usr/local/bin/drainhook wait --grace 40" in text
    assert "p50 <= 1.5s  p99 <= 15s  p99.9 <= 30s" in text
    assert "at most 0.25% of observed requests ran longer" in text


def test_yaml_output_carries_the_recommended_g(hook: Hook) -> None:
    run = hook("plan", "--from-file", str(SAMPLES / "sglang-streaming.txt"), "--output", "yaml",
               "--engine", "sglang")  # fmt: skip
    assert run.code == 0, run.stderr
    data = yaml.safe_load(run.stdout)
    # SGLang's exit reserve (sglang-exit, R = 10) first, then G from the histogram with it.
    assert data["terminationGracePeriodSeconds"] == 215
    command = data["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
    assert command[command.index("--grace") + 1] == "215"
    assert command[command.index("--exit-reserve") + 1] == "10"
    spec = load_model(data, "V1PodSpec", "plan --observe --output yaml")
    assert spec.termination_grace_period_seconds == 215
    changed = [line for line in run.stdout.splitlines() if line.startswith("# changed:")]
    assert changed == [
        "# changed: --exit-reserve 5 -> 10 (sglang-exit: an SGLang server needs about 10s "
        "after SIGTERM)",
        "# changed: terminationGracePeriodSeconds 30 -> 215 "
        "(observed: G = ceil(S 5 + p99.9 200 + R 10) = 215)",
    ]
    assert "# with G = 215: D - S = 200s; at most 0% of observed requests ran longer" in run.stdout


def test_yaml_output_for_vllm_carries_the_shutdown_timeout_advice_only_where_it_saves_work(
    hook: Hook,
) -> None:
    """The engine is known from its histogram (--engine auto). With G from the observed
    requests and S = 5, nothing is left for vLLM's --shutdown-timeout to save (no request
    outlives D, none slips in after the settle), and it lengthens every exit: not advised.
    With a settle shorter than the router's deregistration (5 s) it is."""
    run = hook("plan", "--from-file", str(SAMPLES / "vllm-chat-dp2.txt"), "--output", "yaml",
               "--exit-reserve", "8")  # fmt: skip
    assert run.code == 0, run.stderr
    assert yaml.safe_load(run.stdout)["terminationGracePeriodSeconds"] == 43  # ceil(5+30+8)
    assert "--shutdown-timeout" not in run.stdout
    short = hook("plan", "--from-file", str(SAMPLES / "vllm-chat-dp2.txt"), "--output", "json",
                 "--exit-reserve", "8", "--settle", "3")  # fmt: skip
    assert short.code == 0, short.stderr
    applied = json.loads(short.stdout)["applied"]
    assert applied["grace"] == 41  # ceil(3 + 30 + 8)
    assert applied["engine_args"] == ["--shutdown-timeout", "7", LOAD_TRACKING]
    codes = {w["code"] for w in applied["warnings"]}
    assert {"vllm-shutdown-timeout", "settle-short"} <= codes
    # Without G from evidence (the plan as given, G 30) and S = 5 s: not advised either
    # (for work left at D, a larger G serves it better: docs/design.md §7).
    given = json.loads(
        hook("plan", "--engine", "vllm", "--exit-reserve", "8", "--output", "json").stdout
    )
    assert given["applied"]["engine_args"] == [LOAD_TRACKING]


def test_yaml_without_a_recommendation_keeps_the_given_g(hook: Hook) -> None:
    run = hook("plan", "--from-file", str(SAMPLES / "vllm-long-tail-inf.txt"), "--output", "yaml",
               "--grace", "60")  # fmt: skip
    assert run.code == 0, run.stderr
    assert yaml.safe_load(run.stdout)["terminationGracePeriodSeconds"] == 60
    assert "# no recommended G: the fragment keeps --grace 60" in run.stdout
    assert "observe-inf" in run.stdout


def test_every_observe_warning_is_documented() -> None:
    seen: set[str] = set()
    for name, q, flags in (
        ("vllm-long-tail-inf.txt", 0.999, {}),
        ("vllm-long-tail-inf.txt", 0.99, {}),
        ("vllm-small-sample.txt", 0.999, {}),
        ("sglang-short-openmetrics.txt", 0.999, {}),
    ):
        observed, _ = observe_file(name)
        seen |= {w.code for w in observed_warnings(planning.wait_config(**flags), observed, q)}
    seen |= {"observe-reset", "observe-bounds"}  # tested below, through real reads
    text = part(OPERATIONS, "observe-warnings")
    for code in seen:
        assert f"`{code}`" in text, f"docs/operations.md does not explain {code}"
    assert len(seen) == 7


# -- through real reads ---------------------------------------------------------------------


def observe(hook: Hook, *args: str, timeout: float = 30) -> Run:
    return hook("plan", "--observe", *args, timeout=timeout)


@pytest.mark.parametrize("hand", HAND, ids=IDS)
def test_a_loopback_read_gives_the_hand_computation(hook: Hook, hand: Hand) -> None:
    with Loopback(serve(body(hand.file))) as srv:
        url = srv.url
        obj = plan_json(observe(hook, "--url", url, "--output", "json"))
    assert srv.connections == 1
    assert obj["recommended_grace"] == hand.grace
    assert obj["observed"]["requests"] == hand.requests
    assert obj["observed"]["source"] == url


def test_several_targets_are_summed(hook: Hook) -> None:
    # As test_several_files_are_summed: N = 2040, p99.9 in (20, 30]: G = 40.
    with (
        Loopback(serve(body("vllm-chat-dp2.txt"))) as a,
        Loopback(serve(body("vllm-small-sample.txt"))) as b,
    ):
        ports = (a.port, b.port)
        obj = plan_json(observe(hook, "--port", str(a.port), "--port", str(b.port),
                                "--output", "json"))  # fmt: skip
    assert (a.connections, b.connections) == (1, 1)
    assert obj["observed"]["requests"] == 2040
    assert obj["observed"]["series"] == 3
    assert obj["recommended_grace"] == 40
    assert obj["observed"]["source"] == ",".join(f"http://127.0.0.1:{p}/metrics" for p in ports)


def test_window_uses_the_difference_of_two_reads(hook: Hook) -> None:
    """Before: 1000 at 1.2 s and an old tail of 10 at 300 s; 2000 at 4 s come in between.
    Difference: 2000 in (2.5, 5] -> p99.9 = 5 -> G = ceil(5 + 5 + 5) = 15. The second
    read alone would say N = 3010, p99.9: 3006.99 > 3000 at 5 -> 480 -> G = 490."""
    steps = sequence(serve(body("vllm-window-before.txt")), serve(body("vllm-window-after.txt")))
    with Loopback(steps) as srv:
        run = observe(hook, "--url", srv.url, "--window", "0.2", "--output", "json")
        whole = plan_json(observe(hook, "--url", srv.url, "--output", "json"))
    obj = plan_json(run)
    assert srv.connections == 3
    assert obj["observed"]["requests"] == 2000
    assert obj["observed"]["latency_s"] == 5
    assert obj["recommended_grace"] == 15
    assert 0.2 <= obj["observed"]["window_s"] < late(0.2, HOOK_LATE, run.starved)
    assert whole["observed"]["requests"] == 3010
    assert whole["recommended_grace"] == 490
    assert whole["observed"]["window_s"] is None


def test_window_across_a_restart_counts_the_second_read_whole(hook: Hook) -> None:
    """The engine restarted between the reads (its counts went down): the 300 requests
    of 4 s since the restart are the window: p99.9 = 5 -> G = 15, and a warning."""
    steps = sequence(
        serve(body("vllm-window-before.txt")), serve(body("vllm-window-after-restart.txt"))
    )
    with Loopback(steps) as srv:
        obj = plan_json(observe(hook, "--url", srv.url, "--window", "0.2", "--output", "json"))
    assert obj["observed"]["requests"] == 300
    assert obj["recommended_grace"] == 15
    (reset,) = [w for w in obj["warnings"] if w["code"] == "observe-reset"]
    assert reset["message"].startswith("1 series")


def test_window_with_no_traffic_recommends_nothing(hook: Hook) -> None:
    with Loopback(serve(body("vllm-window-before.txt"))) as srv:
        obj = plan_json(observe(hook, "--url", srv.url, "--window", "0.2", "--output", "json"))
    assert obj["observed"]["requests"] == 0
    assert obj["recommended_grace"] is None
    assert obj["observed"]["longer_than_deadline"] is None
    assert "observe-small-sample" in {w["code"] for w in obj["warnings"]}


def test_targets_with_other_bounds_are_summed_at_the_shared_ones(hook: Hook) -> None:
    # The small sample's engine with its own buckets: 0.3, 5, 50 only (its 30 @0.3, 39 @5,
    # 40 @50 keep their counts). Shared with the chat sample's defaults: 0.3, 5, 50.
    # Sum: 30 @0.3, 1939 @5, 2040 @50; p99.9 2037.96 -> 50: G = ceil(5 + 50 + 5) = 60.
    small = b"\n".join(
        line
        for line in body("vllm-small-sample.txt").splitlines()
        if b"_bucket" not in line or any(f'le="{b}"'.encode() in line
                                         for b in ("0.3", "5.0", "50.0", "+Inf"))
    )  # fmt: skip
    with Loopback(serve(body("vllm-chat-dp2.txt"))) as a, Loopback(serve(small)) as b:
        obj = plan_json(observe(hook, "--url", a.url, "--url", b.url, "--output", "json"))
    assert obj["observed"]["requests"] == 2040
    assert obj["recommended_grace"] == 60
    assert "observe-bounds" in {w["code"] for w in obj["warnings"]}


def test_https_with_cacert(hook: Hook, tmp_path: Path) -> None:
    import ssl

    import trustme

    ca = trustme.CA()
    cacert = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(cacert))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("localhost").configure_cert(ctx)
    with Loopback(serve(body("vllm-chat-dp2.txt")), tls=ctx) as srv:
        url = f"https://localhost:{srv.port}/metrics"
        obj = plan_json(observe(hook, "--url", url, "--cacert", str(cacert), "--output", "json"))
    assert obj["recommended_grace"] == 40


# -- errors and exit codes ------------------------------------------------------------------


def one_line(run: Run) -> str:
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert "Traceback" not in run.stderr
    assert run.stdout == ""
    return lines[0]


def test_no_histogram_is_a_usage_error_naming_what_is_missing(hook: Hook) -> None:
    gauges = b"vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n"
    with Loopback(serve(gauges)) as srv:
        url = srv.url
        run = observe(hook, "--url", url)
        pinned = observe(hook, "--url", url, "--engine", "sglang")
    assert run.code == 2
    line = one_line(run)
    assert "vllm:e2e_request_latency_seconds or sglang:e2e_request_latency_seconds" in line
    assert url in line
    assert pinned.code == 2
    assert "no sglang:e2e_request_latency_seconds histogram" in one_line(pinned)
    assert "--enable-metrics" in one_line(pinned)


def test_both_engines_histograms_ask_for_an_engine(hook: Hook, tmp_path: Path) -> None:
    both = tmp_path / "both.txt"
    both.write_bytes(body("vllm-small-sample.txt") + body("sglang-streaming.txt"))
    run = hook("plan", "--from-file", str(both))
    assert run.code == 2
    assert "pin --engine" in one_line(run)
    pinned = plan_json(hook("plan", "--from-file", str(both), "--engine", "sglang",
                            "--output", "json"))  # fmt: skip
    assert pinned["recommended_grace"] == 210


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('vllm:e2e_request_latency_seconds_bucket{le="1.0"} 5\n'
         'vllm:e2e_request_latency_seconds_bucket{le="5.0"} 3\n'
         'vllm:e2e_request_latency_seconds_bucket{le="+Inf"} 6\n', "not cumulative"),
        ('vllm:e2e_request_latency_seconds_bucket{le="1.0"} NaN\n'
         'vllm:e2e_request_latency_seconds_bucket{le="+Inf"} 6\n', "a count of nan"),
        ('vllm:e2e_request_latency_seconds_bucket{le="+Inf"} 6\n'
         'vllm:e2e_request_latency_seconds_count 9\n', "_count is 9"),
        # Before: G lowered from 30 to 15 with exit 0.
        ('vllm:e2e_request_latency_seconds_bucket{le="-5"} 6\n'
         'vllm:e2e_request_latency_seconds_bucket{le="+Inf"} 6\n', "le='-5' is not an upper bound"),
        ('vllm:e2e_request_latency_seconds_bucket{le="NaN"} 6\n'
         'vllm:e2e_request_latency_seconds_bucket{le="+Inf"} 6\n', "is not an upper bound"),
        # Before: a G of 309 digits, written into the Pod spec.
        ('vllm:e2e_request_latency_seconds_bucket{le="1e308"} 6\n'
         'vllm:e2e_request_latency_seconds_bucket{le="+Inf"} 6\n', "past what Kubernetes accepts"),
    ],
    ids=["non-monotonic", "nan", "count-disagrees", "negative-bound", "nan-bound", "huge-bound"],
)  # fmt: skip
def test_a_broken_histogram_is_an_error_not_a_wrong_g(hook: Hook, text: str, words: str) -> None:
    with Loopback(serve(text.encode())) as srv:
        run = observe(hook, "--url", srv.url, "--output", "yaml")
    assert run.code == 3
    assert words in one_line(run)
    assert "terminationGracePeriodSeconds" not in run.stdout  # no G written


def test_unreachable_exits_4(hook: Hook) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/metrics"
    run = observe(hook, "--url", url)
    assert run.code == 4
    assert "connection refused" in one_line(run)


def test_a_read_that_times_out_exits_3_within_the_read_timeout(hook: Hook) -> None:
    with Loopback(hang) as srv:
        run = observe(hook, "--url", srv.url, "--read-timeout", "0.3")
    assert run.code == 3
    assert "timed out" in one_line(run)
    assert run.elapsed < late(0.3, SPAWN_LATE, run.starved)  # the read timeout


def test_a_body_over_max_body_exits_3(hook: Hook) -> None:
    with Loopback(serve(body("vllm-chat-dp2.txt"))) as srv:
        run = observe(hook, "--url", srv.url, "--max-body", "1KiB")
    assert run.code == 3
    assert "--max-body" in one_line(run)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--from-file", "/nonexistent/scrape.txt"), "cannot read --from-file"),
        (("--from-file", "/dev/null"), "not a regular file"),
        (("--from-file", "FILE", "--window", "1"), "--window needs two reads"),
        (("--observe", "--quantile", "0"), "--quantile"),
        (("--observe", "--quantile", "1.5"), "--quantile"),
        (("--observe", "--window", "0"), "--window"),
        (("--url", "http://127.0.0.1:1/metrics"), "--url need --observe"),
        (("--quantile", "0.99"), "--quantile need --observe"),
    ],
    ids=["missing-file", "not-regular", "file-window", "q-zero", "q-over", "window-zero",
         "url-without-observe", "quantile-without-observe"],
)  # fmt: skip
def test_usage_errors(hook: Hook, args: tuple[str, ...], words: str) -> None:
    args = tuple(str(SAMPLES / "vllm-chat-dp2.txt") if a == "FILE" else a for a in args)
    run = hook("plan", *args)
    assert run.code == 2, run.stderr
    assert words in one_line(run)


def test_the_environment_names_the_target_as_for_wait(hook: Hook) -> None:
    """`kubectl exec POD -- drainhook plan --observe` reads what the hook reads; plan
    without --observe is not disturbed by the hook's DRAINHOOK_URL."""
    with Loopback(serve(body("vllm-chat-dp2.txt"))) as srv:
        env = {"DRAINHOOK_URL": srv.url}
        obj = plan_json(hook("plan", "--observe", "--output", "json", env=env))
        plain = plan_json(hook("plan", "--output", "json", env=env))
    assert obj["recommended_grace"] == 40
    assert "observed" not in plain and "recommended_grace" not in plain
    assert srv.connections == 1


UNSHARE = netns() or []


@pytest.mark.skipif(not UNSHARE, reason="no empty network namespace (`unshare -n`) here")
def test_a_remote_target_is_refused_before_any_read(entry: list[str]) -> None:
    argv = [*UNSHARE, *entry, "plan", "--observe", "--host", "10.1.2.3"]
    run = subprocess.run(argv, env=base_env(), capture_output=True, text=True, timeout=30)
    assert run.returncode == 2, run.stderr
    assert "loopback" in run.stderr and "--allow-remote" in run.stderr
    allowed = subprocess.run([*argv, "--allow-remote"], env=base_env(), capture_output=True,
                             text=True, timeout=30)  # fmt: skip
    # The empty namespace has no route: not a refusal, a read in doubt (CONTRACT §2).
    assert allowed.returncode == 3, allowed.stderr


def test_every_engine_has_its_own_latency_family() -> None:
    from drainhook.engines.gauges import ENGINE_NAMES

    assert set(BY_NAME) == set(ENGINE_NAMES)
    for name, engine in BY_NAME.items():
        assert engine.latency.name == f"{engine.prefix}:e2e_request_latency_seconds", name
        assert engine.latency.default_bounds == tuple(sorted(set(engine.latency.default_bounds)))
