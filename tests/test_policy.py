"""`drainhook policy` (CONTRACT §4): the admission policy wires each engine Pod as
`inject` wires the same Pod. No registry here ships a kube-apiserver: the policy's
CEL is evaluated by cel-python with shims for Kubernetes' CEL libraries, its JSON
Patch applied by RFC 6902 (tests/support/admission.py says what that cannot
prove), on every Pod template of inject's test manifests."""

from __future__ import annotations

import copy
import json
import re
import typing

import kubernetes_validate
import pytest
import yaml

from drainhook.cli.main import run as cli_run
from drainhook.cli.main import wait
from drainhook.inject.kinds import groups, kind_of
from drainhook.inject.options import Options
from drainhook.inject.policy import LABEL, NOTES, RANKED, objects
from drainhook.inject.run import inject_texts
from drainhook.inject.workloads import Site
from tests.support import admission
from tests.support.injecting import MANIFESTS, containers, prestop
from tests.support.process import ROOT

WAIT = tuple(wait.params)
IMAGE = "registry.example/drainhook:0.1.0"
VIAS = {
    "init": Options("init", IMAGE, wait_params=WAIT, binary_given=True),
    "image-volume": Options("image-volume", IMAGE, wait_params=WAIT, binary_given=True),
}
POD_VERSIONS = ("1.36.0", "1.37.0")  # every wired Pod, strictly
POLICY_VERSIONS = ("1.36.0", "1.37.0")  # admissionregistration.k8s.io/v1's objects
INDEX = "leaderworkerset.sigs.k8s.io/worker-index"


def policy(via: str = "init") -> list[dict[str, typing.Any]]:
    return objects(VIAS[via])


def hooked(spec: dict[str, typing.Any]) -> list[dict[str, typing.Any]]:
    """The containers of a pod spec whose preStop is drainhook's."""
    found = []
    for c in spec.get("containers", []):
        command = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
        found += [c] if command[1:2] == ["wait"] else []
    return found


class Case(typing.NamedTuple):
    """One pod template inject wired: the Pod the policy is given (as the apiserver
    has it before admission: the template, its labels, the grace defaulted), inject's
    pod spec, and the template's place."""

    where: str
    pod: dict[str, typing.Any]
    injected: dict[str, typing.Any]
    kind: str
    worker: bool
    site: Site


def _sites(doc: dict[str, typing.Any], options: Options) -> list[tuple[Site, bool]]:
    return [(s, s.worker) for g in groups(doc, options) for s in (g.lead, *g.workers)]


def cases(via: str) -> list[Case]:
    options = VIAS[via]
    paths = sorted([*MANIFESTS.rglob("*.yaml"), *(ROOT / "examples" / "plain").glob("*.yaml")])
    out = []
    for path in paths:
        text = path.read_text()
        result = inject_texts([(path.name, text)], options)
        for before, after in zip(
            yaml.safe_load_all(text), yaml.safe_load_all(result.stdout), strict=True
        ):
            units = [(before, after)]
            if isinstance(before, dict) and before.get("kind") == "List":
                units = list(zip(before["items"], after["items"], strict=True))
            for a, b in units:
                kind = kind_of(a) if isinstance(a, dict) else None
                if kind is None or kind.build is None or kind.kind == "LLMInferenceService":
                    continue  # KServe's templates are merged over its preset: no Pod here
                if result.code != 0 and b == a:
                    continue
                pairs = zip(
                    _sites(copy.deepcopy(a), options),
                    _sites(copy.deepcopy(b), options),
                    strict=True,
                )
                for (site, worker), (wired, _) in pairs:
                    if not hooked(wired.spec):
                        continue
                    labels = dict(site.labels)
                    if kind.kind == "LeaderWorkerSet":
                        labels[INDEX] = "1" if worker else "0"
                    spec = copy.deepcopy(site.spec)
                    spec.setdefault("terminationGracePeriodSeconds", int(site.default_grace))
                    pod = {"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": "p", "labels": labels}, "spec": spec}  # fmt: skip
                    where = f"{path.relative_to(ROOT)} {kind.kind} {site.path}"
                    out.append(Case(where, pod, wired.spec, kind.kind, worker, site))
    return out


def _leader_grace(case: Case) -> int:
    """The grace of the leader a LeaderWorkerSet worker's template follows."""
    for path in [*MANIFESTS.rglob("*.yaml"), *(ROOT / "examples" / "plain").glob("*.yaml")]:
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "LeaderWorkerSet":
                lwt = doc["spec"]["leaderWorkerTemplate"]
                if lwt.get("workerTemplate", {}).get("spec") == case.site.spec:
                    lead = lwt.get("leaderTemplate", {}).get("spec", {})
                    return int(lead.get("terminationGracePeriodSeconds", 30))
    raise AssertionError(f"no leader for {case.where}")


CASES = {via: cases(via) for via in VIAS}


def test_the_cases_are_the_inject_manifests_pods() -> None:
    """The comparison reaches every shape: Deployments, StatefulSets, a List's items,
    LeaderWorkerSet leaders and workers, each operator's templates."""
    found = CASES["init"]
    assert len(found) >= 40
    kinds = {c.kind for c in found}
    assert {"Deployment", "StatefulSet", "LeaderWorkerSet", "StormService", "ModelServing",
            "RoleBasedGroup"} <= kinds  # fmt: skip
    assert any(c.worker and c.kind == "LeaderWorkerSet" for c in found)


@pytest.mark.parametrize("via", list(VIAS))
def test_the_policy_wires_each_pod_as_inject_wires_it(via: str) -> None:
    """The hook, the grace, the installer, the volumes and the env of each engine
    container the policy wires are inject's. What it leaves, or wires otherwise, is
    each a difference docs/inject.md names: a group's rank that is not a
    LeaderWorkerSet's (the Pod does not say which leads), and a LeaderWorkerSet
    worker's grace where its leader's template sets another (a worker Pod shows
    only its own)."""
    mutating, validating = policy(via)[0], policy(via)[2]
    compared = left = 0
    for case in CASES[via]:
        got = admission.admit(mutating, copy.deepcopy(case.pod))
        spec = got["spec"]
        text = " ".join(
            str(w) for c in hooked(case.injected) for w in c.get("command", []) + c.get("args", [])
        )
        ranked = re.search(RANKED, f" {text} ")
        given = " ".join(
            str(w)
            for c in case.pod["spec"]["containers"]
            for w in c.get("command", []) + c.get("args", [])
        )
        unread = "sglang" in text and "--enable-metrics" not in given  # inject adds it
        if (
            (case.worker and case.kind != "LeaderWorkerSet")
            or unread
            or (case.kind != "LeaderWorkerSet" and ranked)
        ):
            assert hooked(spec) == [], case.where  # left unwired; warned of, an engine
            engine = admission.evaluate(validating["spec"], got)["at"] >= 0  # (not Ray's)
            assert bool(admission.validate(validating, got)) == engine, case.where
            left += 1
            continue
        compared += 1
        (engine,) = hooked(spec)[:1]
        theirs = hooked(case.injected)[0]
        assert engine["name"] == theirs["name"], case.where
        ours, want = prestop(engine), prestop(theirs)
        grace, wanted_grace = (
            spec["terminationGracePeriodSeconds"],
            case.injected["terminationGracePeriodSeconds"],
        )
        if case.worker:
            own = case.pod["spec"]["terminationGracePeriodSeconds"]
            shift = _leader_grace(case) - own  # the leader's grace the worker Pod cannot see
            assert wanted_grace - grace == shift, case.where
            ours = [str(wanted_grace) if w == str(grace) else w for w in ours]
        else:
            assert grace == wanted_grace, case.where
        assert ours == want, case.where
        assert engine.get("env") == theirs.get("env"), case.where
        assert engine.get("volumeMounts") == theirs.get("volumeMounts"), case.where
        assert spec.get("volumes") == case.injected.get("volumes"), case.where
        assert spec.get("initContainers") == case.injected.get("initContainers"), case.where
        assert NOTES in got["metadata"]["annotations"], case.where
        assert admission.validate(validating, got) == [], case.where
    assert (compared, left) == (28, 17), (compared, left)  # each shape, each way


@pytest.mark.parametrize("via", list(VIAS))
def test_each_wired_pod_is_a_valid_pod_and_admitting_it_again_changes_nothing(via: str) -> None:
    mutating = policy(via)[0]
    for case in CASES[via]:
        once = admission.admit(mutating, copy.deepcopy(case.pod))
        assert admission.admit(mutating, copy.deepcopy(once)) == once, case.where
        for version in POD_VERSIONS:
            kubernetes_validate.validate(once, version, strict=True)


@pytest.mark.parametrize("via", list(VIAS))
def test_the_policy_objects_are_valid_for_kubernetes(via: str) -> None:
    """Strictly valid admissionregistration.k8s.io/v1 objects: failurePolicy Ignore,
    JSON Patch only, never Deny, namespaces opted in by their label."""
    mutating, binding, validating, vbinding = policy(via)
    for obj in (mutating, binding, validating, vbinding):
        for version in POLICY_VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)
    assert mutating["spec"]["failurePolicy"] == validating["spec"]["failurePolicy"] == "Ignore"
    assert mutating["spec"]["reinvocationPolicy"] == "IfNeeded"
    assert [m["patchType"] for m in mutating["spec"]["mutations"]] == ["JSONPatch"]
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {
        "matchLabels": {LABEL: "enabled"}
    }
    assert vbinding["spec"]["validationActions"] == ["Warn", "Audit"]
    for spec in (mutating["spec"], validating["spec"]):  # constructors only in mutations
        for expr in [*spec["matchConditions"], *spec["variables"]]:
            assert "JSONPatch{" not in expr["expression"] and "Object{" not in expr["expression"]


def test_a_constructor_in_a_variable_is_refused_as_the_apiserver_refuses_it() -> None:
    mutating = policy()[0]
    bad = copy.deepcopy(mutating)
    bad["spec"]["variables"].append(
        {"name": "patch", "expression": 'JSONPatch{op: "add", path: "/x", value: 1}'}
    )
    pod = CASES["init"][0].pod
    with pytest.raises(admission.Refused):
        admission.admit(bad, copy.deepcopy(pod))
    assert admission.admit(mutating, copy.deepcopy(pod)) != pod  # the same Pod, wired


ENGINE = {"name": "vllm", "image": "vllm/vllm-openai:v0.18.0", "args": ["Qwen/Qwen3-8B"]}
ROUTER = {"name": "router", "image": "ghcr.io/llm-d/llm-d-routing-sidecar:v0.3"}


def _pod(*containers: dict[str, typing.Any], **labels: str) -> dict[str, typing.Any]:
    spec = {"terminationGracePeriodSeconds": 30, "containers": list(containers)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": labels},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("pod", "why"),
    [
        (_pod(ENGINE, **{LABEL: "disabled"}), "opted out"),
        (_pod(ROUTER), "no engine"),
        (_pod({**ENGINE, "lifecycle": {"preStop": {"httpGet": {"path": "/drain", "port": 8000}}}}),
         "a preStop of its own"),
        (_pod({**ENGINE, "args": ["m", "--disable-log-stats"]}), "no scheduler gauges"),
        (_pod({**ENGINE, "args": ["m", "--host", "10.0.0.5"]}), "an address the hook cannot read"),
        (_pod({"name": "grpc", "image": "vllm/vllm-openai:v0.18.0",
               "command": ["python3", "-m", "vllm.entrypoints.grpc_server"]}), "serves no HTTP"),
    ],
)  # fmt: skip
def test_what_the_policy_leaves_exactly_as_it_is(pod: dict[str, typing.Any], why: str) -> None:
    """Routers, opted-out Pods, a preStop of the user's own and engines the hook
    could never read: the Pod comes out as it went in."""
    assert admission.admit(policy()[0], copy.deepcopy(pod)) == pod, why


def test_an_engine_pod_left_unwired_is_warned_of_with_the_fix_never_denied() -> None:
    validating = policy()[2]
    own = _pod({**ENGINE, "lifecycle": {"preStop": {"exec": {"command": ["/drain.sh"]}}}})
    (message,) = admission.validate(validating, own)
    assert "engine container vllm has no drainhook preStop" in message
    assert f"{LABEL}=enabled" in message and "drainhook inject" in message
    router = _pod(ROUTER)
    assert admission.validate(validating, router) == []
    assert admission.validate(validating, _pod(ENGINE, **{LABEL: "disabled"})) == []


def test_a_sleep_becomes_the_settle_and_the_grace_rises_as_inject_raises_it() -> None:
    """`sleep 30` (exec, in a shell, or the kubelet's action): S 30, G 30 + 20 + 5."""
    for prestop_ in ({"exec": {"command": ["sleep", "30"]}},
                     {"exec": {"command": ["/bin/sh", "-c", "sleep 30"]}},
                     {"sleep": {"seconds": 30}}):  # fmt: skip
        got = admission.admit(policy()[0], _pod({**ENGINE, "lifecycle": {"preStop": prestop_}}))
        hook = prestop(containers(got["spec"])["vllm"])
        assert hook[2:6] == ["--grace", "55", "--settle", "30"], prestop_
        assert got["spec"]["terminationGracePeriodSeconds"] == 55


def test_the_command_writes_four_objects_and_refuses_what_it_cannot_wire(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli_run(["policy", "--via", "init", "--image", IMAGE]) == 0
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert [d["kind"] for d in docs] == [
        "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
    ]  # fmt: skip
    assert json.dumps(docs) == json.dumps(policy("init"))
    assert cli_run(["policy", "--via", "image", "--image", IMAGE]) == 2  # no image to hold it
    assert cli_run(["policy", "--via", "init"]) == 2  # no --image


def test_docs_say_when_to_use_inject_the_component_or_the_policy() -> None:
    text = (ROOT / "docs" / "inject.md").read_text()
    assert "## inject, the kustomize component or the policy" in text
    for words in ("Kubernetes ≥ 1.36", "1.34 and 1.35", "What the tests prove", "kind"):
        assert words in text, words
    assert (ROOT / "scripts" / "policy-on-kind").exists()
    assert "drainhook policy" in (ROOT / "README.md").read_text()
