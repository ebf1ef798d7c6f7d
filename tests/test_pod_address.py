"""An engine bound to the Pod's own address, and a host Kubernetes left as written
(issue 60; CONTRACT §4, §6): in a network namespace of the test's own, an address
on its `lo` from a documentation range stands for the Pod's IP. The hook reads an
address its own namespace holds as it reads loopback (no --allow-remote, the
connection signal on); any other address stays refused. A `--host $(NAME)` that
Kubernetes could not expand (its variable defined after the one naming it, as
Kthena appends ENTRY_ADDRESS) is NAME's value in the hook's environment, and an
unset NAME holds like the sleep, never reads an empty host."""

from __future__ import annotations

import pytest

from drainhook.errors import UsageError
from drainhook.reading.target import check_host
from tests.conftest import POD_LATE, late
from tests.support.logs import fields
from tests.support.podns import Pod, Reply, Server

POD_IP = "192.0.2.10"  # TEST-NET-1, on the namespace's lo
ELSEWHERE = "192.0.2.11"  # the same range, held by nothing here
BUSY = "vllm-api-server-count-3.txt"  # vllm, busy, 7 in flight
IDLE = "vllm-external-lb-rank3-idle.txt"


def engine_on_pod_ip(*samples: str) -> Server:
    return Server("engine", POD_IP, 8000, {"/metrics": [Reply(sample=s) for s in samples]})


def test_an_address_of_the_pod_is_read_as_loopback_is(pod: Pod) -> None:
    """Busy (exit 1) with every signal read, the connection signal included; the
    same range's other address, which nothing here holds, is a usage error."""
    servers = [engine_on_pod_ip(BUSY)]
    run = pod(servers, "probe", "--host", POD_IP, "--json", addresses=[POD_IP])
    assert run.code == 1, run.stderr
    out = run.json()
    assert (out["verdict"], out["in_flight"]) == ("busy", 7)
    assert out["target"] == f"http://{POD_IP}:8000/metrics"
    assert out["signals"]["connections"] == 0  # read: a count, not null
    refused = pod(servers, "probe", "--host", ELSEWHERE, addresses=[POD_IP])
    assert refused.code == 2 and refused.servers["engine"].requests == ()
    assert "neither loopback nor an address of this Pod" in refused.stderr
    assert "--allow-remote" in refused.stderr


def test_wait_reads_the_host_kubernetes_left_as_written(pod: Pod) -> None:
    """DRAINHOOK_HOST=$(POD_IP), POD_IP set: busy, then idle twice, drained (exit 0)."""
    servers = [engine_on_pod_ip(BUSY, IDLE)]
    env = {"DRAINHOOK_HOST": "$(POD_IP)", "POD_IP": POD_IP}
    args = ("wait", "--settle", "0", "--interval", "0.1", "--grace", "30")
    run = pod(servers, *args, env=env, addresses=[POD_IP])
    assert run.code == 0, run.stderr
    summary = fields(run.summary)
    assert summary["outcome"] == "drained" and summary["target"] == f"http://{POD_IP}:8000/metrics"
    assert run.servers["engine"].paths == ["/metrics"] * 3


def test_an_unset_reference_holds_like_the_sleep(pod: Pod) -> None:
    """DRAINHOOK_HOST=$(ENTRY_ADDRESS) with no ENTRY_ADDRESS: a usage error, held to
    D = 2 s (never an empty host read at once), exit 2, nothing read."""
    servers = [engine_on_pod_ip(IDLE)]
    args = ("wait", "--settle", "0", "--grace", "3", "--exit-reserve", "1")
    run = pod(servers, *args, env={"DRAINHOOK_HOST": "$(ENTRY_ADDRESS)"}, addresses=[POD_IP])
    assert run.code == 2, run.stderr
    assert run.elapsed > 1.5  # held (D counts from the hook's own start), not let go
    assert "--host is $(ENTRY_ADDRESS), and ENTRY_ADDRESS is unset or empty" in run.stderr
    assert "holding as a blind sleep until D = 2 s" in run.stderr
    assert run.servers["engine"].requests == ()
    probed = pod(servers, "probe", env={"DRAINHOOK_HOST": "$(ENTRY_ADDRESS)"}, addresses=[POD_IP])
    # probe never holds (a held one would end at D = 25 s)
    assert probed.code == 2 and probed.elapsed < late(1.0, POD_LATE)


@pytest.mark.parametrize(
    ("host", "env", "read"),
    [
        (
            "$(ENTRY_ADDRESS)",
            {"ENTRY_ADDRESS": "m-0-prefill-0-0.default"},
            "m-0-prefill-0-0.default",
        ),
        ("$(POD_IP)", {"POD_IP": "10.0.3.7"}, "10.0.3.7"),
        ("$(POD_IP)x", {"POD_IP": "10.0.3.7"}, None),  # not a whole reference: a bad host
        ("$(POD_IP)", {"POD_IP": ""}, None),
        ("$(POD_IP)", {}, None),
        ("${POD_IP}", {"POD_IP": "10.0.3.7"}, None),  # a shell's form: no shell runs a hook
    ],
)
def test_a_reference_is_its_variable_or_refused(
    host: str, env: dict[str, str], read: str | None
) -> None:
    if read is not None:
        assert check_host(host, env) == read
    else:
        with pytest.raises(UsageError):
            check_host(host, env)
