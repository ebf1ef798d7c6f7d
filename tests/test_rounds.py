"""Several targets read as one round: the combination rules, then the CLI end to end."""

from __future__ import annotations

import json
import socket

import pytest

from drainhook.engines.verdict import Reading, Series, Verdict
from drainhook.reading.rounds import Round, combine_readings
from tests.support.logs import events
from tests.support.loopback import Loopback, sample, sequence, serve
from tests.support.process import NO_HOLD, Hook

A, B = "http://127.0.0.1:8000/metrics", "http://127.0.0.1:8001/metrics"


def counted(total: float, engine: str = "vllm", rank: str = "0") -> Reading:
    """A reading of one DP rank's engine (its `engine` label) holding `total`."""
    verdict = Verdict.BUSY if total else Verdict.IDLE
    series = (Series("vllm:num_requests_running", (("engine", rank),), total),)
    return Reading(verdict, engine, total, series, None, 1.0)


def failed(verdict: Verdict, reason: str = "x") -> Reading:
    return Reading.failed(verdict, reason, 1.0)


def test_answering_targets_are_summed() -> None:
    r = combine_readings([(A, counted(2, rank="0")), (B, counted(3, rank="1"))], set())
    assert (r.verdict, r.in_flight, len(r.series), r.engine) == (Verdict.BUSY, 5, 2, "vllm")
    assert [n for n, _ in r.parts] == [A, B]


def test_a_series_seen_on_two_targets_counts_once_at_its_max() -> None:
    # A proxy re-exporting the engine's gauges (B), read a moment after the engine (A).
    r = combine_readings([(A, counted(3)), (B, counted(2))], set())
    assert (r.verdict, r.in_flight, len(r.series)) == (Verdict.BUSY, 3, 1)
    assert combine_readings([(A, counted(0)), (B, counted(0))], set()).verdict is Verdict.IDLE


def test_a_target_that_answered_then_refuses_counts_as_zero() -> None:
    refused = Reading.failed(Verdict.UNREACHABLE, "connection refused", 1.0)
    # Never answered: the round is in doubt (a typo must not shrink the drain).
    never = combine_readings([(A, refused), (B, counted(0))], {B})
    assert never.verdict is Verdict.UNKNOWN and never.reason is not None
    # Once it has answered, refusing again is an engine that exited: 0, and said.
    gone = combine_readings([(A, refused), (B, counted(0))], {A, B})
    assert gone.verdict is Verdict.IDLE and gone.reason is not None and "exited" in gone.reason


def test_every_target_refused_is_an_unreachable_round() -> None:
    refused = Reading.failed(Verdict.UNREACHABLE, "connection refused", 1.0)
    assert combine_readings([(A, refused), (B, refused)], set()).verdict is Verdict.UNREACHABLE


def test_idle_only_when_every_target_is_idle() -> None:
    assert combine_readings([(A, counted(0)), (B, counted(0))], set()).verdict is Verdict.IDLE
    assert combine_readings([(A, counted(0)), (B, counted(1))], set()).verdict is Verdict.BUSY


def test_one_unknown_target_makes_the_round_unknown() -> None:
    r = combine_readings([(A, counted(0)), (B, failed(Verdict.UNKNOWN, "read timed out"))], {A, B})
    assert (r.verdict, r.in_flight) == (Verdict.UNKNOWN, None)
    assert r.reason == f"{B}: read timed out"


def test_all_unreachable_is_unreachable() -> None:
    r = combine_readings([(A, failed(Verdict.UNREACHABLE)), (B, failed(Verdict.UNREACHABLE))], {A})
    assert r.verdict is Verdict.UNREACHABLE
    assert r.reason is not None and "all 2 targets unreachable" in r.reason


def test_a_target_that_never_answered_holds_the_round_unknown() -> None:
    # A typo in a port must not shrink the drain to the other targets.
    r = combine_readings([(A, counted(0)), (B, failed(Verdict.UNREACHABLE, "refused"))], {A})
    assert (r.verdict, r.in_flight) == (Verdict.UNKNOWN, None)
    assert r.reason == f"{B} unreachable and has not answered yet (refused)"


def test_a_target_gone_after_answering_counts_as_zero() -> None:
    r = combine_readings([(A, counted(0)), (B, failed(Verdict.UNREACHABLE, "refused"))], {A, B})
    assert (r.verdict, r.in_flight) == (Verdict.IDLE, 0)
    assert r.reason is not None and B in r.reason and "counted as 0" in r.reason


def test_targets_that_disagree_on_the_engine_are_unknown() -> None:
    r = combine_readings([(A, counted(0, "vllm")), (B, counted(0, "sglang"))], set())
    assert r.verdict is Verdict.UNKNOWN
    assert r.engine is None


class Fake:
    def __init__(self, name: str, readings: list[Reading]) -> None:
        self.name = name
        self.readings = readings
        self.timeouts: list[float] = []

    def read(self, timeout: float) -> Reading:
        self.timeouts.append(timeout)
        return self.readings.pop(0)

    def close(self) -> None:
        pass


def test_round_remembers_who_answered_and_shares_one_timeout() -> None:
    now = [0.0]
    a = Fake(A, [counted(0), counted(0)])
    b = Fake(B, [counted(0), failed(Verdict.UNREACHABLE)])

    def clock() -> float:
        now[0] += 0.25  # each look at the clock: a quarter second has passed
        return now[0]

    rnd = Round([a, b], clock=clock)
    assert rnd.read(1.0).verdict is Verdict.IDLE
    # B answered in round 1, so its refusal in round 2 is an exited engine: 0.
    second = rnd.read(1.0)
    assert (second.verdict, second.in_flight) == (Verdict.IDLE, 0)
    # The second target of a round gets what the first left of the round's second.
    assert a.timeouts[0] == pytest.approx(0.75)
    assert b.timeouts[0] == pytest.approx(0.5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


TIMELINE = ("--settle", "0.2", "--interval", "0.1", "--grace", "2.5", "--exit-reserve", "0.5")


def test_wait_sums_several_ports_until_every_rank_is_idle(hook: Hook) -> None:
    busy, idle = sample("vllm-single-dp2.txt"), sample("vllm-single-dp2-idle.txt")
    with (
        Loopback(serve(idle)) as rank0,
        Loopback(sequence(serve(busy), serve(busy), serve(idle))) as rank1,
    ):
        run = hook("wait", "--port", str(rank0.port), "--port", str(rank1.port), *TIMELINE)
    assert run.code == 0, run.stderr
    assert "outcome=drained" in run.summary and "reads=4" in run.summary
    assert (rank0.connections, rank1.connections) == (4, 4)
    reads = [line for line in run.lines if " read=" in line]
    assert "in_flight=6" in reads[0] and "targets=2 answering=2" in reads[0]


def test_wait_with_a_mistyped_port_waits_to_the_deadline(hook: Hook) -> None:
    idle = sample("vllm-single-dp2-idle.txt")
    dead = free_port()
    with Loopback(serve(idle)) as rank0:
        run = hook("wait", "--port", str(rank0.port), "--port", str(dead), *TIMELINE,
                   "--log-format", "json")  # fmt: skip
    assert run.code == 3, run.stderr
    (summary,) = events(run.stderr, "summary")
    assert summary["outcome"] == "deadline"
    why = f"http://127.0.0.1:{dead}/metrics unreachable and has not answered yet"
    assert any(why in (read["reason"] or "") for read in events(run.stderr, "read")), run.stderr
    assert rank0.connections >= 10  # it kept reading the live rank


def test_wait_urls_from_the_environment_are_space_separated(hook: Hook) -> None:
    idle = sample("vllm-single-dp2-idle.txt")
    with Loopback(serve(idle)) as a, Loopback(serve(idle)) as b:
        run = hook("wait", *TIMELINE, env={"DRAINHOOK_URL": f"{a.url} {b.url}"})
    assert run.code == 0, run.stderr
    assert (a.connections, b.connections) == (2, 2)


def test_the_same_target_twice_is_a_usage_error(hook: Hook) -> None:
    run = hook("wait", "--port", "8123", "--port", "8123", *NO_HOLD)
    assert run.code == 2
    assert "given twice" in run.stderr and len(run.lines) == 1


def test_probe_shows_each_target(hook: Hook) -> None:
    busy = sample("vllm-single-dp2.txt")
    dead = free_port()
    with Loopback(serve(busy)) as rank0:
        url = rank0.url
        run = hook("probe", "--json", "--port", str(rank0.port), "--port", str(dead))
    obj = json.loads(run.stdout)
    assert run.code == 3  # unknown: one target has never answered
    assert obj["verdict"] == "unknown" and obj["in_flight"] is None
    assert [t["verdict"] for t in obj["targets"]] == ["busy", "unreachable"]
    assert obj["targets"][0]["in_flight"] == 6
    assert obj["target"] == f"{url},http://127.0.0.1:{dead}/metrics"


class Slow:
    """A target whose read takes `takes` seconds of a fake clock (never past `left`)."""

    def __init__(self, name: str, now: list[float], takes: float) -> None:
        self.name = name
        self.now = now
        self.takes = takes
        self.lefts: list[float] = []

    def read(self, left: float) -> Reading:
        self.lefts.append(left)
        self.now[0] += min(self.takes, left)
        return counted(0, rank=self.name)

    def close(self) -> None:
        pass


def test_a_round_stops_at_d() -> None:
    """Thousands of targets overran D by about 50 µs each (every one given 1 µs): a
    target the round cannot start before D is not read, and the round is unknown."""
    now = [0.0]
    targets = [Slow(f"t{i}", now, 0.4) for i in range(5)]
    got = Round(targets, clock=lambda: now[0]).read(1.0)  # type: ignore[arg-type]
    assert [len(t.lefts) for t in targets] == [1, 1, 1, 0, 0]
    assert [t.lefts[0] for t in targets[:3]] == pytest.approx([1.0, 0.6, 0.2])
    assert now[0] == pytest.approx(1.0)
    assert (got.verdict, got.reason) == (Verdict.UNKNOWN, "no time left before D to read t3")
