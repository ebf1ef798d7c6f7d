"""Listener discovery in the hook (CONTRACT §2a), end to end: `wait` and `probe`
(each entry point) in a new, empty network namespace beside the listeners a
test scripts (tests/support/podns.py), never this machine's own.

The configured target is 127.0.0.1:8000 with nothing listening there, unless
a case says otherwise. "In a Pod" is KUBERNETES_SERVICE_HOST set, as
Kubernetes sets it in every container; the tests' environment drops it
otherwise (tests/conftest.py). Discovery is on only with --discover, in a Pod
too. Each case asserts the outcome, the exit code,
the timing and how many reads each listener saw, so that a hook that does not
discover, discovers when it must not, or reads a listener twice, fails it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from drainhook.hook.config import EXIT_ALLOWANCE
from drainhook.reading.discovery.listeners import MAX_READS
from tests.conftest import HOOK_LATE, POD_LATE, late
from tests.support.logs import fields, hook_lines
from tests.support.podns import Pod, PodRun, Reply, Server, hanging, sidecar
from tests.support.process import NO_HOLD

IN_POD = {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}
CONFIGURED = "http://127.0.0.1:8000/metrics"
SETTLE, INTERVAL = 0.2, 0.2
GRACE, RESERVE = 6.0, 1.0
D = GRACE - RESERVE
TIMELINE = (
    "--settle", str(SETTLE), "--interval", str(INTERVAL),
    "--grace", str(GRACE), "--exit-reserve", str(RESERVE),
)  # fmt: skip
MESH_STATS = "envoy_server_live 1\nenvoy_cluster_upstream_rq_total 12\n"


def vllm(rank: str, running: float, waiting: float = 0) -> Reply:
    """A vLLM DP rank's /metrics body (its `engine` label is the rank)."""
    labels = f'engine="{rank}",model_name="m"'
    body = (
        f"vllm:num_requests_running{{{labels}}} {running}\n"
        f"vllm:num_requests_waiting{{{labels}}} {waiting}\n"
    )
    return Reply(body=body)


def vllm_engine(name: str, port: int, *replies: Reply, host: str = "0.0.0.0") -> Server:
    return Server(name, host, port, {"/metrics": list(replies)})


def sidecars() -> list[Server]:
    """What a Pod holds beside its engine: a mesh's admin port (404), its stats
    port (200 without engine gauges, on ::), and a listener that speaks no HTTP."""
    return [
        sidecar("mesh-admin", 15000),
        sidecar("mesh-stats", 15090, 200, MESH_STATS, host="::"),
        Server("zmq", "0.0.0.0", 5555, other=Reply(raw="\xff\x00\x00\x00\x00\x00\x00\x00\x01\x7f")),
    ]


def reads(run: PodRun) -> list[dict[str, str]]:
    return [fields(line) for line in run.lines if " read=" in line]


def discovery_lines(run: PodRun) -> list[dict[str, str]]:
    return [fields(line) for line in run.lines if " discovery " in line]


def requests(run: PodRun, *names: str) -> dict[str, int]:
    return {n: len(run.servers[n].requests) for n in names}


def assert_drained(run: PodRun, n: int) -> dict[str, str]:
    assert run.code == 0, run.stderr
    end = fields(run.summary)
    assert (end["outcome"], end["reads"], end["in_flight"]) == ("drained", str(n), "0"), run.stderr
    return end


# ---- wait ------------------------------------------------------------------------


def test_a_refused_target_finds_the_engine_on_another_port_and_drains_it(pod: Pod) -> None:
    moved = vllm_engine("engine", 8123, vllm("0", 2), vllm("0", 0))
    run = pod([moved, *sidecars()], "wait", "--port", "8000", *TIMELINE, "--discover", env=IN_POD)
    end = assert_drained(run, 3)
    # The search's read of the engine is the first read (busy 2); then every I.
    assert [r["in_flight"] for r in reads(run)] == ["2", "0", "0"]
    assert SETTLE + 2 * INTERVAL <= float(end["elapsed"]) < late(SETTLE + 2 * INTERVAL, POD_LATE)
    assert end["target"] == f"{CONFIGURED},http://127.0.0.1:8123/metrics"
    assert run.servers["engine"].paths == ["/metrics"] * 3
    assert requests(run, "mesh-admin", "mesh-stats", "zmq") == {
        "mesh-admin": 1,
        "mesh-stats": 1,
        "zmq": 1,
    }  # left alone after one read
    (said,) = discovery_lines(run)  # once
    assert (said["configured"], said["found"], said["tried"]) == (
        CONFIGURED,
        "http://127.0.0.1:8123/metrics",
        "4",
    )
    times = [r.t for r in run.servers["engine"].requests]
    assert times[2] - times[1] >= INTERVAL - 0.01  # the drain's cadence after the search


def test_nothing_found_is_unreachable_naming_every_listener_tried(pod: Pod) -> None:
    run = pod(sidecars(), "wait", "--port", "8000", *TIMELINE, "--discover", env=IN_POD)
    assert run.code == 4, run.stderr
    end = fields(run.summary)
    assert (end["outcome"], end["reads"]) == ("unreachable", "1")
    assert float(end["elapsed"]) < late(SETTLE, POD_LATE)  # at once, not at D
    reason = end["reason"]
    assert reason.startswith("cannot connect: connection refused; no engine elsewhere in the Pod")
    for url in (
        "http://127.0.0.1:5555/metrics",
        "http://127.0.0.1:15000/metrics (HTTP 404)",
        "http://[::1]:15090/metrics (no vllm or sglang request gauges)",
    ):
        assert url in reason
    assert requests(run, "mesh-admin", "mesh-stats", "zmq") == {
        "mesh-admin": 1,
        "mesh-stats": 1,
        "zmq": 1,
    }
    (said,) = discovery_lines(run)
    assert said["found"] == "-"


@pytest.mark.parametrize("status", [404, 302])
def test_an_unreachable_target_that_did_not_refuse_starts_no_search(pod: Pod, status: int) -> None:
    """A 3xx or 4xx status on the configured port is unreachable as before: the
    engine elsewhere is never read."""
    servers = [sidecar("configured", 8000, status), vllm_engine("engine", 8123, vllm("0", 0))]
    run = pod(servers, "wait", "--port", "8000", *TIMELINE, "--discover", env=IN_POD)
    assert run.code == 4, run.stderr
    end = fields(run.summary)
    assert end["outcome"] == "unreachable" and float(end["elapsed"]) < late(SETTLE, POD_LATE)
    assert end["reason"] == f"HTTP {status}"
    assert len(run.servers["configured"].requests) == 1
    assert run.servers["engine"].requests == ()
    assert discovery_lines(run) == []


def test_a_5xx_on_the_configured_target_holds_and_starts_no_search(pod: Pod) -> None:
    """A 503 says the engine is there and troubled (CONTRACT §2: unknown): the
    hook holds to D and never reads the other listener."""
    servers = [sidecar("configured", 8000, 503), vllm_engine("engine", 8123, vllm("0", 0))]
    short = ("--settle", str(SETTLE), "--interval", str(INTERVAL), "--grace", "2.5")
    run = pod(
        servers, "wait", "--port", "8000", *short, "--exit-reserve", "0.5", "--discover", env=IN_POD
    )
    assert run.code == 3, run.stderr
    end = fields(run.summary)
    assert end["outcome"] == "deadline" and end["reason"] == "HTTP 503"
    assert len(run.servers["configured"].requests) >= 3
    assert run.servers["engine"].requests == ()
    assert discovery_lines(run) == []


def test_a_refused_target_beside_an_answering_one_keeps_the_several_targets_rule(
    pod: Pod,
) -> None:
    servers = [vllm_engine("rank0", 8001, vllm("0", 0)), vllm_engine("engine", 8123, vllm("1", 0))]
    short = ("--settle", str(SETTLE), "--interval", str(INTERVAL), "--grace", "2.5")
    args = ("--port", "8001", "--port", "8000", *short, "--exit-reserve", "0.5")
    run = pod(servers, "wait", *args, "--discover", env=IN_POD)
    assert run.code == 3, run.stderr  # the refused port holds the round unknown to D
    end = fields(run.summary)
    assert end["outcome"] == "deadline"
    assert 2.0 - EXIT_ALLOWANCE <= float(end["elapsed"]) < late(2.0, POD_LATE)
    assert len(run.servers["rank0"].requests) >= 3  # it kept reading the live one
    assert run.servers["engine"].requests == ()
    assert discovery_lines(run) == []


@pytest.mark.parametrize(
    ("env", "args", "searches"),
    [
        ({}, (), False),  # off by default
        (IN_POD, (), False),  # inside a Pod too (CONTRACT §2a: on request)
        ({}, ("--discover",), True),
        (IN_POD, ("--discover",), True),
        ({"DRAINHOOK_DISCOVER": "1"}, (), True),
        ({**IN_POD, "DRAINHOOK_DISCOVER": "1"}, ("--no-discover",), False),  # the flag wins
        ({**IN_POD, "DRAINHOOK_NO_DISCOVER": "1"}, ("--discover",), True),
    ],
    ids=["outside", "pod", "flag", "pod-flag", "env", "no-flag-beats-env", "flag-beats-env"],
)
def test_discovery_is_on_only_when_asked_for(
    pod: Pod, env: dict[str, str], args: tuple[str, ...], searches: bool
) -> None:
    moved = vllm_engine("engine", 8123, vllm("0", 0))
    run = pod([moved], "wait", "--port", "8000", *args, *TIMELINE, env=env)
    if searches:
        assert_drained(run, 2)
        assert run.servers["engine"].paths == ["/metrics"] * 2
    else:
        assert run.code == 4, run.stderr
        assert fields(run.summary)["outcome"] == "unreachable"
        assert run.servers["engine"].requests == ()
        assert discovery_lines(run) == []


def test_a_refused_target_in_a_pod_touches_no_other_listener_and_names_their_ports(
    pod: Pod, tmp_path: Path
) -> None:
    """Without --discover (CONTRACT §2a): unreachable right after the settle; not
    one connection to the engine that moved nor to any sidecar, and the summary
    and the termination message name the ports that listen, read from /proc."""
    servers = [vllm_engine("engine", 8123, vllm("0", 1)), *sidecars()]
    message = tmp_path / "termination"
    args = ("--termination-log", str(message), *TIMELINE)
    run = pod(servers, "wait", "--port", "8000", *args, env=IN_POD)
    assert run.code == 4, run.stderr
    end = fields(run.summary)
    assert (end["outcome"], end["reads"]) == ("unreachable", "1")
    assert float(end["elapsed"]) < late(SETTLE, POD_LATE)
    assert end["reason"] == "cannot connect: connection refused"
    assert end["listening"] == "5555,8123,15000,15090"
    assert {name: log.connections for name, log in run.servers.items()} == {
        name: tuple(0 for _ in log.connections) for name, log in run.servers.items()
    }
    assert all(sum(log.connections) == 0 for log in run.servers.values())
    assert message.read_text().endswith("TCP ports listening here: 5555,8123,15000,15090")
    alone = pod([], "wait", "--port", "8000", "--log-format", "json", *TIMELINE, env=IN_POD)
    summary = json.loads(alone.summary)
    assert (alone.code, summary["listening"]) == (4, [])


def test_discover_and_no_discover_together_are_a_usage_error(pod: Pod) -> None:
    run = pod([], "wait", "--discover", "--no-discover", *NO_HOLD, env=IN_POD)
    assert run.code == 2 and len(run.lines) == 1
    assert "--discover and --no-discover" in run.stderr


def test_a_proxy_re_exporting_the_engine_is_counted_once(pod: Pod) -> None:
    """The engine (8123) and a proxy serving a copy of its /metrics (9100): the
    same series twice count once, at their max (3, not 6)."""
    script = (vllm("0", 3), vllm("0", 0))
    servers = [vllm_engine("engine", 8123, *script), vllm_engine("proxy", 9100, *script)]
    run = pod(servers, "wait", "--port", "8000", *TIMELINE, "--discover", env=IN_POD)
    assert_drained(run, 3)
    assert [r["in_flight"] for r in reads(run)] == ["3", "0", "0"]
    assert requests(run, "engine", "proxy") == {"engine": 3, "proxy": 3}


def test_vllm_multi_port_dp_listeners_add_up(pod: Pod) -> None:
    """--data-parallel-multi-port-external-lb: each rank on its own port with its
    own `engine` label; the hook was given the wrong port. 2 + 3 = 5."""
    servers = [
        vllm_engine("rank0", 8100, vllm("0", 2), vllm("0", 0)),
        vllm_engine("rank1", 8101, vllm("1", 1, 2), vllm("1", 1), vllm("1", 0)),
    ]
    run = pod(servers, "wait", "--port", "8000", *TIMELINE, "--discover", env=IN_POD)
    assert_drained(run, 4)
    assert [r["in_flight"] for r in reads(run)] == ["5", "1", "0", "0"]
    assert all(r["targets"] == "3" and r["answering"] == "2" for r in reads(run))
    assert requests(run, "rank0", "rank1") == {"rank0": 4, "rank1": 4}


def test_a_hanging_listener_cannot_carry_the_hook_past_d(pod: Pod) -> None:
    """D = 0.7 s, the read timeout 1 s: the search ends at D with the engine found,
    the hanging listener abandoned; the hook returns at D, not at S + 1 s."""
    grace, reserve = 1.2, 0.5
    servers = [
        vllm_engine("engine", 8123, vllm("0", 1)),
        hanging("hanging", 9000),
        Server("silent", "127.0.0.1", 9001, silent=True),
    ]
    args = ("--settle", str(SETTLE), "--grace", str(grace), "--exit-reserve", str(reserve))
    run = pod(servers, "wait", "--port", "8000", *args, "--discover", env=IN_POD)
    d = grace - reserve
    assert run.code == 3, run.stderr
    end = fields(run.summary)
    assert (end["outcome"], end["reads"], end["in_flight"]) == ("deadline", "1", "1")
    assert d - EXIT_ALLOWANCE <= float(end["elapsed"]) < late(d, HOOK_LATE)
    assert run.elapsed < late(d, POD_LATE)  # spawn to exit: the abandoned read does not hold it
    assert requests(run, "engine", "hanging") == {"engine": 1, "hanging": 1}


def test_a_hanging_listener_costs_one_read_timeout_within_d(pod: Pod) -> None:
    servers = [vllm_engine("engine", 8123, vllm("0", 0)), hanging("hanging", 9000)]
    run = pod(
        servers,
        "wait",
        "--port",
        "8000",
        "--read-timeout",
        "0.5",
        *TIMELINE,
        "--discover",
        env=IN_POD,
    )
    end = assert_drained(run, 2)
    # The first read (the search) lasts the read timeout; the second is due at once.
    assert SETTLE + 0.5 <= float(end["elapsed"]) < late(SETTLE + 0.5, POD_LATE)
    assert requests(run, "engine", "hanging") == {"engine": 2, "hanging": 1}


def test_at_most_64_listeners_are_read(pod: Pod) -> None:
    servers = [sidecar(f"s{p}", p) for p in range(20001, 20001 + MAX_READS + 2)]
    run = pod(servers, "wait", "--port", "8000", *TIMELINE, "--discover", env=IN_POD, timeout=120)
    assert run.code == 4, run.stderr
    reason = fields(run.summary)["reason"]
    assert f"tried {MAX_READS} listeners: " in reason
    assert reason.endswith("; 2 more not read (at most 64 are)")
    assert sum(len(log.requests) for log in run.servers.values()) == MAX_READS
    assert requests(run, "s20065", "s20066") == {"s20065": 0, "s20066": 0}  # the highest ports


def test_a_moved_sglang_is_found_and_its_live_count_drains_it(pod: Pod) -> None:
    """The rehearsal's two losses at once: the engine on another port, its /metrics
    stale (6 still shown) and /v1/loads live (0). Drained at S + I/4 (the connections
    read the zero too: the quick confirmation, CONTRACT §1); the sidecar
    read once, never asked for /v1/loads."""
    loads = json.dumps({"loads": [{"dp_rank": 0, "num_running_reqs": 0, "num_waiting_reqs": 0}]})
    sglang = Server(
        "sglang",
        "0.0.0.0",
        30001,
        {
            "/metrics": [Reply(sample="sglang-all-schedulers-tp4.txt")],
            "/v1/loads": [Reply(body=loads)],
        },
    )
    run = pod(
        [sglang, *sidecars()], "wait", "--engine", "sglang", *TIMELINE, "--discover", env=IN_POD
    )
    end = assert_drained(run, 2)
    quick = SETTLE + INTERVAL / 4
    assert quick <= float(end["elapsed"]) < late(quick, POD_LATE)
    assert run.servers["sglang"].paths == ["/metrics", "/v1/loads"] * 2
    assert {r["source"] for r in reads(run)} == {"loads"}
    assert run.servers["mesh-admin"].paths == ["/metrics"]
    (said,) = discovery_lines(run)
    assert said["configured"] == "http://127.0.0.1:30000/metrics"


def test_a_remote_target_that_refuses_is_not_searched_for_in_the_pod(pod: Pod) -> None:
    """--allow-remote to another Pod's address (192.0.2.10 on this namespace's lo):
    its refusal is that engine gone; this Pod's listeners do not stand in for it."""
    local = vllm_engine("local", 8000, vllm("0", 1), host="127.0.0.1")
    args = ("--url", "http://192.0.2.10:8000/metrics", "--allow-remote", *TIMELINE)
    run = pod([local], "wait", *args, "--discover", env=IN_POD, addresses=["192.0.2.10"])
    assert run.code == 4, run.stderr
    assert "connection refused" in fields(run.summary)["reason"]
    assert run.servers["local"].requests == ()
    assert discovery_lines(run) == []


def test_json_log_has_one_discovery_event(pod: Pod) -> None:
    moved = vllm_engine("engine", 8123, vllm("0", 0))
    run = pod([moved], "wait", "--log-format", "json", *TIMELINE, "--discover", env=IN_POD)
    assert run.code == 0, run.stderr
    events = [json.loads(line) for line in hook_lines(run.lines)]
    (found,) = [e for e in events if e["event"] == "discovery"]
    assert found["configured"] == [CONFIGURED]
    assert found["found"] == ["http://127.0.0.1:8123/metrics"]
    assert found["tried"] == 1 and 0 <= found["found_ms"] <= found["search_ms"] < 1000
    assert [e["event"] for e in events] == ["discovery", "read", "read", "summary"]


# ---- probe -----------------------------------------------------------------------


def probe_json(run: PodRun) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(run.stdout)
    assert obj["schema"] == 1
    return obj


def test_probe_of_a_refused_target_reads_the_engines_found(pod: Pod) -> None:
    servers = [
        vllm_engine("rank0", 8100, vllm("0", 2)),
        vllm_engine("rank1", 8101, vllm("1", 0)),
        *sidecars(),
    ]
    run = pod(servers, "probe", "--json", "--discover", env=IN_POD)
    obj = probe_json(run)
    assert run.code == 1, run.stderr  # busy: what wait's first read would count
    assert (obj["target"], obj["verdict"], obj["in_flight"], obj["source"]) == (
        CONFIGURED,
        "busy",
        2,
        "metrics",
    )
    assert obj["discovered"] == [
        {
            "target": f"http://127.0.0.1:{port}/metrics",
            "engine": "vllm",
            "verdict": verdict,
            "reason": None,
            "in_flight": total,
            "source": "metrics",
            "read_ms": obj["discovered"][i]["read_ms"],
            # each signal apart (CONTRACT §2a): no /load on the scripted
            # listeners, no connection but the search's own
            "signals": {
                "scheduler": total,
                "server": None,
                "connections": 0,
                "missing": {"server": "/load answered HTTP 404 (a vLLM without the /load route)"},
            },
        }
        for i, (port, verdict, total) in enumerate([(8100, "busy", 2), (8101, "idle", 0)])
    ]
    assert [t["verdict"] for t in obj["targets"]] == ["unreachable", "busy", "idle"]
    assert requests(run, "rank0", "rank1", "mesh-admin") == {
        "rank0": 1,
        "rank1": 1,
        "mesh-admin": 1,
    }
    text = pod(servers, "probe", "--discover", env=IN_POD)
    assert text.code == 1
    listed = text.stdout.split("discovered 2\n", 1)[1].splitlines()[:2]
    assert listed[0].split()[:4] == ["http://127.0.0.1:8100/metrics", "vllm", "busy", "in_flight=2"]
    assert listed[1].split()[:4] == ["http://127.0.0.1:8101/metrics", "vllm", "idle", "in_flight=0"]


def test_probe_of_a_refused_target_that_finds_nothing_is_unreachable(pod: Pod) -> None:
    run = pod(sidecars(), "probe", "--json", "--discover", env=IN_POD)
    obj = probe_json(run)
    assert run.code == 4
    assert obj["verdict"] == "unreachable" and obj["discovered"] == []
    assert "http://127.0.0.1:15000/metrics (HTTP 404)" in obj["reason"]
    outside = probe_json(pod(sidecars(), "probe", "--json"))
    assert "discovered" not in outside  # no search outside a Pod
    assert outside["reason"] == "cannot connect: connection refused"


def test_probe_discover_lists_the_engines_even_when_the_target_answers(pod: Pod) -> None:
    """`probe --discover`: "where are my engine's metrics?" The verdict stays the
    target's own; the other engine listeners are listed, not counted."""
    servers = [
        vllm_engine("mine", 8000, vllm("0", 0)),
        vllm_engine("other", 8123, vllm("1", 4)),
        *sidecars(),
    ]
    run = pod(servers, "probe", "--json", "--discover")
    obj = probe_json(run)
    assert run.code == 0
    assert (obj["verdict"], obj["in_flight"], obj["target"]) == ("idle", 0, CONFIGURED)
    assert [(d["target"], d["in_flight"]) for d in obj["discovered"]] == [
        ("http://127.0.0.1:8123/metrics", 4)
    ]
    assert "targets" not in obj
    assert requests(run, "mine", "other", "mesh-stats") == {"mine": 1, "other": 1, "mesh-stats": 1}
    # In a Pod without --discover: an answering target starts no search.
    quiet = pod(servers, "probe", "--json", env=IN_POD)
    assert "discovered" not in probe_json(quiet)
    assert quiet.servers["other"].requests == ()
