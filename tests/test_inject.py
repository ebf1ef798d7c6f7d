"""`drainhook inject` (CONTRACT §4) on real-shaped manifests: an llm-d guide's
Deployment with its sleep, KServe's LLMInferenceService, a LeaderWorkerSet, an
SGLang StatefulSet, a Knative Service, a Deployment without an engine, and the
directory of them all (tests/manifests/).

Every output is checked against Kubernetes' own schemas (kubernetes-validate,
strict: an unknown field fails) for 1.33 and 1.35. The CRDs (LeaderWorkerSet,
KServe's kinds, Knative) have no schema there: their pod templates, the only
part inject writes, are checked as core PodTemplates. A written hook is parsed
by drainhook's own CLI, and its numbers are the ones `plan` gives.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import yaml

from drainhook.cli.main import wait
from drainhook.errors import UsageError
from drainhook.inject import argv, manifests
from drainhook.inject import containers as running
from drainhook.inject import run as injecting
from drainhook.inject.options import Options
from drainhook.inject.run import inject_texts
from drainhook.planning import plan as planning
from drainhook.planning import render
from tests.support.injecting import MANIFESTS, containers, prestop, validate
from tests.support.manifests import parse_hook
from tests.support.process import ROOT, base_env

WAIT = tuple(wait.params)  # `wait`'s own options, as the command line hands them in
BINARY = "/usr/local/bin/drainhook"  # --via image: where the tests' engine images hold it
pytestmark = pytest.mark.usefixtures("no_drainhook_env")

PLAIN = ROOT / "examples" / "plain"
LOG = ["--log-file", "/proc/1/fd/1"]
# One stderr line: "drainhook inject: SOURCE#N KIND/NAME: LEVEL: TEXT".
LINE = re.compile(r"^drainhook inject: (\S+)#(\d+)(?:\[\d+\])? (\S+)/(\S+): (\w+): (.+)$")
LEVELS = {"refused", "injected", "replaced", "changed", "warning", "skipped"}
VIA_IMAGE = Options(
    "image-volume", "registry.example/drainhook:0.1.0", wait_params=WAIT, binary_given=True
)
VIA_INIT = Options("init", "registry.example/drainhook:0.1.0", wait_params=WAIT, binary_given=True)


def run(
    *inputs: tuple[str, str], options: Options | None = None
) -> tuple[list[typing.Any], injecting.Injected]:
    """inject over (name, text) inputs: the parsed documents out, and the result;
    every output document validated."""
    result = inject_texts(list(inputs), options or Options(wait_params=WAIT, binary_given=True))
    docs = [d for d in yaml.safe_load_all(result.stdout) if d is not None]
    for doc in docs:
        validate(doc)
    for line in result.lines:
        m = LINE.match(line)
        assert m and m.group(5) in LEVELS, line
    return docs, result


def file(path: Path) -> tuple[str, str]:
    return str(path.relative_to(ROOT)), path.read_text()


def levels(result: injecting.Injected) -> list[str]:
    return [LINE.match(line).group(5) for line in result.lines]  # type: ignore[union-attr]


# -- one per platform: before and after -------------------------------------------


def test_llm_d_guide_deployment_its_sleep_replaced_and_shutdown_timeout_kept() -> None:
    """llm-d's decode Deployment after its graceful-shutdown component: preStop
    /bin/sleep 15, G 75, --shutdown-timeout 45 (vLLM then drains after SIGTERM and
    exits once its engine core has torn itself down). After: the hook at G 75 on the
    engine's port, /load on; --shutdown-timeout 45 kept as the user wrote it and
    named with plan's advice, 0 (with the settle it has nothing left to save:
    docs/design.md §7; before issue 58 it was rewritten); the routing proxy untouched."""
    path = MANIFESTS / "llm-d-decode.yaml"
    before = yaml.safe_load(path.read_text())
    (doc,), result = run(file(path))
    assert result.code == 0
    spec = doc["spec"]["template"]["spec"]
    engine = containers(spec)["vllm"]
    assert spec["terminationGracePeriodSeconds"] == 75
    assert prestop(engine) == [
        "/usr/local/bin/drainhook", "wait", "--grace", "75", "--settle", "15", "--engine",
        "vllm", "--port", "8200", *LOG,
    ]  # fmt: skip
    args = engine["args"]
    assert args[args.index("--shutdown-timeout") + 1] == "45"  # the user's: never rewritten
    assert args.count("--shutdown-timeout") == 1
    # llm-d's image tag is llm-d's version, not vLLM's: a flag to add is named, not written.
    assert "--enable-server-load-tracking" not in args
    assert engine["command"] == ["vllm", "serve"]
    # The native sidecar (the routing proxy) is as it was.
    assert spec["initContainers"] == before["spec"]["template"]["spec"]["initContainers"]
    # --via image with --binary: an image built FROM llm-d's holds it, not said.
    assert levels(result) == ["injected", "replaced", "warning", "warning"]
    assert "preStop sleep 15" in result.lines[1]
    assert (
        "--shutdown-timeout 45 kept as written; plan advises --shutdown-timeout 0"
        in (result.lines[2])
    )
    assert "--enable-server-load-tracking not written" in result.lines[3]
    assert "names no vllm version" in result.lines[3] and "--engine-version" in result.lines[3]
    (told,), _ = run(
        file(path), options=Options(engine_version="0.32", wait_params=WAIT, binary_given=True)
    )
    told_args = containers(told["spec"]["template"]["spec"])["vllm"]["args"]
    assert told_args[-1] == "--enable-server-load-tracking"
    # The hook is one drainhook's own CLI takes, with plan's numbers.
    _, params, _ = parse_hook(prestop(engine))
    assert params["grace"] == 75 and tuple(params["port"]) == (8200,)


def test_kserve_llm_inference_service_decode_and_prefill() -> None:
    """KServe's LLMInferenceService, P/D: the decode `template` with its own args
    gets the hook and the flags; the prefill template that leaves command and args
    to the preset gets the hook, a warning for the flags it cannot write (args
    written there would replace the preset's), and the --linger advice."""
    (pd, multi), result = run(file(MANIFESTS / "kserve-llmisvc.yaml"))
    assert result.code == 0
    decode = pd["spec"]["template"]
    prefill = pd["spec"]["prefill"]["template"]
    hook = ["/usr/local/bin/drainhook", "wait", "--grace", "60", "--engine", "vllm", *LOG]
    assert decode["terminationGracePeriodSeconds"] == prefill["terminationGracePeriodSeconds"] == 60
    assert prestop(containers(decode)["main"]) == hook == prestop(containers(prefill)["main"])
    args = containers(decode)["main"]["args"]
    # llm-d's image: no vLLM version, so /load's flag is named, not written.
    assert "--enable-server-load-tracking" not in args
    assert "--shutdown-timeout" not in args  # not advised with the 5 s settle
    assert "args" not in containers(prefill)["main"]  # the preset's stay the preset's
    lines = [ln for ln in result.lines if "#0 " in ln]
    warned = [ln for ln in lines if ": warning: " in ln and "spec.prefill.template:" in ln]
    assert len(warned) == 2 and all("spec.prefill.template: container main:" in w for w in warned)
    assert "vllm-prefill-linger" in warned[0]
    # The decode template's image is llm-d's: /load's flag named, not written.
    (unversioned,) = [
        ln for ln in lines if ": warning: spec.template: container main: --enable" in ln
    ]
    assert "--enable-server-load-tracking not written" in unversioned
    # Multi-node: the CR had no command, so none is written; the worker waits on the
    # leader (LWS underneath), its deadline after the leader's kill.
    leader, worker = multi["spec"]["template"], multi["spec"]["worker"]
    assert prestop(containers(leader)["main"]) == hook
    assert worker["terminationGracePeriodSeconds"] == 70
    main = containers(worker)["main"]
    assert prestop(main) == [
        "/usr/local/bin/drainhook", "wait", "--grace", "70", "--exit-zero", *LOG,
    ]  # fmt: skip
    assert main["env"] == [
        {"name": "DRAINHOOK_HOST", "value": "$(LWS_LEADER_ADDRESS)"},
        {"name": "DRAINHOOK_ALLOW_REMOTE", "value": "1"},
    ]


def test_kserve_llm_inference_service_without_a_template_gets_one_holding_main() -> None:
    text = (
        "apiVersion: serving.kserve.io/v1alpha1\nkind: LLMInferenceService\n"
        "metadata:\n  name: tiny\nspec:\n  model:\n    uri: hf://Qwen/Qwen3-0.6B\n"
    )
    (doc,), result = run(("tiny.yaml", text), options=VIA_IMAGE)
    assert result.code == 0
    template = doc["spec"]["template"]
    assert [c["name"] for c in template["containers"]] == ["main"]
    assert template["volumes"][0]["image"]["reference"] == VIA_IMAGE.image
    assert prestop(template["containers"][0])[0] == "/opt/drainhook/drainhook"


def test_a_ray_worker_of_its_leaders_vllm_waits_on_the_leader() -> None:
    """Issue 58: a worker whose container runs a Ray worker for its leader's vLLM
    (`ray start --block --address=$(LWS_LEADER_ADDRESS):6379`) is part of that engine,
    and its hook waits on the leader, as before the engine-from-the-command rule
    named it `not an engine` and left it without a hook."""
    text = (MANIFESTS / "lws-vllm.yaml").read_text()
    script = (
        "/vllm-workspace/examples/online_serving/multi-node-serving.sh worker\n"
        "                --ray_address=$(LWS_LEADER_ADDRESS)"
    )
    assert script in text
    text = text.replace(script, "ray start --block --address=$(LWS_LEADER_ADDRESS):6379")
    (doc,), result = run(("lws-ray.yaml", text))
    assert result.code == 0 and not [ln for ln in result.lines if "not an engine" in ln]
    worker = doc["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    w = containers(worker)["vllm-worker"]
    assert prestop(w) == ["/usr/local/bin/drainhook", "wait", "--grace", "70", "--exit-zero", *LOG]
    assert [e["name"] for e in w["env"]] == ["DRAINHOOK_HOST", "DRAINHOOK_ALLOW_REMOTE"]


def test_an_unrendered_chart_template_is_named_with_the_command_that_renders_it(
    tmp_path: Path,
) -> None:
    """Issue 58: a chart's template (`{{- if ... }}` on its first line) is no YAML; it
    was `not YAML at line 1`. Now it is named as what it is, and how to render it."""
    chart = tmp_path / "deployment.yaml"
    chart.write_text("{{- if .Values.enabled }}\n" + _deployment(VLLM) + "{{- end }}\n")
    done = cli(str(chart))
    assert (done.returncode, done.stdout) == (2, "")
    (line,) = done.stderr.splitlines()
    assert "an unrendered chart template ({{- if .Values.enabled }} at line 1)" in line
    assert "helm template" in line


def test_a_vendors_image_running_one_engines_flags_is_named_with_the_wiring() -> None:
    """Issue 58: no command, an image named after no engine (an accelerator vendor's),
    and args that are plainly vLLM's own flags: it passed in silence; now it is named
    with the --container and --engine that wire it, which then do."""
    vendor = (
        "        - name: server\n"
        "          image: vault.habana.ai/gaudi-docker/1.21.0/pytorch-installer-2.6.0:latest\n"
        "          args: [--model, m, --max-model-len, '8192', --gpu-memory-utilization, '0.9']\n"
    )
    text = _deployment(vendor)
    (unchanged,), result = run(("vendor.yaml", text))
    assert (result.code, levels(result)) == (0, ["skipped"]), result.lines
    assert "lifecycle" not in unchanged["spec"]["template"]["spec"]["containers"][0]
    assert "vllm's own flags" in result.lines[0]
    assert "--container server --engine vllm" in result.lines[0]
    options = Options(container="server", engine="vllm", wait_params=WAIT, binary_given=True)
    (wired,), told = run(("vendor.yaml", text), options=options)
    assert told.code == 0 and verdicts(told) == ["injected"], told.lines
    assert prestop(wired["spec"]["template"]["spec"]["containers"][0])[1] == "wait"


WIDE_EP = """\
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata:
  name: wide-ep-decode
spec:
  leaderWorkerTemplate:
    size: 2
    workerTemplate:
      spec:
        containers:
          - name: vllm
            image: vllm/vllm-openai:v0.18.0
            command: [/bin/bash, -c]
            args:
              - |-
                START_RANK=$(( ${LWS_WORKER_INDEX:-0} * DP_SIZE_LOCAL ))
                exec vllm serve deepseek-ai/DeepSeek-R1-0528 --port 8200 \\
                  --data-parallel-hybrid-lb --enable-expert-parallel \\
                  --data-parallel-size $((LWS_GROUP_SIZE * DP_SIZE_LOCAL)) \\
                  --data-parallel-size-local $DP_SIZE_LOCAL \\
                  --data-parallel-start-rank $START_RANK
            env:
              - {name: DP_SIZE_LOCAL, value: "8"}
"""


def test_wide_expert_parallel_over_a_leader_worker_set_is_named_from_its_script() -> None:
    """Issue 58: llm-d's wide-EP decode shape, its data- and expert-parallel flags in the
    container's shell script with counts the script computes: named for what it means
    to the drain, as when the flags sit in `args` (it passed in silence)."""
    (doc,), result = run(("wide-ep.yaml", WIDE_EP))
    assert result.code == 0
    (named,) = [ln for ln in result.lines if "over Pods" in ln]
    assert ": warning: " in named
    assert "a vLLM data- and expert-parallel engine over Pods (its ranks set in a script)" in named
    assert "each Pod's API server serves its own ranks" in named
    spec = doc["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    assert prestop(containers(spec)["vllm"])[1] == "wait"  # wired, and named


def test_leader_worker_set_leader_drains_worker_waits_on_it() -> None:
    (doc,), result = run(file(MANIFESTS / "lws-vllm.yaml"))
    assert result.code == 0
    lwt = doc["spec"]["leaderWorkerTemplate"]
    leader = lwt["leaderTemplate"]["spec"]
    worker = lwt["workerTemplate"]["spec"]
    assert prestop(containers(leader)["vllm-leader"]) == [
        "/usr/local/bin/drainhook", "wait", "--grace", "60", "--engine", "vllm", *LOG,
    ]  # fmt: skip
    # The engine starts in a shell script: inject never edits one; it names the flag.
    original = yaml.safe_load((MANIFESTS / "lws-vllm.yaml").read_text())
    leader_spec = original["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    assert (
        containers(leader)["vllm-leader"]["command"]
        == containers(leader_spec)["vllm-leader"]["command"]
    )
    (named,) = [ln for ln in result.lines if "--enable-server-load-tracking" in ln]
    assert ": warning: " in named and "`--enable-server-load-tracking`" in named
    # The worker: G = the leader's 60 + 5 + its R 5, so its D (65) is after the
    # leader's kill (60).
    assert worker["terminationGracePeriodSeconds"] == 70
    w = containers(worker)["vllm-worker"]
    assert prestop(w) == ["/usr/local/bin/drainhook", "wait", "--grace", "70", "--exit-zero", *LOG]
    assert [e["name"] for e in w["env"]] == ["DRAINHOOK_HOST", "DRAINHOOK_ALLOW_REMOTE"]
    assert (
        w["command"]
        == yaml.safe_load((MANIFESTS / "lws-vllm.yaml").read_text())["spec"][
            "leaderWorkerTemplate"
        ]["workerTemplate"]["spec"]["containers"][0]["command"]
    )


def test_sglang_statefulset_gets_metrics_and_the_grace_plan_advises() -> None:
    """SGLang needs R = 10 s to exit (plan's sglang-exit): G rises from the default 30."""
    (doc,), result = run(file(MANIFESTS / "sglang-statefulset.yaml"))
    assert result.code == 0
    spec = doc["spec"]["template"]["spec"]
    assert spec["terminationGracePeriodSeconds"] == 35
    engine = containers(spec)["sglang"]
    assert engine["command"][-1] == "--enable-metrics"
    assert engine["command"].count("--enable-metrics") == 1
    assert prestop(engine) == [
        "/usr/local/bin/drainhook", "wait", "--grace", "35", "--exit-reserve", "10",
        "--engine", "sglang", *LOG,
    ]  # fmt: skip
    assert levels(result) == ["injected", "changed", "changed", "changed"]


def test_sglang_prefill_grace_rises_as_plan_says() -> None:
    """An SGLang prefill server: plan's sglang-pd-exit rule raises R to 20 and G to
    45; inject writes both, and its hook is plan's own fragment, word for word."""
    (doc, _decode), _ = run(file(PLAIN / "sglang-pd.yaml"))
    assert doc["metadata"]["name"] == "sglang-prefill"
    spec = doc["spec"]["template"]["spec"]
    assert spec["terminationGracePeriodSeconds"] == 45
    fragment = yaml.safe_load(
        render.to_yaml(planning.make_plan(planning.wait_config(engine="sglang"), "prefill"))
    )
    assert fragment["terminationGracePeriodSeconds"] == 45
    want = fragment["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
    assert prestop(containers(spec)["sglang"]) == want  # --log-file too, as plan writes


# -- what passes through, what is refused -------------------------------------------


def test_a_deployment_without_an_engine_passes_through_byte_for_byte() -> None:
    name, text = file(MANIFESTS / "no-engine.yaml")
    docs, result = run((name, text))
    assert result.stdout == text
    assert result.lines == () and result.code == 0
    assert len(docs) == 2


def test_knative_service_is_refused_and_written_unchanged() -> None:
    name, text = file(MANIFESTS / "knative-service.yaml")
    _, result = run((name, text))
    assert result.stdout == text and result.code == 1
    (line,) = result.lines
    m = LINE.match(line)
    assert m is not None
    assert m.groups()[:5] == (
        "tests/manifests/knative-service.yaml",
        "0",
        "Service",
        "vllm",
        "refused",
    )
    assert "Knative" in m.group(6)


def _deployment(container: str, pod: str = "") -> str:
    return (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec:\n"
        "  selector:\n    matchLabels: {app: d}\n  template:\n    metadata:\n"
        f"      labels: {{app: d}}\n    spec:\n{pod}      containers:\n{container}"
    )


VLLM = "        - name: vllm\n          image: vllm/vllm-openai:v0.18.0\n"


@pytest.mark.parametrize(
    ("case", "text", "why"),
    [
        ("hostNetwork", _deployment(VLLM, "      hostNetwork: true\n"), "hostNetwork"),
        (
            "another preStop",
            _deployment(VLLM + "          lifecycle:\n            preStop:\n              "
                        "httpGet: {path: /drain, port: 8000}\n"),
            "preStop runs httpGet",
        ),
        (
            "an exec preStop of its own",
            _deployment(VLLM + "          lifecycle:\n            preStop:\n              "
                        "exec: {command: [/bin/sh, -c, 'curl -X POST localhost:8000/drain']}\n"),
            "preStop runs",
        ),
        (
            "sglang without args: --enable-metrics cannot be written",
            _deployment("        - name: sglang\n          image: lmsysorg/sglang:v0.5.23\n"),
            "--enable-metrics",
        ),
        (
            "a script that does not end in the engine: --enable-metrics cannot be added",
            _deployment("        - name: sglang\n          image: lmsysorg/sglang:v0.5.23\n"
                        "          command: [sh, -c, 'python3 -m sglang.launch_server "
                        "--model-path m & wait']\n"),
            "--enable-metrics",
        ),
        (
            "a hook with a flag wait does not take",
            _deployment(VLLM + "          lifecycle:\n            preStop:\n              exec:\n"
                        "                command: [/bin/drainhook, wait, --grase, '30']\n"),
            "--grase",
        ),
        (
            "an InferenceService in Serverless mode",
            "apiVersion: serving.kserve.io/v1beta1\nkind: InferenceService\nmetadata:\n"
            "  name: i\nspec:\n  predictor:\n    containers:\n"
            "      - name: kserve-container\n        image: vllm/vllm-openai:v0.18.0\n",
            "Knative",
        ),
    ],
)  # fmt: skip
def test_refused_documents_are_written_unchanged_with_one_line(
    case: str, text: str, why: str
) -> None:
    good_name, good = file(PLAIN / "vllm-deployment.yaml")
    docs, result = run(("bad.yaml", text), (good_name, good))
    assert result.code == 1, case
    assert result.stdout.startswith(text), case  # unchanged, byte for byte
    refused = [ln for ln in result.lines if ": refused: " in ln]
    assert len(refused) == 1 and LINE.match(refused[0]).group(1) == "bad.yaml", result.lines  # type: ignore[union-attr]
    assert why in refused[0], refused[0]
    # The other document is still wired.
    assert "lifecycle" in docs[1]["spec"]["template"]["spec"]["containers"][0]


def test_inference_service_in_raw_mode_is_wired() -> None:
    text = (
        "apiVersion: serving.kserve.io/v1beta1\nkind: InferenceService\nmetadata:\n  name: i\n"
        "  annotations:\n    serving.kserve.io/deploymentMode: RawDeployment\nspec:\n"
        "  predictor:\n    containers:\n      - name: kserve-container\n"
        "        image: vllm/vllm-openai:v0.18.0\n        args: [Qwen/Qwen3-0.6B, --port, '8080']\n"
    )
    (doc,), result = run(("isvc.yaml", text))
    assert result.code == 0
    predictor = doc["spec"]["predictor"]
    assert predictor["terminationGracePeriodSeconds"] == 30
    c = predictor["containers"][0]
    assert prestop(c) == [
        "/usr/local/bin/drainhook", "wait", "--grace", "30", "--engine", "vllm",
        "--port", "8080", *LOG,
    ]  # fmt: skip


# -- the hook already there, the sleep, idempotence --------------------------------

EXISTING = VLLM + (
    "          args: [m, --port, '8200', --shutdown-timeout, '2']\n"
    "          lifecycle:\n            postStart:\n              exec: {command: [/bin/true]}\n"
    "            preStop:\n              exec:\n                command: [/opt/x/drainhook, wait,"
    " --grace, '90', --exit-reserve=8, --port, '8200', --exit-zero, --settle, '7']\n"
)


def test_an_existing_hook_is_updated_not_doubled() -> None:
    """Its own flags kept (R 8, the port, --exit-zero, S 7), its --grace brought to
    the template's (unset: 30 written), --engine and --log-file added, its binary
    the one --via says; postStart untouched; its --shutdown-timeout 2 kept as the
    user wrote it, and named with plan's advice, vLLM's default 0 (with S = 7
    nothing slips in after the release: the flag only costs every replica 2 s of
    exit)."""
    (doc,), result = run(("d.yaml", _deployment(EXISTING)))
    assert result.code == 0
    spec = doc["spec"]["template"]["spec"]
    c = spec["containers"][0]
    assert spec["terminationGracePeriodSeconds"] == 30
    assert prestop(c) == [
        "/usr/local/bin/drainhook", "wait", "--grace", "30", "--settle", "7",
        "--exit-reserve", "8", "--engine", "vllm", "--port", "8200", "--exit-zero", *LOG,
    ]  # fmt: skip
    assert c["lifecycle"]["postStart"] == {"exec": {"command": ["/bin/true"]}}
    assert c["args"] == ["m", "--port", "8200", "--shutdown-timeout", "2",
                         "--enable-server-load-tracking"]  # fmt: skip
    assert any("--shutdown-timeout 2 kept as written" in line for line in result.lines)
    _, params, _ = parse_hook(prestop(c))
    assert params["exit_reserve"] == 8 and params["settle"] == 7


@pytest.mark.parametrize(
    "sleep",
    [
        "exec: {command: [/bin/sleep, '15']}",
        "exec: {command: [sleep, '15']}",
        "exec: {command: [/bin/sh, -c, 'sleep 15']}",
        "sleep: {seconds: 15}",
    ],
)
def test_every_form_of_a_sleep_hook_is_replaced(sleep: str) -> None:
    text = _deployment(
        VLLM + f"          lifecycle:\n            preStop:\n              {sleep}\n"
    )
    (doc,), result = run(("d.yaml", text))
    c = doc["spec"]["template"]["spec"]["containers"][0]
    assert c["lifecycle"] == {"preStop": {"exec": {"command": prestop(c)}}}
    # G 30 unset: raised to 15 + 20 + 5, so that the kept settle leaves the default's
    # 20 s to drain (test_a_sleep_longer_than_the_default_settle_is_kept_as_the_settle).
    assert prestop(c)[:6] == ["/usr/local/bin/drainhook", "wait", "--grace", "40",
                              "--settle", "15"]  # fmt: skip
    assert next(ln for ln in result.lines if ": replaced: " in ln).endswith(
        "preStop sleep 15 (a blind wait) by drainhook wait, its 15s kept as the settle "
        "(a router's measured propagation): an idle Pod now goes about 16 s after deletion, "
        "not 6 (lower --settle where routers drop a Pod sooner)"
    )


@pytest.mark.parametrize(
    ("sleep", "grace", "settle", "written"),
    [
        ("30", None, "30", 55),  # production-stack: 30 s, its balancer's, measured
        ("30", "120", "30", 120),  # room enough already
        ("5", None, None, 30),  # no longer than the default settle: not kept
        ("3", None, None, 30),
    ],
)
def test_a_sleep_longer_than_the_default_settle_is_kept_as_the_settle(
    sleep: str, grace: str | None, settle: str | None, written: int
) -> None:
    """CONTRACT §4: a sleep's authors measured their routers' propagation. Kept as
    S, G rises to keep the default's 20 s to drain after it and R after that."""
    pod = f"      terminationGracePeriodSeconds: {grace}\n" if grace else ""
    hook = ("          lifecycle:\n            preStop:\n              exec:\n"
            f"                command: [/bin/sh, -c, 'sleep {sleep}']\n")  # fmt: skip
    (doc,), result = run(("d.yaml", _deployment(VLLM + hook, pod)))
    assert result.code == 0
    spec = doc["spec"]["template"]["spec"]
    words = prestop(spec["containers"][0])
    assert spec["terminationGracePeriodSeconds"] == written
    assert words[2:4] == ["--grace", str(written)]
    assert (words[words.index("--settle") + 1] if "--settle" in words else None) == settle
    _, params, _ = parse_hook(words)
    assert params["grace"] - params["settle"] - params["exit_reserve"] >= 20


def inputs() -> list[Path]:
    return sorted([*MANIFESTS.rglob("*.yaml"), *PLAIN.glob("*.yaml")])


@pytest.mark.parametrize(
    "options",
    [Options(wait_params=WAIT, binary_given=True), VIA_IMAGE, VIA_INIT],
    ids=["image", "volume", "init"],
)
@pytest.mark.parametrize("path", inputs(), ids=[p.name for p in inputs()])
def test_injecting_twice_is_injecting_once(path: Path, options: Options) -> None:
    """The second run changes nothing: the same text, byte for byte (a document it
    leaves alone is written as read), no message but the refusals and the warnings
    (advice it cannot follow stands), and what it leaves, refused or skipped, named as
    it was the first time."""
    docs, once = run(file(path), options=options)
    docs2, twice = run((file(path)[0], once.stdout), options=options)
    assert docs2 == docs
    assert twice.stdout == once.stdout
    assert set(levels(twice)) <= {"refused", "warning", "skipped"}
    for level in (": refused: ", ": skipped: "):
        assert [ln for ln in twice.lines if level in ln] == [ln for ln in once.lines if level in ln]
    assert twice.code == once.code


def test_switching_via_moves_the_binary_and_keeps_one_hook() -> None:
    name, text = file(PLAIN / "vllm-deployment.yaml")
    _, first = run((name, text), options=VIA_INIT)
    (doc,), _ = run((name, first.stdout), options=VIA_IMAGE)
    spec = doc["spec"]["template"]["spec"]
    c = containers(spec)["vllm"]
    assert prestop(c)[0] == "/opt/drainhook/drainhook"
    assert len([m for m in c["volumeMounts"] if m["name"] == "drainhook"]) == 1


# -- how the binary arrives ---------------------------------------------------------


def test_via_image_volume_mounts_the_dockerfiles_build_directory() -> None:
    """The Dockerfile's default image holds the directory build at /drainhook/drainhook/
    (launcher `drainhook` inside): the volume mounts that directory (subPath), read-only,
    and the hook runs the launcher in it."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "cp -a dist/drainhook dist/drainhook-report.json /out/drainhook/" in dockerfile
    assert "COPY --from=build /out/drainhook/ /drainhook/" in dockerfile
    (doc,), _ = run(file(PLAIN / "image-volume.yaml"), options=VIA_IMAGE)
    spec = doc["spec"]["template"]["spec"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == "drainhook"]
    assert volume == {
        "name": "drainhook",
        "image": {"reference": VIA_IMAGE.image, "pullPolicy": "IfNotPresent"},
    }
    c = containers(spec)["vllm"]
    assert c["volumeMounts"] == [
        {"name": "drainhook", "mountPath": "/opt/drainhook", "subPath": "drainhook/drainhook",
         "readOnly": True},
    ]  # fmt: skip
    # dist/drainhook/drainhook (the launcher) is at mountPath/drainhook.
    assert prestop(c)[0] == "/opt/drainhook/" + "drainhook"


def test_via_init_installs_into_an_empty_dir_the_engine_mounts() -> None:
    (doc,), _ = run(file(PLAIN / "install-init-container.yaml"), options=VIA_INIT)
    spec = doc["spec"]["template"]["spec"]
    (init,) = spec["initContainers"]
    assert init["image"] == VIA_INIT.image
    # The default image's launcher runs `install` itself (no /usr/local/bin there).
    assert init["command"] == ["/drainhook/drainhook/drainhook", "install", "/hook"]
    assert spec["volumes"] == [{"name": "hook", "emptyDir": {"sizeLimit": "64Mi"}}]
    c = containers(spec)["vllm"]
    assert {"name": "hook", "mountPath": "/hook", "readOnly": True} in c["volumeMounts"]
    assert prestop(c)[0] == "/hook/drainhook/drainhook"  # what `install /hook` prints


# -- which container ----------------------------------------------------------------

PROXY_AND_ENGINE = (
    "        - name: proxy\n          image: ghcr.io/llm-d/llm-d-routing-sidecar:v0.3.0\n"
    "          args: [--port=8000, --vllm-port=8200]\n"
    "        - name: engine\n          image: registry.example/custom:1\n"
    "          command: [python3, -m, vllm.entrypoints.openai.api_server]\n"
    "          args: [--model, m, --port, '8200']\n"
)


def test_the_engine_is_recognised_and_the_sidecar_left_alone() -> None:
    (doc,), _ = run(("d.yaml", _deployment(PROXY_AND_ENGINE)))
    proxy, engine = doc["spec"]["template"]["spec"]["containers"]
    assert proxy == {
        "name": "proxy", "image": "ghcr.io/llm-d/llm-d-routing-sidecar:v0.3.0",
        "args": ["--port=8000", "--vllm-port=8200"],
    }  # fmt: skip
    assert "--port" in prestop(engine) and prestop(engine)[-3] == "8200"


def test_container_names_the_engine() -> None:
    text = _deployment("        - name: server\n          image: registry.example/llm:2\n"
                       "          args: [--port, '9000']\n")  # fmt: skip
    (doc,), result = run(("d.yaml", text))
    assert result.stdout == text and result.lines == ()  # nothing recognised
    (doc,), result = run(
        ("d.yaml", text),
        options=Options(container="server", engine="sglang", wait_params=WAIT, binary_given=True),
    )
    c = doc["spec"]["template"]["spec"]["containers"][0]
    assert prestop(c)[4:10] == ["--exit-reserve", "10", "--engine", "sglang", "--port", "9000"]
    assert c["args"] == ["--port", "9000", "--enable-metrics"]
    _, result = run(
        ("d.yaml", text), options=Options(container="server", wait_params=WAIT, binary_given=True)
    )
    assert result.code == 1 and "--engine" in result.lines[0]


def test_an_old_vllm_image_gets_no_flag_it_would_refuse() -> None:
    """vLLM before 0.9 has no --enable-server-load-tracking: a vLLM started with it exits
    at once. The --shutdown-timeout a hook whose settle is 2 s gets advised (a slow
    router may send after the release) is named, never written: inject adds only what
    the hook reads through (CONTRACT §4)."""
    hook = (
        "          lifecycle:\n            preStop:\n              exec:\n"
        "                command: [/usr/local/bin/drainhook, wait, --settle, '2']\n"
    )
    text = _deployment(VLLM.replace("v0.18.0", "v0.8.5") + "          args: [m]\n" + hook)
    (doc,), result = run(("d.yaml", text))
    c = doc["spec"]["template"]["spec"]["containers"][0]
    assert c["args"] == ["m"]
    (warning,) = [ln for ln in result.lines if "not written" in ln]
    assert "--enable-server-load-tracking not written" in warning and "0.8" in warning
    (newer,), said = run(("d.yaml", _deployment(VLLM + "          args: [m]\n" + hook)))
    args = newer["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == ["m", "--enable-server-load-tracking"]
    assert any("plan advises --shutdown-timeout 4" in ln for ln in said.lines), said.lines


@pytest.mark.parametrize(
    ("args", "servers"),
    [
        ("[m]", None),  # one API server: no warning
        ("[m, --api-server-count, '2']", 2),
        ("[m, -asc, '3']", 3),
        ("[m, --data-parallel-size, '4']", 4),  # 0.32's default: one per DP rank
        ("[m, '--data-parallel-size=2']", 2),
        ("[m, -dp, '2', --data-parallel-external-lb]", None),  # an outside balancer: 1
        ("[m, -dp, '4', --data-parallel-rank, '1']", None),
        ("[m, -dp, '4', --data-parallel-hybrid-lb, -dpl, '2']", 2),
        ("[m, -dp, '4', --api-server-count, '1']", None),  # given: it wins
    ],
)  # fmt: skip
def test_several_vllm_api_servers_are_read_from_the_engines_flags(
    args: str, servers: int | None
) -> None:
    """vLLM's API-server count, by vLLM 0.32's own defaulting, reaches plan's advice:
    more than one, and stderr says /load sees one of them (the connection signal
    covers them all: the hook runs in the Pod); the hook itself is wired either way."""
    text = _deployment(VLLM + f"          args: {args}\n")
    (doc,), result = run(("d.yaml", text))
    assert result.code == 0, result.lines
    c = doc["spec"]["template"]["spec"]["containers"][0]
    assert c["lifecycle"]["preStop"]["exec"]["command"][1] == "wait"
    found = [ln for ln in result.lines if ": warning: " in ln and "vllm-api-servers" in ln]
    if servers is None:
        assert found == [], result.lines
    else:
        (line,) = found
        assert f"vLLM with {servers} API servers" in line, line


def test_api_servers_come_only_from_a_vllm_engines_flags() -> None:
    given = argv.Argv(["--model", "m", "--api-server-count", "2"])
    assert argv.api_servers("vllm", given) == 2
    assert argv.api_servers("sglang", given) is None
    assert argv.api_servers("vllm", None) is None
    headless = argv.Argv(["--model", "m", "--headless", "-dp", "2"])
    assert argv.api_servers("vllm", headless) is None  # no API server at all


# -- the YAML as written ------------------------------------------------------------


def test_comments_key_order_and_quoting_are_kept() -> None:
    name, text = file(MANIFESTS / "llm-d-decode.yaml")
    _, result = run((name, text))
    out = result.stdout
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            assert line in out.splitlines()
    assert 'command: ["vllm", "serve"]' in out  # a flow sequence stays one
    assert '\'{"kv_connector":"NixlConnector", "kv_role":"kv_both"}\'' in out
    (doc,) = [d.data for d in manifests.parse("out", out)]
    assert list(doc["spec"]["template"]["spec"]) == [
        "initContainers", "serviceAccountName", "terminationGracePeriodSeconds", "volumes",
        "containers",
    ]  # fmt: skip
    assert list(doc["spec"]["template"]["spec"]["containers"][0]) == [
        "name", "image", "command", "args", "env", "ports", "lifecycle", "resources",
        "volumeMounts",
    ]  # fmt: skip


def test_another_indentation_is_kept() -> None:
    """kubectl's style (sequences not indented under their key) stays so."""
    text = (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec:\n  selector:\n"
        "    matchLabels: {app: d}\n  template:\n    metadata:\n      labels: {app: d}\n"
        "    spec:\n      containers:\n      - name: vllm\n"
        "        image: vllm/vllm-openai:v0.18.0\n        args:\n        - m\n"
    )
    _, result = run(("d.yaml", text))
    assert "      containers:\n      - name: vllm\n" in result.stdout
    assert "        args:\n        - m\n        - --enable-server-load-tracking\n" in result.stdout


ODD = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: d
  labels: &l {app: d}   # an anchor no alias uses
spec:
  selector: {matchLabels: {app: d}}
  template:
    metadata: {labels: {app: d}}
    spec:
       containers:
         -   name: vllm
             image: vllm/vllm-openai:v0.18.0
             args: ['m', "--port", "8001"]  # the engine
             volumeMounts: []
"""


def test_an_odd_layout_keeps_every_line_the_wiring_does_not_touch() -> None:
    """Three spaces here, five there, an anchor, flow collections: only the wiring
    is written, at its siblings' indentation; the words of a flow list keep their
    quotes and the added one joins them; an empty `[]` becomes the list it needs."""
    docs, result = run(("d.yaml", ODD), options=VIA_IMAGE)
    out = result.stdout.splitlines(keepends=True)
    kept = [ln for ln in ODD.splitlines(keepends=True) if ln in out]
    assert kept == [
        ln for ln in ODD.splitlines(keepends=True) if "args" not in ln and "[]" not in ln
    ]
    assert "       terminationGracePeriodSeconds: 30\n       containers:\n" in result.stdout
    args = """args: ['m', "--port", "8001", --enable-server-load-tracking]  # the engine\n"""
    assert " " * 13 + args in out
    assert "             volumeMounts:\n               - name: drainhook\n" in result.stdout
    assert "             lifecycle:\n               preStop:\n" in result.stdout
    assert containers(docs[0]["spec"]["template"]["spec"])["vllm"]["args"][-1] == (
        "--enable-server-load-tracking"
    )
    again = inject_texts([("d.yaml", result.stdout)], VIA_IMAGE)
    assert (again.stdout, again.code) == (result.stdout, 0)


def test_the_directory_of_them_all() -> None:
    """A directory: every YAML file under it, sorted, each document once, in order."""
    files = sorted(MANIFESTS.glob("*.yaml"))
    (docs, result) = run(*[file(p) for p in files])
    expected = [d for p in files for d in yaml.safe_load_all(p.read_text()) if d is not None]
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        (d["kind"], d["metadata"]["name"]) for d in expected
    ]
    assert result.code == 1  # the Knative Service
    sources = {LINE.match(ln).group(1) for ln in result.lines}  # type: ignore[union-attr]
    assert sources == {str(p.relative_to(ROOT)) for p in files} - {"tests/manifests/no-engine.yaml"}


# -- the examples are inject's own output ---------------------------------------------


def plain_command(path: Path) -> list[str]:
    """The command a plain manifest's first line names: `drainhook inject ...`."""
    head = path.read_text().splitlines()[0]
    m = re.match(r"^# Made from examples/plain/(\S+) by: drainhook inject (.*)$", head)
    assert m and m.group(1) == path.name, head
    return m.group(2).split()


PLAINS = sorted(PLAIN.glob("*.yaml"))


@pytest.mark.parametrize("path", PLAINS, ids=[p.name for p in PLAINS])
def test_each_example_is_inject_of_its_plain_manifest(path: Path) -> None:
    """examples/X.yaml is what the command on examples/plain/X.yaml's first line
    writes (parsed; the example may say more in comments): they cannot drift."""
    words = plain_command(path)
    assert words[-1] == f"examples/plain/{path.name}"
    flags = dict(zip(words[:-1:2], words[1:-1:2], strict=True))
    options = Options(
        flags.get("--via", "image"), flags.get("--image"), wait_params=WAIT, binary_given=True
    )
    docs, result = run(file(path), options=options)
    assert result.code == 0, result.lines
    example = ROOT / "examples" / path.name
    assert docs == [d for d in yaml.safe_load_all(example.read_text()) if d is not None], (
        f"examples/{path.name} is not inject's output: run `drainhook inject "
        f"{' '.join(words)} > examples/{path.name}`"
    )


def test_the_schema_check_can_fail() -> None:
    doc = yaml.safe_load((ROOT / "examples" / "vllm-deployment.yaml").read_text())
    bad = copy.deepcopy(doc)
    bad["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["preStop"]["exce"] = {}
    with pytest.raises(AssertionError, match="exce"):
        validate(bad)
    lws = yaml.safe_load((ROOT / "examples" / "lws-vllm.yaml").read_text())
    lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"][
        "terminationGracePeriodSeconds"
    ] = "70"
    with pytest.raises(AssertionError, match="70"):
        validate(lws)


# -- the command line ----------------------------------------------------------------


def cli(
    *args: str, stdin: str = "", via: tuple[str, ...] = ("--via", "image", "--binary", BINARY)
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "drainhook", "inject", *via, *args],
        input=stdin,
        env=base_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_cli_exit_codes_and_stderr_lines(tmp_path: Path) -> None:
    ok = cli("tests/manifests/llm-d-decode.yaml")
    assert ok.returncode == 0
    assert [LINE.match(ln).group(5) for ln in ok.stderr.splitlines()] == [  # type: ignore[union-attr]
        "injected", "replaced", "warning", "warning",
    ]  # fmt: skip
    refused = cli("tests/manifests")
    assert refused.returncode == 1
    lines = [ln for ln in refused.stderr.splitlines() if ": refused: " in ln]
    assert [LINE.match(ln).group(1) for ln in lines] == [  # type: ignore[union-attr]
        "tests/manifests/knative-service.yaml", "tests/manifests/named/demo-server.yaml",
    ]  # fmt: skip
    assert (
        refused.stdout.count("\n---\n")
        == sum(len(manifests.parse(p.name, p.read_text())) for p in MANIFESTS.rglob("*.yaml")) - 1
    )
    # stdin: `-` and nothing at all
    text = (MANIFESTS / "sglang-statefulset.yaml").read_text()
    assert (
        cli("-", stdin=text).stdout
        == cli(stdin=text).stdout
        == cli("tests/manifests/sglang-statefulset.yaml").stdout
    )
    # Usage: 2, with one line and nothing on stdout.
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1\n")
    for args in (["--via", "init", "tests/manifests"], [str(tmp_path / "none.yaml")], [str(bad)],
                 ["--via", "image", "--image", "x", "tests/manifests"]):  # fmt: skip
        run_ = cli(*args, via=())
        assert run_.returncode == 2, (args, run_.stderr)
        assert run_.stdout == ""
        assert len(run_.stderr.splitlines()) == 1 and run_.stderr.startswith("drainhook"), args


def test_every_document_comes_back_in_order_markers_and_comments_too() -> None:
    """A stream's `---` lines (with comments), a comments-only document, an empty
    one and `...` come back as they were; only the changed document is rewritten."""
    engine = _deployment(VLLM + "          args: [m]\n")
    text = (
        "# only a comment\n"
        "--- # the first object\n"
        "kind: ConfigMap\napiVersion: v1\nmetadata: {name: c}\n"
        "...\n"
        "---\n" + engine + "---\n"
        "---\n# the last\n"
    )
    docs, result = run(("s.yaml", text))
    assert [d["kind"] for d in docs] == ["ConfigMap", "Deployment"]
    out = result.stdout
    assert out.startswith("# only a comment\n--- # the first object\nkind: ConfigMap\n")
    assert "metadata: {name: c}\n...\n---\n" in out
    assert out.endswith("---\n---\n# the last\n")
    assert [LINE.match(ln).group(2) for ln in result.lines] == ["2"] * len(result.lines)  # type: ignore[union-attr]


def test_directives_and_content_on_the_marker_line_belong_to_their_document() -> None:
    """`%YAML 1.2` opens the document after it (the first, or one after `...`); a
    document whose content starts on its `---` line is read whole. Each is wired and
    keeps its directive; a second input opening with a directive is joined after an
    end marker, which YAML asks for."""
    engine = _deployment(VLLM + "          args: [m]\n")
    flow = "--- " + json.dumps(yaml.safe_load(engine)) + "  # JSON\n"
    text = "# a stream\n%YAML 1.2\n---\n" + engine + "...\n%YAML 1.2\n---\n" + engine + flow
    docs, result = run(("s.yaml", text), ("t.yaml", "%YAML 1.1\n---\n" + engine))
    assert [d["kind"] for d in docs] == ["Deployment"] * 4
    assert all(d["spec"]["template"]["spec"]["containers"][0]["lifecycle"] for d in docs)
    out = result.stdout
    assert out.startswith("# a stream\n%YAML 1.2\n---\napiVersion: apps/v1\n")
    assert "\n...\n%YAML 1.2\n---\napiVersion: apps/v1\n" in out
    assert "\n---\napiVersion: apps/v1\n" in out.split("...\n")[1]  # the JSON's, in block style
    assert "/fd/1  # JSON\n...\n%YAML 1.1\n---\napiVersion: apps/v1\n" in out
    assert [ln for ln in result.lines if ": injected: " in ln] and result.code == 0
    assert (
        inject_texts([("o.yaml", out)], Options(wait_params=WAIT, binary_given=True)).stdout == out
    )


def test_a_comment_after_the_replaced_sleep_stays_after_the_new_command() -> None:
    text = (
        _deployment(
            VLLM + "          args: [m]\n          lifecycle:\n            preStop:\n"
            '              exec:\n                command: ["/bin/sleep", "15"]  # blind\n'
        )
        + "# the end\n"
    )
    _, result = run(("d.yaml", text))
    lines = result.stdout.splitlines()
    # A command written on one line stays on one line, its comment after it.
    assert lines[-2].startswith('                command: ["/usr/local/bin/drainhook", "wait"')
    assert lines[-2].endswith('"/proc/1/fd/1"]  # blind')
    assert lines[-1] == "# the end"


def test_several_inputs_are_one_stream() -> None:
    a = file(MANIFESTS / "no-engine.yaml")
    b = file(PLAIN / "vllm-deployment.yaml")
    _, result = run(a, b)
    assert result.stdout.startswith(a[1] + "---\n# Made from examples/plain/vllm-deployment")


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet", "DaemonSet"])
def test_each_apps_kind_is_wired(kind: str) -> None:
    text = _deployment(VLLM + "          args: [m]\n").replace("kind: Deployment", f"kind: {kind}")
    (doc,), result = run(("w.yaml", text))
    assert doc["kind"] == kind and result.code == 0
    c = doc["spec"]["template"]["spec"]["containers"][0]
    assert prestop(c) == [
        "/usr/local/bin/drainhook", "wait", "--grace", "30", "--engine", "vllm", *LOG,
    ]  # fmt: skip
    assert LINE.match(result.lines[0]).group(3, 5) == (kind, "injected")  # type: ignore[union-attr]


# -- kinds: kubectl's List, a bare Pod, an Argo Rollout wired; the rest named -----------

POD_SPEC = (
    "    containers:\n    - name: vllm\n      image: vllm/vllm-openai:v0.18.0\n      args: [m]\n"
)


def test_a_kubectl_list_is_wired_item_by_item() -> None:
    """What `kubectl get deploy,cm -o yaml` prints: a v1 List. Each Deployment
    item is wired as one on its own would be; the other items are as they were."""
    deployment = _deployment(VLLM + "          args: [m]\n")
    item = "\n".join("  " + line if line else line for line in deployment.splitlines())
    text = (
        'apiVersion: v1\nkind: List\nmetadata:\n  resourceVersion: ""\nitems:\n'
        f"- {item.lstrip()}\n"
        "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: c\n  data: {k: v}\n"
    )
    (doc,), result = run(("list.yaml", text))
    assert result.code == 0, result.lines
    alone, _ = run(("d.yaml", deployment))
    assert doc["items"][0] == alone[0]
    assert doc["items"][1] == {"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": "c"}, "data": {"k": "v"}}  # fmt: skip
    # Each item is named as a document of its own: its index in the List, its kind.
    assert result.lines[0].startswith("drainhook inject: list.yaml#0[0] Deployment/")
    assert result.lines[0].endswith(
        ": injected: spec.template.spec: vllm (G 30; an idle Pod goes about 6 s after "
        "deletion; added --enable-server-load-tracking)"
    )


@pytest.mark.parametrize(
    ("head", "path"),
    [
        ("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n", ("spec",)),
        ("apiVersion: argoproj.io/v1alpha1\nkind: Rollout\nmetadata:\n  name: r\nspec:\n"
         "  selector:\n    matchLabels: {app: r}\n  template:\n    metadata:\n"
         "      labels: {app: r}\n    spec:\n", ("spec", "template", "spec")),
    ],
    ids=["pod", "argo-rollout"],
)  # fmt: skip
def test_a_bare_pod_and_an_argo_rollout_are_wired(head: str, path: tuple[str, ...]) -> None:
    indent = " " * (2 * (len(path) - 1))
    text = head + "".join(indent + line + "\n" for line in POD_SPEC.splitlines())
    (doc,), result = run(("w.yaml", text))
    assert result.code == 0 and levels(result)[0] == "injected", result.lines
    spec = doc
    for key in path:
        spec = spec[key]
    engine = containers(spec)["vllm"]
    assert prestop(engine)[:4] == ["/usr/local/bin/drainhook", "wait", "--grace", "30"]
    assert engine["args"] == ["m", "--enable-server-load-tracking"]


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("apiVersion: serving.kserve.io/v1alpha1\nkind: LLMInferenceServiceConfig\n"
         "metadata:\n  name: kserve-config-llm-template\nspec:\n  template:\n"
         "    containers:\n    - name: main\n      image: vllm/vllm-openai:v0.18.0\n"
         "      lifecycle:\n        preStop:\n          exec:\n"
         "            command: [/bin/sh, -c, sleep 15]\n", "spec.template"),
        ("apiVersion: example.com/v1\nkind: InferencePool\nmetadata:\n"
         "  name: s\nspec:\n  server:\n    podSpec:\n"
         "      containers:\n"
         "      - name: vllm\n        image: vllm/vllm-openai:v0.18.0\n",
         "spec.server.podSpec"),
    ],
    ids=["kserve-preset-config", "another-operators-kind"],
)  # fmt: skip
def test_a_kind_inject_does_not_know_is_named_not_passed_in_silence(text: str, where: str) -> None:
    (doc,), result = run(("x.yaml", text))
    assert result.code == 0
    assert result.stdout == text  # unchanged, byte for byte
    (line,) = result.lines
    m = LINE.match(line)
    assert m is not None and m.group(5) == "skipped", line
    assert f"containers at {where} not wired: inject does not know this kind" in line
    assert doc == yaml.safe_load(text)


def test_a_known_kind_without_an_engine_says_nothing() -> None:
    nginx = _deployment("        - name: web\n          image: nginx:1.27\n")
    _, result = run(("d.yaml", nginx))
    assert result.lines == () and result.stdout == nginx


# -- templates: never guessed over (CONTRACT §4) ------------------------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (_deployment(VLLM, "      terminationGracePeriodSeconds: ${GRACE_SECONDS}\n"),
         "spec.template.spec.terminationGracePeriodSeconds: ${GRACE_SECONDS}"),
        (_deployment(VLLM).replace("spec:\n  selector", "spec:\n  replicas: "
                                   "{{.Values.replicaCount}}\n  selector", 1),
         "spec.replicas: a key"),
        (_deployment(VLLM.replace("vllm/vllm-openai:v0.18.0",
                                  '"vllm/vllm-openai:{{ .Values.image.tag }}"')),
         "spec.template.spec.containers[0].image: vllm/vllm-openai:{{ .Values.image.tag }}"),
    ],
    ids=["envsubst-grace", "helm-parsed-as-a-map", "helm-in-a-value"],
)  # fmt: skip
def test_an_unrendered_template_is_refused_never_overwritten(text: str, shown: str) -> None:
    """Before: `${GRACE_SECONDS}` became 30 with exit 0 and no word, and Helm's
    `{{.Values.replicaCount}}` came out as `{{.Values.replicaCount: null}: null}`."""
    result = inject_texts([("t.yaml", text)], Options(wait_params=WAIT, binary_given=True))
    assert result.code == 1 and result.stdout == text  # written unchanged, byte for byte
    (line,) = result.lines
    assert ": refused: unrendered: template expressions (" in line and shown in line, line
    assert "helm template" in line


def test_a_shell_variable_kubernetes_expansion_and_a_chat_template_are_not_templates() -> None:
    """`${PORT}` inside an `sh -c` script is the shell's, `$(MODEL)` Kubernetes' own,
    and a chat template's `{{ messages }}` the engine's: the document is wired."""
    container = (
        VLLM + "          command: [sh, -c, 'exec vllm serve $(MODEL) --port ${PORT:-8000}']\n"
        "          env:\n          - {name: TEMPLATE, value: '{{ messages }}'}\n"
    )
    (doc,), result = run(("d.yaml", _deployment(container)))
    assert result.code == 0 and levels(result)[0] == "injected", result.lines
    engine = containers(doc["spec"]["template"]["spec"])["vllm"]
    assert prestop(engine)[1] == "wait"


def test_without_via_nothing_is_written_and_the_choices_are_named() -> None:
    """Upstream engine images hold no drainhook: a preStop running
    /usr/local/bin/drainhook there fails, and the kubelet sends SIGTERM at once,
    losing even the sleep it replaced (CONTRACT §4). --via is the user's choice."""
    run_ = cli("tests/manifests/llm-d-decode.yaml", via=())
    assert (run_.returncode, run_.stdout) == (2, "")
    (line,) = run_.stderr.splitlines()
    assert line.startswith("drainhook: inject needs --via: image (")
    assert "image-volume --image REF" in line and "init --image REF" in line


@pytest.mark.parametrize("tag", [":latest", ":2025-05-05-v1", "", "@sha256:" + "ab" * 32])
def test_an_image_whose_tag_names_no_version_gets_no_flag_only_a_word(tag: str) -> None:
    """A dated tag, :latest, no tag, a digest: the vLLM inside may be older than a
    flag, and a flag it rejects crash-loops the Pod (CONTRACT §4). The hook is
    written; each flag is named for the user to add; --engine-version decides."""
    hook = (
        "          lifecycle:\n            preStop:\n              exec:\n"
        "                command: [/usr/local/bin/drainhook, wait, --settle, '2']\n"
    )
    container = VLLM.replace("vllm/vllm-openai:v0.18.0", f"vllm/vllm-openai{tag}")
    text = _deployment(container + "          args: [m]\n" + hook)
    (doc,), result = run(("d.yaml", text))
    c = doc["spec"]["template"]["spec"]["containers"][0]
    assert prestop(c)[1] == "wait" and c["args"] == ["m"]
    named = [ln for ln in result.lines if "not written" in ln]
    assert len(named) == 1, result.lines
    assert "--enable-server-load-tracking not written" in named[0]
    # The settle of 2 s advises --shutdown-timeout: named, never written, whatever the tag.
    assert any("plan advises --shutdown-timeout 4" in ln for ln in result.lines)
    # Told: 0.8 does not take /load's flag (0.9); 0.17 does.
    for version, args in (("0.8", ["m"]), ("0.17", ["m", "--enable-server-load-tracking"])):
        options = Options(engine_version=version, wait_params=WAIT, binary_given=True)
        (told,), _ = run(("d.yaml", text), options=options)
        assert told["spec"]["template"]["spec"]["containers"][0]["args"] == args


def test_a_bad_engine_version_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"--engine-version must be X\.Y"):
        inject_texts(
            [("d.yaml", "")], Options(engine_version="new", wait_params=WAIT, binary_given=True)
        )


@pytest.mark.parametrize(
    "extra",
    [
        "          args: [m, --ssl-certfile, /certs/tls.crt, --ssl-keyfile, /certs/tls.key]\n",
        "          args: [m, '--ssl-certfile=/certs/tls.crt']\n",
        "          args: [m]\n          readinessProbe:\n            httpGet:\n"
        "              path: /health\n              port: 8000\n              scheme: HTTPS\n",
    ],
    ids=["vllm-ssl-flag", "flag-with-equals", "kserve-https-probe"],
)
def test_an_https_engine_is_read_over_https(extra: str) -> None:
    """Read as its clients read it (CONTRACT §4): over http the hook's every read of
    a TLS listener fails, and it holds each Pod to D (about 55 s on KServe)."""
    (doc,), result = run(("d.yaml", _deployment(VLLM + extra)))
    assert result.code == 0, result.lines
    words = prestop(doc["spec"]["template"]["spec"]["containers"][0])
    assert words[words.index("--scheme") + 1] == "https"
    _, params, _ = parse_hook(words)
    assert params["scheme"] == "https"
    plain, _ = run(("d.yaml", _deployment(VLLM + "          args: [m]\n")))
    assert "--scheme" not in prestop(plain[0]["spec"]["template"]["spec"]["containers"][0])


@pytest.mark.parametrize(
    "command",
    [
        '[/bin/sh, -c, "vllm serve m \\\\\\n  --port 8000 \\\\\\n  --max-model-len 4096\\n"]',
        "[bash, -lc, 'exec vllm serve m --port 8000']",
        '[/bin/bash, -ec, "set -x\\nexec vllm serve m \\\\\\n  --port 8000"]',
        "[sh, -exc, 'vllm serve m --port 8000']",
    ],
    ids=["continued-lines", "bash-lc", "bash-ec-continued", "sh-exc"],
)
def test_a_shell_script_is_never_edited_the_flag_is_named(command: str) -> None:
    """Before: vLLM got no flags and a false "it has no command or args here"
    (issue 35, item 3); then the flags were appended to the script, which a
    reviewer trusts least (issue 44). Now the hook is written, the script is left
    as it is, and the exact flag to add is named."""
    text = _deployment(VLLM + f"          command: {command}\n")
    (doc,), result = run(("d.yaml", text))
    assert result.code == 0, result.lines
    c = doc["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] == yaml.safe_load(f"c: {command}")["c"]
    assert prestop(c)[:2] == ["/usr/local/bin/drainhook", "wait"]
    (named,) = [ln for ln in result.lines if "--enable-server-load-tracking" in ln]
    assert ": warning: " in named and "shell script" in named
    assert "write `--enable-server-load-tracking` on the engine's command" in named
    assert not [ln for ln in result.lines if "no command or args" in ln]


def test_an_sglang_script_without_metrics_is_refused_with_the_flag() -> None:
    """SGLang serves no /metrics without --enable-metrics: a hook that cannot read
    it is not written; the script is never edited; the line names the flag."""
    sglang = (
        "        - name: sglang\n          image: lmsysorg/sglang:v0.5.3\n"
        '          command: [bash, -c, "python3 -m sglang.launch_server \\\\\\n'
        '  --model-path m \\\\\\n  --port 30000"]\n'
    )
    text = _deployment(sglang)
    result = said(("d.yaml", text))
    assert (result.code, levels(result), result.stdout) == (1, ["refused"], text)
    assert "write `--enable-metrics` on the engine's command there" in result.lines[0]
    with_it = text.replace("--port 30000", "--port 30000 --enable-metrics")
    (doc,), done = run(("d.yaml", with_it))
    assert done.code == 0, done.lines
    c = doc["spec"]["template"]["spec"]["containers"][0]
    assert c["command"][2].endswith("--port 30000 --enable-metrics")


# -- restricted Pods, and a change of --via ------------------------------------------


def test_the_installer_passes_pod_security_restricted() -> None:
    """`--via init`'s initContainer runs as a non-root user with nothing to escalate
    (issue 35, item 10): a namespace enforcing Pod Security `restricted`, or a pod
    with runAsNonRoot, admits it. Each field restricted checks, as it checks it."""
    pod = "      securityContext: {runAsNonRoot: true}\n"
    (doc,), result = run(("d.yaml", _deployment(VLLM + "          args: [m]\n", pod)),
                         options=VIA_INIT)  # fmt: skip
    assert result.code == 0
    (init,) = doc["spec"]["template"]["spec"]["initContainers"]
    sc = init["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] != 0
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"]["type"] in ("RuntimeDefault", "Localhost")


def test_switching_via_leaves_nothing_of_the_old_way_behind() -> None:
    """init, then image-volume, then image: each run takes away what the last one
    put in (the installer, its emptyDir and mount; the image volume and its mount),
    and a user's own volume of another name stays."""
    user = "      volumes:\n      - name: models\n        emptyDir: {}\n"
    text = _deployment(VLLM + "          args: [m]\n", user)
    (first,), _ = run(("d.yaml", text), options=VIA_INIT)
    spec = first["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["initContainers"]] == ["install-drainhook"]
    assert sorted(v["name"] for v in spec["volumes"]) == ["hook", "models"]
    again = yaml.safe_dump(first, sort_keys=False)
    (second,), _ = run(("d.yaml", again), options=VIA_IMAGE)
    spec = second["spec"]["template"]["spec"]
    assert "initContainers" not in spec
    assert sorted(v["name"] for v in spec["volumes"]) == ["drainhook", "models"]
    mounts = [m["name"] for m in spec["containers"][0]["volumeMounts"]]
    assert mounts == ["drainhook"]
    (third,), _ = run(("d.yaml", yaml.safe_dump(second, sort_keys=False)))
    spec = third["spec"]["template"]["spec"]
    assert [v["name"] for v in spec["volumes"]] == ["models"]
    assert "volumeMounts" not in spec["containers"][0]
    assert prestop(spec["containers"][0])[0] == "/usr/local/bin/drainhook"


# -- the rest seen in the field --------------------------------------------------------


def test_crlf_line_endings_stay_crlf() -> None:
    """A manifest saved with CRLF: the wired document comes back with CRLF, an
    untouched one byte for byte."""
    engine = _deployment(VLLM + "          args: [m]\n").replace("\n", "\r\n")
    other = "apiVersion: v1\r\nkind: ConfigMap\r\nmetadata: {name: c}\r\n"
    result = inject_texts(
        [("d.yaml", engine + "---\r\n" + other)], Options(wait_params=WAIT, binary_given=True)
    )
    assert result.code == 0
    wired, untouched = result.stdout.split("---\r\n")
    assert "\n" not in wired.replace("\r\n", "") and "--enable-server-load-tracking" in wired
    assert untouched == other


def test_a_parse_error_names_its_line(tmp_path: Path) -> None:
    text = "apiVersion: v1\nkind: ConfigMap\n---\napiVersion: v1\nkind: ConfigMap\ndata: [1\n"
    with pytest.raises(UsageError, match=r"^x.yaml#1: not YAML at line 7: "):
        inject_texts([("x.yaml", text)], Options(wait_params=WAIT, binary_given=True))


def test_a_port_from_the_containers_env_is_resolved() -> None:
    """`--port $(PORT)` is Kubernetes' own expansion of the container's env: the hook
    reads the port it names."""
    container = VLLM + "          args: [m, --port, $(PORT)]\n          env:\n" \
        "          - {name: PORT, value: '8123'}\n"  # fmt: skip
    (doc,), _ = run(("d.yaml", _deployment(container)))
    words = prestop(doc["spec"]["template"]["spec"]["containers"][0])
    assert words[words.index("--port") + 1] == "8123"


def test_a_multi_node_sglang_is_named() -> None:
    """Every rank gets a hook; only rank 0 serves HTTP: said, for the user to point
    the other ranks at rank 0."""
    sglang = (
        "        - name: sglang\n          image: lmsysorg/sglang:v0.5.3\n"
        "          args: [--model-path, m, --nnodes, '2', --node-rank, $(POD_INDEX)]\n"
    )
    _, result = run(("s.yaml", _deployment(sglang)))
    (said,) = [ln for ln in result.lines if "--nnodes" in ln]
    assert ": warning: " in said and "over 2 nodes" in said and "DRAINHOOK_HOST" in said


def test_comments_among_the_replaced_commands_words_are_kept() -> None:
    """Comment lines between the words of a replaced preStop command (issue 35, item
    9: 23 such lines were dropped) come after the new command's last word, in order;
    those above it stay above it; injecting again changes nothing."""
    hook = (
        "          lifecycle:\n            preStop:\n              exec:\n"
        "                # Give the router time to notice.\n"
        "                command:\n                # the shell\n                - /bin/sh\n"
        "                - -c\n                # the wait itself\n                - sleep 15\n"
        "                # end\n"
    )
    text = _deployment(VLLM + "          args: [m]\n" + hook)
    _, result = run(("d.yaml", text))
    out = [line.strip() for line in result.stdout.splitlines()]
    at = out.index("- /proc/1/fd/1")
    assert out[at + 1 :] == ["# the shell", "# the wait itself", "# end"]
    assert out[out.index("command:") - 1] == "# Give the router time to notice."
    again = inject_texts(
        [("d.yaml", result.stdout)], Options(via="image", wait_params=WAIT, binary_given=True)
    )
    assert again.stdout == result.stdout


# -- exact, or it says so (CONTRACT §4) ----------------------------------------------


def said(*inputs: tuple[str, str]) -> injecting.Injected:
    """inject over inputs whose documents may be invalid (refused, written as they came)."""
    result = inject_texts(list(inputs), Options(wait_params=WAIT, binary_given=True))
    assert all(LINE.match(line) for line in result.lines), result.lines
    return result


@pytest.mark.parametrize("grace", ['"45"', "true", "30.5"])
def test_a_grace_it_cannot_read_is_refused_not_overwritten(grace: str) -> None:
    pod = f"      terminationGracePeriodSeconds: {grace}\n"
    text = _deployment(VLLM + "          args: [m]\n", pod)
    result = said(("g.yaml", text))
    assert (result.code, levels(result)) == (1, ["refused"]), result.lines
    assert "not a whole number of seconds" in result.lines[0]
    assert result.stdout == text  # written as it came, the value untouched


UNHELD = Options(wait_params=WAIT)  # --via image, no --binary


@pytest.mark.parametrize(
    ("image", "options", "named"),
    [
        ("vllm/vllm-openai:v0.18.0", UNHELD, "vllm/vllm-openai"),
        ("docker.io/vllm/vllm-openai@sha256:" + "0" * 64, UNHELD, "vllm/vllm-openai"),
        ("lmsysorg/sglang:v0.5.23-cu126", UNHELD, "lmsysorg/sglang"),
        ("vllm/vllm-openai:v0.18.0", Options(wait_params=WAIT, binary_given=True), None),
        ("registry.example/team/vllm-openai:v0.18.0", UNHELD, None),
        ("vllm/vllm-openai:v0.18.0", VIA_INIT, None),
        ("vllm/vllm-openai:v0.18.0", VIA_IMAGE, None),
    ],
    ids=[
        "vllm",
        "vllm-digest",
        "sglang",
        "binary-given",
        "own-image",
        "via-init",
        "via-image-volume",
    ],
)
def test_via_image_on_an_engines_own_image_is_refused_naming_the_via_that_fits(
    image: str, options: Options, named: str | None
) -> None:
    """An upstream engine image holds no drainhook: `--via image` there is a preStop
    that fails at once, and SIGTERM at once, worse than the sleep. Refused (exit 1,
    the document as it came), with the --via that fits; before, wired with a warning
    and exit 0. An explicit --binary says the image holds it; an image of the
    user's, or another --via, is wired without a word of it."""
    text = _deployment(f"        - name: vllm\n          image: {image}\n          args: [m]\n")
    result = inject_texts([("d.yaml", text)], options)
    said = [ln for ln in result.lines if "holds no drainhook" in ln]
    if named is None:
        assert result.code == 0 and said == [] and "preStop" in result.stdout
        return
    (line,) = said
    assert (result.code, result.stdout) == (1, text), result.lines
    assert LINE.match(line).group(5) == "refused"  # type: ignore[union-attr]
    assert f"--via image, but {named} is an engine's own image" in line
    assert "--via image-volume --image REF" in line and "--via init --image REF" in line
    assert "--binary PATH" in line


def test_a_vendors_image_tag_is_not_an_engine_version() -> None:
    """NGC's vLLM image is tagged year.month (26.02-py3): read as vLLM 26.2, a flag
    that vLLM version would take was written. Now it is named for the user to add."""
    ngc = "        - name: vllm\n          image: nvcr.io/nvidia/vllm:26.02-py3\n"
    (doc,), result = run(("ngc.yaml", _deployment(ngc + "          args: [m]\n")))
    args = doc["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == ["m"]  # no flag written on a guessed version
    (warning,) = [ln for ln in result.lines if ": warning: " in ln]
    assert "--enable-server-load-tracking not written" in warning and "--engine-version" in warning
    tagged = _deployment(VLLM.replace("v0.18.0", "v0.19.1-cu128") + "          args: [m]\n")
    (doc,), _ = run(("tagged.yaml", tagged))
    assert doc["spec"]["template"]["spec"]["containers"][0]["args"][-1] == (
        "--enable-server-load-tracking"
    )


def test_placeholders_refuse_only_a_document_inject_would_wire() -> None:
    """A Secret's `{{HF_TOKEN}}` (filled by a CI job) is not inject's: it passes, exit 0.
    KServe's ServingRuntime `{{.Name}}` is KServe's own placeholder in a kind inject
    does not wire: named as skipped, not as unrendered Helm."""
    secret = (
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: hf\n"
        "stringData:\n  token: '{{HF_TOKEN}}'\n"
    )
    runtime = (
        "apiVersion: serving.kserve.io/v1alpha1\nkind: ServingRuntime\nmetadata:\n"
        "  name: vllm\nspec:\n  containers:\n    - name: kserve-container\n"
        "      image: vllm/vllm-openai:v0.18.0\n"
        "      args: ['--served-model-name={{.Name}}', --port, '8080']\n"
    )
    deployment = _deployment(VLLM + "          args: [m]\n")
    result = said(("s.yaml", secret), ("r.yaml", runtime), ("d.yaml", deployment))
    assert result.code == 0, result.lines
    assert levels(result) == ["skipped", "injected", "changed", "changed"]
    assert "ServingRuntime: containers at spec not wired" in result.lines[0]
    assert "unrendered" not in " ".join(result.lines)
    helm = _deployment(VLLM + "          args: ['{{ .Values.model }}']\n")
    refused = said(("helm.yaml", helm))
    assert refused.code == 1 and "unrendered" in refused.lines[0]


ALIASES = "".join(
    f"{k}: &{k} [{', '.join([f'*{p}'] * 9) if p else ', '.join(['lol'] * 9)}]\n"
    for p, k in zip(["", *"abcdefgh"], "abcdefghi", strict=True)
)


def test_yaml_aliases_are_walked_once_never_expanded() -> None:
    """Nine levels of nine aliases, 520 bytes, are 387 million values expanded: named
    in a few ms and written as they came. A workload with an alias is refused."""
    assert len(ALIASES) < 600
    result = said(("bomb.yaml", ALIASES))  # expanded, it would never end
    assert (result.code, levels(result)) == (0, ["skipped"])
    assert "aliases" in result.lines[0] and result.stdout == ALIASES
    workload = _deployment(VLLM + "          args: &a [m]\n        - name: b\n          image: b\n"
                           "          args: *a\n")  # fmt: skip
    refused = said(("w.yaml", workload))
    assert (refused.code, levels(refused)) == (1, ["refused"])
    assert refused.stdout == workload
    assert "`kubectl kustomize DIR`" in refused.lines[0]  # the route that expands them
    # The bomb as a key (a flow list where a key goes): never written out as text.
    keyed = ALIASES + "? *i\n: v\napiVersion: apps/v1\nkind: Deployment\n"
    named = said(("k.yaml", keyed))
    assert (named.code, levels(named), named.stdout) == (1, ["refused"], keyed)


def verdicts(result: injecting.Injected) -> list[str]:
    """The lines that say what became of each document (not what changed in it)."""
    return [v for v in levels(result) if v in ("injected", "refused", "skipped")]


def _items(*documents: str) -> str:
    """A `kubectl get -o yaml` List of these documents."""
    indented = "".join("- " + d.replace("\n", "\n  ").rstrip(" ") for d in documents)
    return f"apiVersion: v1\nkind: List\nmetadata:\n  resourceVersion: ''\nitems:\n{indented}"


def test_a_list_item_with_aliases_is_refused_and_the_others_are_wired() -> None:
    """Before: the whole List was skipped with exit 0, its engine Deployment left
    without a hook. Now each item stands alone: one whose aliases stay inside it,
    or tie it to another item, is refused (exit 1); the others are wired."""
    plain = _deployment(VLLM + "          args: [m]\n")
    own = _deployment(VLLM + "          args: &a [m]\n        - name: b\n          image: b\n"
                      "          args: *a\n").replace("name: d\n", "name: own\n", 1)  # fmt: skip
    result = said(("list.yaml", _items(plain, own)))
    assert (result.code, verdicts(result)) == (1, ["injected", "refused"]), result.lines
    assert "[0] Deployment/d" in result.lines[0] and "[1] Deployment/own" in result.lines[-1]
    assert "drainhook" in result.stdout and "args: *a" in result.stdout
    assert said(("again.yaml", result.stdout)).stdout == result.stdout  # idempotent
    # An anchor in one item that another item's alias uses ties the two.
    tied = _deployment(VLLM + "          args: [m]\n").replace(
        "      labels: {app: d}\n", "      labels: &l {app: d}\n"
    )
    service = "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\nspec:\n  selector: *l\n"
    both = said(("tied.yaml", _items(plain.replace("name: d\n", "name: p\n", 1), tied, service)))
    assert (both.code, verdicts(both)) == (1, ["injected", "refused", "skipped"]), both.lines
    assert "[0] Deployment/p" in both.lines[0] and "[2] Service/s" in both.lines[-1]


def test_input_too_deep_is_a_usage_error_and_a_duplicate_key_keeps_its_values(
    tmp_path: Path,
) -> None:
    deep = tmp_path / "deep.yaml"
    deep.write_text("[" * 20000 + "]" * 20000 + "\n")
    done = cli(str(deep))
    assert (done.returncode, done.stdout) == (2, "")
    assert "nested too deep" in done.stderr and "Traceback" not in done.stderr
    secret = tmp_path / "secret.yaml"
    secret.write_text(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\nstringData:\n"
        "  password: hunter2\n  password: s3cr3t\n"
    )
    dup = cli(str(secret))
    assert (dup.returncode, dup.stdout) == (2, "")
    assert 'duplicate key "password"' in dup.stderr
    assert "hunter2" not in dup.stderr and "s3cr3t" not in dup.stderr


def test_a_list_of_deployments_takes_time_in_proportion() -> None:
    """A `kubectl get -o yaml` List: each Deployment wired once, a second run writes
    the same bytes. (The times per size are benchmarks/inject_speed.py's.)"""
    item = _deployment(VLLM + "          args: [m]\n")
    indented = "\n".join("  " + ln if ln else ln for ln in item.splitlines()).lstrip()
    items = "".join(f"- {indented.replace('name: d', f'name: d{i}', 1)}\n" for i in range(30))
    text = f"apiVersion: v1\nitems:\n{items}kind: List\nmetadata:\n  resourceVersion: ''\n"
    (doc,), result = run(("list.yaml", text))
    assert [ln.split(": ")[1] for ln in result.lines if ": injected: " in ln] == [
        f"list.yaml#0[{i}] Deployment/d{i}" for i in range(30)
    ]
    assert all(prestop(containers(d["spec"]["template"]["spec"])["vllm"]) for d in doc["items"])
    again, _ = run(("list.yaml", result.stdout))
    assert inject_texts(
        [("list.yaml", result.stdout)], Options(wait_params=WAIT, binary_given=True)
    ).stdout == (result.stdout)
    assert again[0] == doc


DYNAMO = """\
apiVersion: nvidia.com/v1alpha1
kind: DynamoGraphDeployment
metadata:
  name: llama
spec:
  services:
    VllmDecodeWorker:
      replicas: 2
      extraPodSpec:
        mainContainer:
          image: nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.4.0
          command: [python3, -m, dynamo.vllm]
          args: [--model, meta-llama/Llama-3.1-8B-Instruct]
"""
OME = """\
apiVersion: ome.io/v1beta1
kind: ClusterServingRuntime
metadata:
  name: srt-llama
spec:
  engineConfig:
    runner:
      name: ome-container
      image: docker.io/lmsysorg/sglang:v0.4.8.post1-cu126
      command: [python3, -m, sglang.launch_server]
"""


def test_an_engine_container_under_any_key_is_named_never_passed_in_silence() -> None:
    """Dynamo's `extraPodSpec.mainContainer` and OME's `runner` are engine containers
    outside a `containers` list: before, exit 0 and nothing on stderr."""
    result = said(("dynamo.yaml", DYNAMO), ("ome.yaml", OME))
    assert result.code == 0 and levels(result) == ["skipped", "skipped"], result.lines
    assert (
        "not wired (an engine at spec.services.VllmDecodeWorker.extraPodSpec.mainContainer): "
        "Dynamo's workers serve Dynamo's own endpoints" in result.lines[0]
    )
    assert "containers at spec.engineConfig.runner not wired" in result.lines[1]
    assert result.stdout == DYNAMO + "---\n" + OME


@pytest.mark.parametrize(
    ("container", "why"),
    [
        ("        - name: vllm\n          image: vllm/vllm-openai:v0.18.0\n"
         "          args: [--model, m, --disable-log-stats]\n", "--disable-log-stats"),
        ("        - name: vllm\n          image: vllm/vllm-openai:v0.18.0\n"
         "          command: [python3, -m, vllm.entrypoints.grpc_server, --model, m]\n",
         "gRPC server"),
        ("        - name: vllm\n          image: vllm/vllm-openai:v0.10.2\n"
         "          command: [python3, -m, vllm.entrypoints.api_server, --model, m]\n",
         "demo server (vllm.entrypoints.api_server) serves /health and /generate only"),
    ],
    ids=["no-gauges", "grpc", "demo"],
)  # fmt: skip
def test_an_engine_no_hook_can_read_is_refused_with_the_fix(container: str, why: str) -> None:
    text = _deployment(container)
    result = said(("e.yaml", text))
    assert (result.code, levels(result)) == (1, ["refused"]), result.lines
    assert why in result.lines[0] and result.stdout == text
    if why != "--disable-log-stats":  # before: wired as HTTP, with an HTTP flag appended
        assert "--enable-server-load-tracking" not in result.stdout
        assert "run `vllm serve`, then inject" in result.lines[0]


def test_what_the_manifest_hides_is_said_with_the_fix() -> None:
    """An entry script that hides the port; a shell that starts the engine without
    exec (it stays PID 1: SIGTERM stops at it). Both wired, each with a warning."""
    script = (
        "        - name: vllm\n          image: vllm/vllm-openai:v0.18.0\n"
        "          command: [/opt/serve.sh]\n          ports: [{containerPort: 9000}]\n"
    )
    shell = (
        "        - name: vllm\n          image: vllm/vllm-openai:v0.18.0\n"
        "          command: [sh, -c, 'pip install x && vllm serve m --port 8000']\n"
    )
    (hidden, _), result = run(("s.yaml", _deployment(script)), ("w.yaml", _deployment(shell)))
    assert result.code == 0
    (port,) = [ln for ln in result.lines if "does not show the engine's port" in ln]
    assert "s.yaml#0" in port and "reads 8000" in port and "declares 9000" in port
    assert "add --port N to the hook" in port
    (pid1,) = [ln for ln in result.lines if "without `exec`" in ln]
    assert "w.yaml#0" in pid1
    assert prestop(containers(hidden["spec"]["template"]["spec"])["vllm"])
    exec_form = _deployment(shell.replace("&& vllm", "&& exec vllm"))
    assert not [ln for ln in said(("x.yaml", exec_form)).lines if "without `exec`" in ln]


def test_one_vllm_over_several_pods_is_named() -> None:
    """vLLM data parallel across a LeaderWorkerSet group (2 of 4 ranks in each Pod):
    before, each Pod wired as an engine of its own, silently."""
    dp = (
        "        - name: vllm\n          image: vllm/vllm-openai:v0.18.0\n"
        "          args: [--model, m, --data-parallel-size, '4',\n"
        "                 --data-parallel-size-local, '2']\n"
    )
    result = said(("dp.yaml", _deployment(dp)))
    (line,) = [ln for ln in result.lines if ": warning: " in ln and "data-parallel" in ln]
    assert "2 of 4 ranks here" in line and "DRAINHOOK_HOST" in line
    alone = dp.replace("'4'", "'2'")
    assert not [ln for ln in said(("one.yaml", _deployment(alone))).lines if "ranks here" in ln]


def test_a_worker_reads_its_https_leader_over_https() -> None:
    """KServe's multi-node LLMInferenceService whose leader serves TLS (its probes say
    HTTPS): the worker's hook reads the leader as the leader is served."""
    text = (
        "apiVersion: serving.kserve.io/v1alpha1\nkind: LLMInferenceService\nmetadata:\n"
        "  name: tls\nspec:\n  model: {uri: 'hf://m', name: m}\n  template:\n    containers:\n"
        "      - name: main\n        readinessProbe:\n"
        "          httpGet: {path: /health, port: 8000, scheme: HTTPS}\n"
        "  worker:\n    containers:\n      - name: main\n"
    )
    (doc,), result = run(("tls.yaml", text))
    assert result.code == 0, result.lines
    leader = prestop(containers(doc["spec"]["template"])["main"])
    worker = prestop(containers(doc["spec"]["worker"])["main"])
    assert leader[leader.index("--scheme") + 1] == "https"
    assert worker[worker.index("--scheme") + 1] == "https"  # before: read over http


def test_the_comments_around_a_replaced_kubelet_sleep_are_kept() -> None:
    """The kubelet's `sleep` action with its authors' reasons around it: before, the
    comments inside and after it were deleted with it."""
    reasons = ["# thirty seconds", "# measured", "# end of sleep", "# after preStop"]
    container = VLLM + (
        "          args: [m]\n          lifecycle:\n            # Give the load balancer time:\n"
        "            preStop:\n              sleep:\n                # thirty seconds\n"
        "                seconds: 30  # measured\n                # end of sleep\n"
        "            # after preStop\n          resources: {}\n"
    )
    (doc,), result = run(("s.yaml", _deployment(container)))
    assert "replaced" in levels(result)
    assert prestop(containers(doc["spec"]["template"]["spec"])["vllm"])[:2] == [
        "/usr/local/bin/drainhook", "wait",
    ]  # fmt: skip
    out = result.stdout
    assert "# Give the load balancer time:" in out
    assert [r for r in reasons if r in out] == reasons
    assert out.index("/proc/1/fd/1") < out.index("# thirty seconds") < out.index("resources")
    again = said(("s.yaml", out))
    assert again.stdout == out


SCRIPTED = """\
        - name: sglang
          image: lmsysorg/sglang:v0.5.23
          command:
            - /bin/sh
            - -c
            - |
              pip list
              exec python3 -m sglang.launch_server --model-path m \\
                --json-model-override-args '{"rope_scaling":
                  {"type": "yarn", "factor": 4.0}}'
              # the port is the Service's targetPort
"""


def test_a_script_past_its_comments_and_quoted_lines_is_named_not_edited() -> None:
    """A comment line after the engine's command (with an apostrophe), and a quoted
    argument spread over lines: before, the flag was not added (and the apostrophe
    crashed the run, exit 70). Now the document is refused as it is, the flag named;
    a script no shell can split is refused as such."""
    text = _deployment(SCRIPTED)
    result = said(("s.yaml", text))
    assert (result.code, levels(result), result.stdout) == (1, ["refused"], text)
    assert "`--enable-metrics`" in result.lines[0]
    unclosed = _deployment(SCRIPTED.replace("pip list", 'echo "unclosed'))
    refused = said(("u.yaml", unclosed))
    assert (refused.code, levels(refused)) == (1, ["refused"]), refused.lines
    assert "cannot be split as a shell would" in refused.lines[0]


# -- the engine is what the command runs; what inject cannot see, it names ---------------

NAMED = MANIFESTS / "named"


def test_a_program_that_is_not_an_engine_is_left_byte_for_byte_and_named() -> None:
    """SGLang's router (by its command, and by args in SGLang's image, which has no
    entrypoint), a benchmark client from NGC's vLLM image, a toolbox that sleeps:
    before, each was wired as an engine (the router given --enable-metrics, a flag it
    would crash-loop on). Now each is written as it came, with one `skipped` line."""
    text = (NAMED / "not-engines.yaml").read_text()
    result = said(("n.yaml", text))
    assert (result.code, result.stdout) == (0, text)
    assert levels(result) == ["skipped"] * 4, result.lines
    ran = [re.search(r"runs (.+), not an engine", ln).group(1) for ln in result.lines]  # type: ignore[union-attr]
    assert ran == [
        "python3 -m sglang_router.launch_router", "python3 -m sglang_router.launch_router",
        "pip, genai-perf", "sleep",
    ]  # fmt: skip
    assert all("--container NAME --engine E" in ln for ln in result.lines)
    # The user who knows better names it, and it is wired as told.
    told = Options(container="tools", engine="vllm", wait_params=WAIT, binary_given=True)
    docs, forced = run(("n.yaml", text), options=told)
    assert forced.code == 0 and "injected" in levels(forced)
    assert prestop(containers(docs[3]["spec"])["tools"])[:2] == ["/usr/local/bin/drainhook", "wait"]


@pytest.mark.parametrize(
    ("container", "ran"),
    [
        ({"command": ["tini", "--", "vllm", "serve", "m"]}, ("vllm", ())),
        ({"command": ["python3", "-m", "vllm.entrypoints.openai.api_server"]}, ("vllm", ())),
        ({"command": ["sh", "-c", "pip install x && exec vllm serve m"]}, ("vllm", ())),
        ({"args": ["bash", "-lc", "exec python3 -m sglang.launch_server"]}, ("sglang", ())),
        ({"image": "vllm/vllm-openai:v0.18.0", "args": ["m", "--port", "8000"]}, (None, ())),
        ({"image": "vllm/vllm-openai:v0.18.0", "args": ["sleep", "60"]}, (None, ())),
        ({"image": "nvcr.io/nvidia/vllm:26.02-py3", "args": ["m"]}, (None, ())),
        ({"image": "lmsysorg/sglang:v0.5.23",
          "args": ["python3", "-m", "sglang_router.launch_router"]},
         (None, ("python3 -m sglang_router.launch_router",))),
        ({"command": ["/opt/serve.sh"]}, (None, ())),
        ({"command": ["/bin/bash", "/start.sh"]}, (None, ())),
        ({"command": ["sh", "-c", "cd /app && python3 serve.py"]}, (None, ())),
        ({"command": ["sh", "-c", "echo 'unclosed"]}, (None, ())),
        ({"command": ["/bin/sleep", "infinity"]}, (None, ("sleep",))),
        ({"command": ["vllm", "bench", "serve", "--model", "m"]}, (None, ("vllm bench",))),
        ({"command": ["sh", "-c", "while true; do sync-adapters >/tmp/log 2>&1; sleep 30; done"]},
         (None, ("sync-adapters", "sleep"))),
        ({"command": ["sh", "-c", ". /venv/bin/activate; A=1 genai-perf profile | tee out"]},
         (None, ("genai-perf", "tee"))),
    ],
    ids=["wrapped", "module", "script", "args-script", "entrypoint", "entrypoint-args", "ngc",
         "router-args", "entry-script", "shell-file", "python-file", "unsplittable", "sleep",
         "bench", "loop", "pipeline"],
)  # fmt: skip
def test_what_a_container_runs_is_read_from_its_command(
    container: dict[str, typing.Any], ran: tuple[str | None, tuple[str, ...]]
) -> None:
    """The engine a command starts; else the programs it shows instead; neither where
    it shows nothing (the image's entrypoint given a model or flags, an entry script a
    program of the user's, a script no shell can split): those stay the image's call."""
    assert running.runs(container) == ran


@pytest.mark.parametrize(
    ("text", "where", "made"),
    [(0, "names an engine at servingEngineSpec.modelSpec[0].repository but", "the chart's values"),
     (1, "not wired (an engine at spec.engine)", "modelServerPods.jsonPatches"),
     (2, "not wired (an engine at inference)", "the Workspace's inference.template")],
    ids=["helm-values", "kubeai-model", "kaito-workspace"],
)  # fmt: skip
def test_an_engine_described_without_a_pod_spec_is_named(text: int, where: str, made: str) -> None:
    """A chart's values (production-stack's shape: no kind), a KubeAI Model (`engine:
    VLLM`), a KAITO Workspace (a preset): before, exit 0 and nothing on stderr."""
    docs = (NAMED / "engines-without-pods.yaml").read_text().split("\n---\n")
    source = docs[text] + ("" if text == len(docs) - 1 else "\n")
    result = said(("e.yaml", source))
    assert (result.code, result.stdout, levels(result)) == (0, source, ["skipped"]), result.lines
    line = result.lines[0]
    assert where in line and made in line, line
    assert "lmstack-router" not in line and "routerSpec" not in line  # a router is no engine


def test_a_document_that_names_no_engine_says_nothing() -> None:
    values = "routerSpec:\n  repository: lmcache/lmstack-router\nreplicaCount: 2\n"
    model = "apiVersion: kubeai.org/v1\nkind: Model\nmetadata: {name: m}\nspec: {engine: OLlama}\n"
    service = (
        "apiVersion: v1\nkind: Service\nmetadata: {name: s, labels: {engine: vllm}}\n"
        "spec: {selector: {engine: vllm}, ports: [{port: 8000}]}\n"
    )
    result = said(("v.yaml", values), ("m.yaml", model), ("s.yaml", service))
    assert (result.code, result.lines) == (0, ())


def test_a_port_the_command_takes_from_the_env_is_read_or_named() -> None:
    """The shell's `${PORT}` and Kubernetes' `$(PORT)` with PORT in the container's env
    are read (8100 and 31000: before, 8000 and 30000, the engines' defaults, silently);
    a PORT with no literal value is named with what the hook reads and the fix."""
    docs, result = run(file(NAMED / "ports.yaml"))
    hooks = [prestop(d["spec"]["template"]["spec"]["containers"][0]) for d in docs]
    assert [h[h.index("--port") + 1] if "--port" in h else None for h in hooks] == [
        "8100", "31000", None,
    ]  # fmt: skip
    (named,) = [ln for ln in result.lines if "--port" in ln and ": warning: " in ln]
    assert "Deployment/port-unread" in named and "its --port is $PORT" in named
    assert "the hook reads 8000, vllm's default (the container declares 8100)" in named
    assert "add --port N to the hook" in named


@pytest.mark.parametrize(
    ("args", "env", "port"),
    [
        ("[sh, -c, 'exec vllm serve m --port ${PORT:-8200}']", "", (8200, "")),
        ("[sh, -c, 'exec vllm serve m --port ${PORT:-8200}']",
         "envFrom: [{configMapRef: {name: e}}]", (None, "${PORT:-8200}")),
        ("[sh, -c, 'exec vllm serve m --port=$PORT']", "env: [{name: PORT, value: '9001'}]",
         (9001, "")),
        ("[vllm, serve, m, --port, $PORT]", "env: [{name: PORT, value: '9001'}]",
         (None, "$PORT")),  # a list: only Kubernetes' $(PORT) is expanded there
        ("[sh, -c, 'P=9002; exec vllm serve m --port $P']", "", (None, "$P")),
    ],
    ids=["default", "env-from", "equals", "list", "shell-variable"],
)  # fmt: skip
def test_the_engines_port_is_read_as_the_shell_and_kubernetes_expand_it(
    args: str, env: str, port: tuple[int | None, str]
) -> None:
    container = yaml.safe_load(f"command: {args}\n{env}")
    assert argv.engine_port(argv.argv_of(container), container) == port


def test_vllm_data_parallel_over_a_leader_worker_set_is_named_for_the_drain() -> None:
    """vLLM DP/EP over a LeaderWorkerSet: with internal balancing the leader's Pod
    serves every rank and the headless workers wait on it, which the line says (before,
    it advised wiring what inject had just wired); with hybrid balancing every Pod
    serves its own ranks, which no hook waiting on the leader reads: named."""
    docs, result = run(file(NAMED / "lws-data-parallel.yaml"), options=Options(
        engine_version="0.32", wait_params=WAIT, binary_given=True))  # fmt: skip
    assert result.code == 0
    internal, hybrid = (
        [
            ln
            for ln in result.lines
            if f"/{name}: warning: " in ln and "-parallel engine over Pods" in ln
        ]
        for name in ("vllm-dp-ep", "vllm-dp-hybrid")
    )
    (leader,) = internal  # the headless worker has nothing of its own to say
    assert "leaderTemplate.spec: container vllm-leader: a vLLM data- and expert-parallel" in leader
    assert "8 of 16 ranks here" in leader and "only rank 0's Pod serves HTTP" in leader
    assert "each worker's hook waits on it (DRAINHOOK_HOST=$(LWS_LEADER_ADDRESS))" in leader
    assert "point the other Pods' hooks" not in leader
    (lead,) = hybrid  # named once, where the group's hooks are decided
    assert "leaderTemplate" in lead and "each Pod's API server serves its own ranks" in lead
    assert "the workers' hooks wait on the leader, reading none of their own Pods'" in lead
    for doc in docs:  # either way the workers' hooks wait on the leader
        spec = doc["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
        env = containers(spec)["vllm-worker"]["env"]
        assert {"name": "DRAINHOOK_HOST", "value": "$(LWS_LEADER_ADDRESS)"} in env
    assert not [ln for ln in result.lines if "workerTemplate" in ln and "vllm-api-servers" in ln]


def test_a_script_in_the_args_of_an_image_without_an_entrypoint_is_read_as_one() -> None:
    """SGLang's image has no entrypoint: `args: [sh, -c, SCRIPT]` is the shell's. Before,
    --enable-metrics was appended to the list, after the script: the shell's $0, never
    the engine's. Now it is the script it is: never edited, the flag named (refused:
    the hook cannot read SGLang without it)."""
    text = _deployment(
        "        - name: sglang\n          image: lmsysorg/sglang:v0.5.23\n"
        "          args: [sh, -c, 'exec python3 -m sglang.launch_server --model-path m']\n"
    )
    result = said(("a.yaml", text))
    assert (result.code, levels(result), result.stdout) == (1, ["refused"], text), result.lines
    assert "shell script" in result.lines[0] and "`--enable-metrics`" in result.lines[0]


def _prestops(node: object) -> list[list[str]]:
    """Every `lifecycle.preStop.exec.command` under a parsed document."""
    found: list[list[str]] = []
    if isinstance(node, dict):
        command = ((node.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}
        if isinstance(command, dict) and isinstance(command.get("command"), list):
            found.append([str(w) for w in command["command"]])
        for value in node.values():
            found += _prestops(value)
    elif isinstance(node, list):
        for value in node:
            found += _prestops(value)
    return found


@pytest.mark.parametrize(
    "via",
    [
        Options(wait_params=WAIT, binary_given=True),
        Options(via="init", image="r/drainhook:1", wait_params=WAIT, binary_given=True),
    ],
    ids=["image", "init"],
)
def test_every_prestop_inject_writes_parses_with_waits_own_parser(via: Options) -> None:
    """inject builds each preStop from plan's rules (issue 58: inject reads the core
    through its named functions); each one it writes, over every manifest the tests
    keep and every example, is read back by `wait`'s own click parser, as the
    kubelet's exec will run it: `wait`, and the grace it wrote."""
    paths = sorted(MANIFESTS.rglob("*.yaml")) + sorted((ROOT / "examples" / "plain").glob("*.y*ml"))
    written = 0
    for path in paths:
        result = inject_texts([(str(path), path.read_text())], via)
        for doc in yaml.safe_load_all(result.stdout):
            for words in _prestops(doc):
                if Path(words[0]).name != "drainhook":
                    continue  # a hook the user keeps (sleep, a script): not inject's
                name, params, _ = parse_hook(words)
                assert name == "wait" and params["grace"] > 0, (path, words)
                written += 1
    assert written >= 20  # the walk found the hooks it judges


def test_a_program_is_its_basename_and_a_cache_server_is_no_engine() -> None:
    """`/opt/venv/bin/vllm serve` is vLLM on any image; LMCache's server on an image
    named after vLLM is not wired (named, left as it is), by its basename."""
    engine = (
        "        - name: engine\n          image: registry.example/base:1\n"
        "          command: [/opt/venv/bin/vllm, serve, m, --port, '8100']\n"
        "        - name: cache\n          image: lmcache/vllm-openai:v0.3.9\n"
        "          command: [/opt/venv/bin/lmcache_server, 0.0.0.0, '65432']\n"
    )
    (doc,), result = run(("d.yaml", _deployment(engine)))
    found = containers(doc["spec"]["template"]["spec"])
    assert prestop(found["engine"])[:2] == [BINARY, "wait"]
    assert "--engine" in prestop(found["engine"]) and "vllm" in prestop(found["engine"])
    assert "lifecycle" not in found["cache"]
    (skipped,) = [ln for ln in result.lines if ": skipped: " in ln]
    assert "container cache runs lmcache_server, not an engine" in skipped


def test_a_vllm_worker_in_a_pd_resource_that_also_runs_sglang_gets_vllms_advice() -> None:
    """Kthena P/D: a vLLM prefill entry with workers beside an SGLang decode role. The
    vLLM workers' hooks are planned as vLLM (no SGLang R 20, no G floor of 45)."""
    role = (
        "    - name: {name}\n      replicas: 1\n      workerReplicas: {workers}\n"
        "      entryTemplate:\n        spec:\n          containers:\n"
        "            - name: engine\n              image: {image}\n"
        "              command: {command}\n{worker}"
    )
    worker = (
        "      workerTemplate:\n        spec:\n          containers:\n"
        "            - name: engine\n              image: vllm/vllm-openai:v0.18.0\n"
        "              command: [vllm, serve, m, --headless, --kv-transfer-config,"
        ' \'{"kv_role": "kv_producer"}\']\n'
    )
    vllm = '[vllm, serve, m, --kv-transfer-config, \'{"kv_role": "kv_producer"}\']'
    sglang = "[python3, -m, sglang.launch_server, --disaggregation-mode, decode, --enable-metrics]"
    text = (
        "apiVersion: workload.serving.volcano.sh/v1alpha1\nkind: ModelServing\n"
        "metadata:\n  name: pd\nspec:\n  replicas: 1\n  template:\n    roles:\n"
        + role.format(name="prefill", workers=1, image="vllm/vllm-openai:v0.18.0",
                      command=vllm, worker=worker)
        + role.format(name="decode", workers=0, image="lmsysorg/sglang:v0.5.23",
                      command=sglang, worker="")
    )  # fmt: skip
    result = inject_texts([("pd.yaml", text)], VIA_INIT)
    assert result.code == 0, result.lines
    (doc,) = yaml.safe_load_all(result.stdout)
    prefill, decode = doc["spec"]["template"]["roles"]
    lead = prefill["entryTemplate"]["spec"]
    work = prefill["workerTemplate"]["spec"]
    hook = parse_hook(prestop(work["containers"][0]))[1]
    assert hook["exit_reserve"] < 20.0  # vLLM's, not sglang-pd-exit's 20
    assert work["terminationGracePeriodSeconds"] == (
        lead["terminationGracePeriodSeconds"] + 5 + hook["exit_reserve"]
    )
    assert not any("sglang" in ln for ln in result.lines if "workerTemplate" in ln)
    sg = parse_hook(prestop(decode["entryTemplate"]["spec"]["containers"][0]))[1]
    assert sg["exit_reserve"] == 20.0  # the SGLang role keeps its own


def test_vllm_data_parallel_by_rank_across_pods_is_named() -> None:
    """vLLM's external balancing, one rank a Pod (`--data-parallel-rank N` of
    `--data-parallel-size M`): each Pod serves its own rank; wired, and the line says
    the Pods must be drained together."""
    engine = (
        "        - name: vllm\n          image: vllm/vllm-openai:v0.18.0\n"
        "          args: [m, --data-parallel-size, '4', --data-parallel-rank, '2']\n"
    )
    (doc,), result = run(("d.yaml", _deployment(engine)))
    assert prestop(containers(doc["spec"]["template"]["spec"])["vllm"])[:2] == [BINARY, "wait"]
    (line,) = [ln for ln in result.lines if "data-parallel" in ln and ": warning: " in ln]
    assert "a vLLM data-parallel engine over Pods (rank 2 of 4)" in line
    assert "each Pod's API server serves its own ranks" in line
    alone = _deployment(VLLM + "          args: [m, --data-parallel-size, '4']\n")
    assert not any("over Pods" in ln for ln in run(("a.yaml", alone))[1].lines)


def test_inject_says_what_it_did_in_a_line_per_document_and_one_per_value() -> None:
    """The `injected` line sums each pod spec up (G before and after, the idle exit
    to expect, the flags added); each variable and flag a worker gets is a line with
    why; a short sleep replaced says when an idle Pod now goes."""
    _, result = run(file(PLAIN / "lws-vllm.yaml"))
    (line,) = [ln for ln in result.lines if ": injected: " in ln]
    assert "leaderTemplate.spec: vllm-leader (G 60; an idle Pod goes about 6 s after " in line
    assert "workerTemplate.spec: vllm-worker (G 30 -> 70; an idle Pod goes about 6 s" in line
    changed = [ln.split(": changed: ", 1)[1] for ln in result.lines if ": changed: " in ln]
    worker = "spec.leaderWorkerTemplate.workerTemplate.spec: container vllm-worker: "
    assert (
        worker + "env DRAINHOOK_HOST=$(LWS_LEADER_ADDRESS) (a worker's hook waits on "
        in "\n".join(changed)
    )
    assert any(c.startswith(worker + "env DRAINHOOK_ALLOW_REMOTE=1 (") for c in changed)
    assert any(c.startswith(worker + "--exit-zero (a worker holds to its D") for c in changed)
    short = _deployment(VLLM + "          lifecycle: {preStop: {exec: {command: [sleep, '3']}}}\n")
    replaced = [ln for ln in run(("s.yaml", short))[1].lines if ": replaced: " in ln]
    assert replaced[0].endswith(
        "preStop sleep 3 (a blind wait) by drainhook wait: an idle Pod now goes about 6 s "
        "after deletion, a busy one when done"
    )
