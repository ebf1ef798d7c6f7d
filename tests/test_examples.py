"""Every manifest in examples/ is a valid Kubernetes object, and every preStop
command in it is one drainhook's own CLI accepts, with numbers `plan` agrees with.

Objects are checked against the `kubernetes` client's models (generated from the
Kubernetes OpenAPI definitions): an unknown field, a wrong type or a missing
required field fails. A flag typo in a hook fails through the CLI's own parser.
"""

from __future__ import annotations

import json
import re
import typing
from collections.abc import Iterator
from pathlib import Path

import click
import kubernetes.client.models as k8s
import pytest
import yaml

from drainhook.hook.config import DEFAULT_GRACE
from drainhook.planning import plan as planning
from tests.conftest import POD_LATE, late
from tests.support.loopback import Loopback, sample, serve
from tests.support.manifests import (
    EXAMPLES,
    MANIFESTS,
    PodSpec,
    SchemaError,
    containers,
    load_manifest,
    load_model,
    parse_hook,
)
from tests.support.podns import Pod, Reply, Server
from tests.support.process import Hook

pytestmark = pytest.mark.usefixtures("no_drainhook_env")

# Bodies from tests/samples (expected.json): vLLM busy with 7 in flight, vLLM idle.
BUSY_SAMPLE = "vllm-api-server-count-3.txt"
IDLE_SAMPLE = "vllm-external-lb-rank3-idle.txt"
# Kubernetes sets this in every container (listener discovery once read it).
IN_POD = {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}


def engine_role(container: k8s.V1Container) -> str:
    words = [*(container.command or []), *(container.args or [])]
    text = " ".join(words)
    m = re.search(r"--disaggregation-mode[ =](prefill|decode)", text)
    return m.group(1) if m else "unified"


def wait_plan(params: dict[str, typing.Any], role: str) -> planning.Plan:
    config = planning.wait_config(
        grace=params["grace"],
        settle=params["settle"],
        exit_reserve=params["exit_reserve"],
        interval=params["interval"],
        read_timeout=params["read_timeout"],
        confirm=params["confirm"],
        linger=params["linger"],
        max_wait=params["max_wait"],
        engine=params["engine"],
    )
    return planning.make_plan(config, role)


def test_the_examples_are_there() -> None:
    names = {p.name for p in MANIFESTS}
    assert {
        "vllm-deployment.yaml",
        "sglang-deployment.yaml",
        "sglang-pd.yaml",
        "lws-vllm.yaml",
        "install-init-container.yaml",
        "downward-api-annotations.yaml",
        "decode-routing-proxy.yaml",
    } <= names


@pytest.mark.parametrize("path", MANIFESTS, ids=[p.name for p in MANIFESTS])
def test_manifest_is_a_valid_object_with_a_drainhook_prestop(path: Path) -> None:
    pods = load_manifest(path)
    hooks = 0
    for pod in pods:
        volumes = {v.name for v in pod.spec.volumes or []}
        for c in containers(pod):
            for mount in c.volume_mounts or []:
                assert mount.name in volumes, f"{pod.where}: {c.name} mounts no volume {mount.name}"
            prestop = c.lifecycle.pre_stop if c.lifecycle else None
            if prestop is None:
                continue
            assert prestop._exec is not None, f"{pod.where}: {c.name}: preStop is not exec"
            binary = prestop._exec.command[0]
            assert binary.startswith("/"), f"{pod.where}: exec hooks need an absolute path"
            name, _, _ = parse_hook(prestop._exec.command)
            assert name == "wait", f"{pod.where}: {c.name}: preStop runs {name}"
            hooks += 1
    assert hooks, f"{path.name} has no drainhook preStop"


def _hooks() -> Iterator[tuple[str, PodSpec, k8s.V1Container]]:
    for path in MANIFESTS:
        for pod in load_manifest(path):
            for c in pod.spec.containers:
                if c.lifecycle and c.lifecycle.pre_stop and c.lifecycle.pre_stop._exec:
                    yield f"{pod.where}/{c.name}", pod, c


HOOKS = list(_hooks())


@pytest.mark.parametrize(("where", "pod", "container"), HOOKS, ids=[h[0] for h in HOOKS])
def test_hook_numbers_match_the_pod(where: str, pod: PodSpec, container: k8s.V1Container) -> None:
    """--grace equals terminationGracePeriodSeconds, and `plan` finds nothing left to fix."""
    _, params, _ = parse_hook(container.lifecycle.pre_stop._exec.command)
    grace = pod.spec.termination_grace_period_seconds
    assert params["grace"] == (DEFAULT_GRACE if grace is None else grace), where
    role = engine_role(container)
    result = wait_plan(params, role)
    codes = {w.code for w in result.warnings}
    if "vllm-shutdown-timeout" in codes:
        # the advice is followed: vllm serve --shutdown-timeout N with N <= R - 1
        words = " ".join([*(container.command or []), *(container.args or [])]).split()
        assert "--shutdown-timeout" in words, f"{where}: vLLM without --shutdown-timeout"
        n = float(words[words.index("--shutdown-timeout") + 1])
        assert 1 <= n <= params["exit_reserve"] - 1, f"{where}: --shutdown-timeout {n}"
        codes.discard("vllm-shutdown-timeout")
    assert not codes, f"{where}: plan warns {sorted(codes)}"
    if role != "unified":
        assert params["engine"] == "sglang" and params["exit_reserve"] >= 20 and grace == 45


def test_sglang_examples_turn_metrics_on() -> None:
    for where, _pod, c in HOOKS:
        _, params, _ = parse_hook(c.lifecycle.pre_stop._exec.command)
        if params["engine"] == "sglang":
            assert "--enable-metrics" in [*(c.command or []), *(c.args or [])], where


def _lws() -> tuple[k8s.V1PodSpec, k8s.V1Container, k8s.V1PodSpec, k8s.V1Container]:
    pods = load_manifest(EXAMPLES / "lws-vllm.yaml")
    (leader_pod,) = [p.spec for p in pods if p.where.endswith("leaderTemplate")]
    (worker_pod,) = [p.spec for p in pods if p.where.endswith("workerTemplate")]
    return leader_pod, leader_pod.containers[0], worker_pod, worker_pod.containers[0]


def container_env(c: k8s.V1Container, given: dict[str, str]) -> dict[str, str]:
    """The container's env as the kubelet expands it: `$(NAME)` is an earlier
    entry's value, or one of `given` (what the platform put first)."""
    env = dict(given)
    for var in c.env or []:
        env[var.name] = re.sub(
            r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env[m.group(1)], var.value
        )
    return env


def hook_params(
    c: k8s.V1Container, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> dict[str, typing.Any]:
    """The hook's parameters as its CLI reads them in that environment."""
    for name, value in env.items():
        if name.startswith("DRAINHOOK_"):
            monkeypatch.setenv(name, value)
    _, params, _ = parse_hook(c.lifecycle.pre_stop._exec.command)
    return params


def target_ports(params: dict[str, typing.Any]) -> tuple[int, ...]:
    """The ports a hook reads (--port repeats; none given: vLLM's 8000)."""
    return tuple(params["port"]) or (8000,)


def test_lws_workers_wait_on_the_leader_they_hold_part_of_the_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The model is split over the nodes: each worker's hook reads the leader's
    /metrics (LWS_LEADER_ADDRESS) and its deadline falls after the leader's kill."""
    leader_pod, leader, _, worker = _lws()
    serve_words = " ".join(leader.command or []).split()
    assert int(serve_words[serve_words.index("--pipeline-parallel-size") + 1]) > 1
    lparams = hook_params(leader, {}, monkeypatch)
    address = "vllm-0.vllm.default"  # what LWS puts in LWS_LEADER_ADDRESS
    wparams = hook_params(
        worker, container_env(worker, {"LWS_LEADER_ADDRESS": address}), monkeypatch
    )
    assert wparams["host"] == address and wparams["allow_remote"] is True
    (leader_port,) = [p.container_port for p in leader.ports]
    assert target_ports(wparams) == (leader_port,) == target_ports(lparams)
    assert wparams["exit_zero"] is True and lparams["exit_zero"] is False
    worker_deadline = wparams["grace"] - wparams["exit_reserve"]
    assert worker_deadline >= leader_pod.termination_grace_period_seconds
    assert not worker.ports  # nothing of its own to read


def test_lws_worker_hook_end_to_end(pod: Pod) -> None:
    """The worker's hook as the manifest writes it, the leader on loopback in a new
    network namespace (127.0.0.2 stands in for LWS_LEADER_ADDRESS), inside a Pod:
    it holds while the leader is busy, returns on its
    second idle read, and returns at once when the leader's engine has gone,
    never reading the worker's own listener (a Ray agent's metrics port here)."""
    _, leader, _, worker = _lws()
    # 127.0.0.2: a worker reading its own 127.0.0.1 instead would be refused.
    env = {**IN_POD, **container_env(worker, {"LWS_LEADER_ADDRESS": "127.0.0.2"})}
    args = [*worker.lifecycle.pre_stop._exec.command[1:], "--settle", "0.1", "--interval", "0.1"]
    busy, idle = Reply(sample=BUSY_SAMPLE), Reply(sample=IDLE_SAMPLE)
    port = leader.ports[0].container_port
    own = Server("ray-metrics", "0.0.0.0", 8080, other=Reply(body="ray_node_cpu_count 8\n"))
    drains = Server("leader", "127.0.0.2", port, {"/metrics": [busy, busy, idle]})
    run = pod([drains, own], *args, env=env)
    assert run.code == 0, run.stderr
    assert "outcome=drained" in run.summary and "reads=4" in run.summary
    assert run.servers["leader"].paths == ["/metrics"] * 4
    gone = Server("leader", "127.0.0.2", port, {"/metrics": [busy]}, stop_after=0.6)
    run = pod([gone, own], *args, env=env)
    assert run.code == 0, run.stderr  # --exit-zero: the expected end is not a failed hook
    assert "outcome=unreachable" in run.summary
    # At the leader's exit (0.6 s) and one interval, not at the worker's D (65 s).
    assert run.elapsed < late(0.6 + 0.1, POD_LATE)
    # The leader answered before it went; no process of the hook's container holds a
    # listener (the Ray agent here is another container's): the engine is gone (§2).
    assert "held by no process of this container" in run.summary
    assert run.servers["ray-metrics"].requests == ()


def _proxy() -> tuple[PodSpec, k8s.V1Container, k8s.V1Container]:
    (spec,) = load_manifest(EXAMPLES / "decode-routing-proxy.yaml")
    (proxy,) = [c for c in spec.spec.containers if c.name == "routing-proxy"]
    (decoder,) = [c for c in spec.spec.containers if c.name == "vllm-decode"]
    return spec, proxy, decoder


def test_routing_proxy_waits_on_the_decoder_past_its_drain(monkeypatch: pytest.MonkeyPatch) -> None:
    spec, proxy, decoder = _proxy()
    pparams = hook_params(proxy, {}, monkeypatch)
    dparams = hook_params(decoder, {}, monkeypatch)
    (decoder_port,) = [p.container_port for p in decoder.ports]
    (proxy_port,) = [p.container_port for p in proxy.ports]
    words = decoder.args or []
    assert (
        (int(words[words.index("--port") + 1]),)
        == (decoder_port,)
        == target_ports(pparams)
        == target_ports(dparams)
    )
    assert pparams["host"] == "127.0.0.1" and pparams["allow_remote"] is False
    assert proxy_port != decoder_port
    assert pparams["exit_zero"] is True
    # The decoder returns by its D, before the proxy's D: the proxy relays the
    # decoder's streams to their end. No --shutdown-timeout (S is 5 s: none advised).
    assert "--shutdown-timeout" not in words
    decoder_done = dparams["grace"] - dparams["exit_reserve"]
    assert decoder_done < pparams["grace"] - pparams["exit_reserve"] <= pparams["grace"]
    # No native sidecar here (that form needs no hook), and no shell in the proxy.
    assert all(c.restart_policy != "Always" for c in spec.spec.init_containers)
    assert proxy.command is None
    assert_installed_by_init_container(spec, proxy)
    assert_installed_by_init_container(spec, decoder)


def test_routing_proxy_hook_end_to_end(pod: Pod) -> None:
    """The proxy's hook as the manifest writes it, in a new network namespace with
    the decoder on its port and the proxy's own listener beside it, inside a Pod:
    it reads the decoder only, drains with it, and returns at once when the
    decoder has exited, never reading the proxy's own listener."""
    _, proxy, decoder = _proxy()
    args = [*proxy.lifecycle.pre_stop._exec.command[1:], "--settle", "0.1", "--interval", "0.1"]
    busy, idle = Reply(sample=BUSY_SAMPLE), Reply(sample=IDLE_SAMPLE)
    dport, pport = decoder.ports[0].container_port, proxy.ports[0].container_port
    mine = Server("proxy", "0.0.0.0", pport)  # 404 for any path
    decoding = Server("decoder", "0.0.0.0", dport, {"/metrics": [busy, idle]})
    run = pod([decoding, mine], *args, env=IN_POD)
    assert run.code == 0, run.stderr
    assert "outcome=drained" in run.summary and "reads=3" in run.summary
    assert run.servers["decoder"].paths == ["/metrics"] * 3
    assert run.servers["proxy"].requests == ()
    gone = Server("decoder", "0.0.0.0", dport, {"/metrics": [busy]}, stop_after=0.6)
    run = pod([gone, mine], *args, env=IN_POD)
    assert run.code == 0, run.stderr
    assert "outcome=unreachable" in run.summary
    # At the decoder's exit (0.6 s) and one interval, not at the proxy's D (58 s).
    assert run.elapsed < late(0.6 + 0.1, POD_LATE)
    assert run.servers["proxy"].requests == ()


def test_routing_proxy_hook_on_a_decoder_moved_to_another_port(pod: Pod) -> None:
    """The decoder's --port changed and the proxy's hook was not told: the hook
    touches nothing it was not told to (CONTRACT §2a). Every listener is another
    container's (the decoder's, the proxy's own server is the harness here): no
    process of the hook's container holds one, so it ends `unreachable` after the
    settle (exit 0: --exit-zero) and names the ports that listen."""
    _, proxy, decoder = _proxy()
    args = [*proxy.lifecycle.pre_stop._exec.command[1:], "--settle", "0.1", "--interval", "0.1"]
    busy, idle = Reply(sample=BUSY_SAMPLE), Reply(sample=IDLE_SAMPLE)
    pport = proxy.ports[0].container_port
    assert decoder.ports[0].container_port != 8765
    moved = Server("decoder", "0.0.0.0", 8765, {"/metrics": [busy, idle]})
    run = pod([moved, Server("proxy", "0.0.0.0", pport)], *args, env=IN_POD)
    assert run.code == 0, run.stderr
    assert "outcome=unreachable" in run.summary
    ports = ",".join(str(p) for p in sorted((pport, 8765)))
    assert f"TCP ports {ports} listen here, held by no process" in run.summary
    assert run.servers["decoder"].requests == () and run.servers["proxy"].requests == ()


def assert_installed_by_init_container(pod: PodSpec, c: k8s.V1Container) -> None:
    """c's hook is the binary an initContainer's `drainhook install DIR` put in an
    emptyDir that c mounts read-only at the same path."""
    installs = [i for i in pod.spec.init_containers or [] if parse_hook(i.command)[0] == "install"]
    (init,) = installs
    directory = Path(parse_hook(init.command)[1]["directory"])
    hook = Path(c.lifecycle.pre_stop._exec.command[0])
    # the path `install` prints: DIR/drainhook/drainhook
    assert hook == directory / "drainhook" / "drainhook"
    init_mount = {m.name: m.mount_path for m in init.volume_mounts}
    mounts = {m.name: (m.mount_path, m.read_only) for m in c.volume_mounts}
    (volume,) = [v for v in pod.spec.volumes if v.empty_dir is not None]
    assert init_mount[volume.name] == str(directory)
    assert mounts[volume.name] == (str(directory), True)


def test_install_example_fills_the_hook_volume_first() -> None:
    (pod,) = load_manifest(EXAMPLES / "install-init-container.yaml")
    (engine,) = pod.spec.containers
    assert_installed_by_init_container(pod, engine)


# The downward API writes one `key="value"` line per annotation, keys sorted,
# values quoted as Go's %q does (kubelet fieldpath.FormatMap).
def downward_api_file(annotations: dict[str, str]) -> str:
    return "".join(f"{k}={json.dumps(v)}\n" for k, v in sorted(annotations.items()))


def _annotated() -> tuple[PodSpec, k8s.V1Container, list[str]]:
    (pod,) = load_manifest(EXAMPLES / "downward-api-annotations.yaml")
    (c,) = pod.spec.containers
    command = list(c.lifecycle.pre_stop._exec.command)
    return pod, c, command


def test_annotations_example_wires_the_downward_api_file() -> None:
    pod, c, command = _annotated()
    _, params, _ = parse_hook(command)
    (volume,) = [v for v in pod.spec.volumes if v.downward_api is not None]
    (item,) = volume.downward_api.items
    assert item.field_ref.field_path == "metadata.annotations"
    (mount,) = [m for m in c.volume_mounts if m.name == volume.name]
    assert Path(mount.mount_path) / item.path == params["annotations"]
    port = int(pod.annotations["prometheus.io/port"])
    assert port in [p.container_port for p in c.ports]
    assert str(port) in (c.args or [])


def test_annotations_example_end_to_end(hook: Hook, tmp_path: Path) -> None:
    """The hook reads the listener the Pod's annotations name: the example's
    annotations file as the kubelet writes it, with only the port moved to a
    loopback server's."""
    pod, _, command = _annotated()
    with Loopback(serve(sample("vllm-http-plain-idle.txt"))) as srv:
        annotations = dict(pod.annotations)
        annotations["prometheus.io/port"] = str(srv.port)
        file = tmp_path / "annotations"
        file.write_text(downward_api_file(annotations))
        args = [a if a != "/etc/podinfo/annotations" else str(file) for a in command[1:]]
        run = hook(*args, "--settle", "0.1", "--interval", "0.1")
        answered = srv.connections
        probe = hook("probe", "--json", "--annotations", str(file))
        url = f"http://127.0.0.1:{srv.port}/metrics"
    assert run.code == 0, run.stderr
    assert "outcome=drained" in run.summary
    assert "reads=2" in run.summary
    assert answered == 2
    assert probe.code == 0, probe.stderr
    assert json.loads(probe.stdout)["target"] == url


def test_a_flag_typo_fails_the_parse() -> None:
    with pytest.raises(click.UsageError):
        parse_hook(["/usr/local/bin/drainhook", "wait", "--grase", "30"])
    with pytest.raises(click.BadParameter):
        parse_hook(["/usr/local/bin/drainhook", "wait", "--engine", "vlm"])


def test_the_model_check_catches_what_kubectl_would() -> None:
    base = yaml.safe_load((EXAMPLES / "vllm-deployment.yaml").read_text())
    container = base["spec"]["template"]["spec"]["containers"][0]
    container["lifecycle"]["preStop"]["exec"]["comand"] = container["lifecycle"]["preStop"][
        "exec"
    ].pop("command")
    with pytest.raises(SchemaError, match="comand"):
        load_model(base, "V1Deployment")
    base = yaml.safe_load((EXAMPLES / "vllm-deployment.yaml").read_text())
    base["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = "60"
    with pytest.raises(SchemaError, match="terminationGracePeriodSeconds"):
        load_model(base, "V1Deployment")
    base = yaml.safe_load((EXAMPLES / "vllm-deployment.yaml").read_text())
    del base["spec"]["template"]["spec"]["containers"][0]["name"]
    with pytest.raises(SchemaError, match="name"):
        load_model(base, "V1Deployment")
