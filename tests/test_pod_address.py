"""An engine bound to the Pod's own address, and a host Kubernetes left as written
(issue 60; CONTRACT §4, §6): in a network namespace of the test's own, an address
on its `lo` from a documentation range stands for the Pod's IP. The hook reads an
address its own namespace holds as it reads loopback (no --allow-remote, the
connection signal on); any other address stays refused. A `--host $(NAME)` that
Kubernetes could not expand (its variable defined after the one naming it, as
Kthena appends ENTRY_ADDRESS) is NAME's value in the hook's environment, and an
unset NAME holds like the sleep, never reads an empty host."""

from __future__ import annotations

import ipaddress
import struct

import pytest

from drainhook.errors import UsageError
from drainhook.reading import addresses
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


# The namespace's routes, then the command ("$@"): set up as a node's would be.
ROUTED = 'ip route add local 192.0.2.20 dev lo table 100 && exec "$@"'
# kube-proxy in IPVS mode: a ClusterIP on kube-ipvs0 (a dummy interface there; a
# veth of the same name here, where the kernel has no dummy driver: the rule is the name).
IPVS = (
    "ip link add kube-ipvs0 type veth peer name ipvs-peer && ip link set kube-ipvs0 up && "
    'ip addr add 198.51.100.10/32 dev kube-ipvs0 && exec "$@"'
)


def test_an_address_only_a_table_no_rule_consults_lists_is_not_the_pods(
    pod_command: Pod, entry: list[str]
) -> None:
    """`local 192.0.2.20` in table 100, which no rule consults: /proc/net/fib_trie lists
    it as `/32 host LOCAL`, and the kernel delivers nothing to it. A usage error now
    (exit 2, the fix named); before, read without --allow-remote (exit 3, unroutable)."""
    argv = ["sh", "-c", ROUTED, "sh", *entry, "probe", "--host", "192.0.2.20"]
    run = pod_command([], argv)
    assert run.code == 2, run.stderr
    assert (
        "neither loopback nor an address of this Pod" in run.stderr
        and "--allow-remote" in run.stderr
    )


def test_a_clusterip_that_kube_proxy_binds_here_is_refused_with_the_fix(
    pod_command: Pod, entry: list[str]
) -> None:
    """An address of this namespace's kube-ipvs0 is a Service's, whose reads land on any
    replica: refused (exit 2) with what it is and the host to use; before, read as the
    Pod's own. --allow-remote still reads it, said plainly."""
    argv = ["sh", "-c", IPVS, "sh", *entry, "probe", "--host", "198.51.100.10", "--port", "9"]
    run = pod_command([], argv)
    assert run.code == 2, run.stderr
    said = run.stderr.splitlines()[-1]
    assert "is a Service's ClusterIP, which kube-proxy (IPVS mode) binds to kube-ipvs0" in said
    assert "point --host at 127.0.0.1" in said
    allowed = pod_command([], [*argv, "--allow-remote"])
    assert allowed.code == 4, allowed.stderr  # read: refused there, nothing listens


def rtm_newaddr(index: int, **attrs: bytes) -> bytes:
    kinds = {"address": addresses.IFA_ADDRESS, "local": addresses.IFA_LOCAL}
    body = struct.pack("=BBBBI", 2, 32, 0, 0, index)
    for name, value in attrs.items():
        attr = struct.pack("=HH", 4 + len(value), kinds[name]) + value
        body += attr + bytes(-len(attr) % 4)
    return struct.pack("=IHHII", 16 + len(body), addresses.RTM_NEWADDR, 2, 1, 0) + body


def test_the_kernels_addresses_are_read_with_their_interface() -> None:
    """RTM_NEWADDR messages: a point-to-point address is its IFA_LOCAL (IFA_ADDRESS is
    the peer's), an IPv6 one its IFA_ADDRESS; a cut message is left, an error raised."""
    ptp = rtm_newaddr(3, address=bytes([192, 0, 2, 99]), local=bytes([192, 0, 2, 10]))
    six = rtm_newaddr(1, address=ipaddress.ip_address("2001:db8::5").packed)
    done = struct.pack("=IHHIIi", 20, 3, 2, 1, 0, 0)
    assert addresses.parse(ptp + six + done) == (
        {ipaddress.ip_address("192.0.2.10"): 3, ipaddress.ip_address("2001:db8::5"): 1},
        True,
    )
    assert addresses.parse(ptp + six[:-3]) == ({ipaddress.ip_address("192.0.2.10"): 3}, False)
    with pytest.raises(OSError):
        addresses.parse(struct.pack("=IHHIIi", 20, 2, 0, 1, 0, -1))
