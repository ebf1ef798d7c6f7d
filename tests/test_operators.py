"""`inject` on the serving operators' own resources (issue 60, CONTRACT §4): AIBrix's
StormService, Kthena's ModelServing and RBG's RoleBasedGroup v1alpha2, on the
operators' own public samples (byte for byte, tests/manifests/operators/README.md)
and on shapes of the project's own. Each output validates against the operator's
own CRD (strictly: tests/support/crd.py) and its pod templates against Kubernetes'
PodTemplate, is idempotent and keeps every input line; each wired preStop parses
with `wait`'s own parser. The kinds inject does not wire are named with their route.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import typing

import pytest
import yaml

from drainhook.cli.main import wait
from drainhook.inject.options import Options
from drainhook.inject.run import Injected, inject_texts
from tests.support import crd
from tests.support.injecting import MANIFESTS, containers, prestop, validate
from tests.support.manifests import parse_hook

WAIT = tuple(wait.params)
OPERATORS = MANIFESTS / "operators"
VIA_INIT = Options("init", "registry.example/drainhook:0.1.0", wait_params=WAIT, binary_given=True)
pytestmark = pytest.mark.usefixtures("no_drainhook_env")

# Each file of the operators' and its SHA-256 (a CRD's: once gunzipped), as the README
# there gives them, with where it came from.
SOURCES = dict(
    re.findall(
        r"^\| (\S+) \| .+ \| ([0-9a-f]{64}) \|$", (OPERATORS / "README.md").read_text(), re.M
    )
)
LINE = re.compile(r"^drainhook inject: \S+#\d+ (\S+)/(\S+): (\w+): (.+)$")


def wired(name: str, options: Options = VIA_INIT) -> tuple[list[typing.Any], Injected]:
    """inject over one file of tests/manifests/operators: the documents out, each
    checked against its operator's CRD and its pod templates against Kubernetes'."""
    path = OPERATORS / name
    result = inject_texts([(name, path.read_text())], options)
    docs = [d for d in yaml.safe_load_all(result.stdout) if d is not None]
    for doc in docs:
        if (doc["apiVersion"].split("/")[0], doc["kind"]) in crd.FILES:
            crd.validate(doc)
        validate(doc)
    return docs, result


def said(result: Injected, level: str) -> list[str]:
    return [m.group(4) for line in result.lines if (m := LINE.match(line)) and m[3] == level]


def at(doc: typing.Any, path: str) -> typing.Any:
    for part in re.findall(r"[^.\[\]]+", path):
        doc = doc[int(part)] if part.isdigit() else doc[part]
    return doc


def env_of(container: dict[str, typing.Any]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def hook_params(container: dict[str, typing.Any]) -> dict[str, typing.Any]:
    """The preStop's `wait` parameters, parsed by wait's own parser."""
    command, params, _ = parse_hook(prestop(container))
    assert command == "wait"
    return params


def test_the_samples_and_schemas_are_the_operators_own() -> None:
    """Byte for byte what the releases publish (a CRD: once gunzipped)."""
    assert len(SOURCES) == 10
    for name, digest in SOURCES.items():
        data = (OPERATORS / name).read_bytes()
        data = gzip.decompress(data) if name.endswith(".gz") else data
        assert hashlib.sha256(data).hexdigest() == digest, name


@pytest.mark.parametrize(
    ("bad", "where"),
    [
        ({"spec": {"selector": {}, "template": {"spec": {"roles": [{"name": "a", "x": 1}]}}}},
         "spec.template.spec.roles[0].x: unknown field"),
        ({"spec": {"selector": {}, "template": {"spec": {"roles": [{"replicas": "1"}]}}}},
         "spec.template.spec.roles[0].replicas: expected integer"),
        ({"spec": {"template": {}}}, "spec: missing required ['selector']"),
    ],
)  # fmt: skip
def test_the_crd_check_can_fail(bad: dict[str, typing.Any], where: str) -> None:
    doc = {"apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "StormService", **bad}
    with pytest.raises(crd.SchemaError, match=re.escape(where)):
        crd.validate(doc)


@pytest.mark.parametrize(
    "name", [*(n for n in SOURCES if "/" not in n), "own-shapes.yaml", "own-patches.yaml"]
)
def test_each_output_is_idempotent_and_keeps_every_line(name: str) -> None:
    """The second run changes nothing and says no `injected`; every input line (its
    comments, its quoting) is in the output, in order."""
    _, first = wired(name)
    again = inject_texts([(name, first.stdout)], VIA_INIT)
    assert again.stdout == first.stdout and again.code == first.code
    assert "injected" not in [LINE.match(ln)[3] for ln in again.lines if LINE.match(ln)]  # type: ignore[index]
    out = iter(first.stdout.splitlines())
    missing = [ln for ln in (OPERATORS / name).read_text().splitlines() if ln not in out]
    assert missing == [], missing[:3]


def test_aibrix_roles_each_get_the_hook_and_their_role_advice() -> None:
    """vLLM P/D by role name: the prefill role is warned to linger (its KV is pulled
    after it reads idle); both engines in shell scripts: the flags named, not edited."""
    (doc,), result = wired("aibrix-vllm-1p1d.yaml")
    assert result.code == 0
    roles = at(doc, "spec.template.spec.roles")
    for role in roles:
        (engine,) = role["template"]["spec"]["containers"]
        params = hook_params(engine)
        assert (params["grace"], params["engine"]) == (30.0, "vllm")
        assert role["template"]["spec"]["terminationGracePeriodSeconds"] == 30
        assert prestop(engine)[0] == "/hook/drainhook/drainhook"
    linger = [t for t in said(result, "warning") if "vllm-prefill-linger" in t]
    assert len(linger) == 1 and "roles[0]" in linger[0]
    assert any("write `--enable-server-load-tracking`" in t for t in said(result, "warning"))


def test_aibrix_a_pod_group_is_named_not_wired() -> None:
    """podGroupSize 2 (SGLang over two Pods of one template): a hook in the second Pod
    would find no engine and let it go at once; named, written as it came, exit 0."""
    _, result = wired("aibrix-sglang-tp-1p1d.yaml")
    assert result.code == 0
    assert result.stdout == (OPERATORS / "aibrix-sglang-tp-1p1d.yaml").read_text()
    router, *named = said(result, "skipped")
    assert router.startswith("spec.template.spec.roles[0].template.spec: role routing holds no")
    assert [t.split(":")[0] for t in named] == [
        "spec.template.spec.roles[1].template.spec",
        "spec.template.spec.roles[2].template.spec",
    ]
    assert all("podGroupSize 2: one engine across the group's Pods" in t for t in named)


def test_kthena_entry_drains_and_workers_wait_on_it_by_entry_address() -> None:
    """The entry's hook reads its vLLM on 8080; the worker's reads the entry at
    $(ENTRY_ADDRESS), which Kthena appends after the container's env (so the hook
    resolves it itself), with --exit-zero and a grace past the entry's kill."""
    (doc,), result = wired("kthena-multi-node.yaml")
    assert result.code == 0, result.lines
    role = at(doc, "spec.template.roles[0]")
    entry = containers(role["entryTemplate"]["spec"])["leader"]
    worker = containers(role["workerTemplate"]["spec"])["worker"]
    lead, follow = hook_params(entry), hook_params(worker)
    assert (lead["port"], lead["grace"]) == ((8080,), 30.0)
    assert "DRAINHOOK_HOST" not in env_of(entry)
    assert env_of(worker)["DRAINHOOK_HOST"] == "$(ENTRY_ADDRESS)"
    assert env_of(worker)["DRAINHOOK_ALLOW_REMOTE"] == "1"
    assert (follow["port"], follow["exit_zero"], follow["grace"]) == ((8080,), True, 40.0)
    assert role["workerTemplate"]["spec"]["terminationGracePeriodSeconds"] == 40


def test_kthena_sglang_on_the_pods_ip_is_read_there() -> None:
    """`--host $(POD_IP)` (POD_IP from status.podIP): DRAINHOOK_HOST=$(POD_IP), after
    POD_IP in the env (Kubernetes expands it); P/D roles get SGLang's P/D exit reserve."""
    (doc,), result = wired("kthena-sglang-pd.yaml")
    assert result.code == 0, result.lines
    for i in (0, 1):  # prefill, decode
        spec = at(doc, f"spec.template.roles[{i}].entryTemplate.spec")
        (engine,) = spec["containers"]
        names = [e["name"] for e in engine["env"]]
        assert names.index("DRAINHOOK_HOST") > names.index("POD_IP")
        assert env_of(engine)["DRAINHOOK_HOST"] == "$(POD_IP)"
        assert hook_params(engine)["exit_reserve"] == 20.0
        assert spec["terminationGracePeriodSeconds"] == 45
        assert "DRAINHOOK_ALLOW_REMOTE" not in env_of(engine)  # the Pod's own address


@pytest.mark.parametrize("name", ["rbg-agg-leader-worker.yaml", "rbg-pd-disagg-leader-worker.yaml"])
def test_rbg_leader_worker_puts_the_workers_hook_in_their_patch(name: str) -> None:
    """The shared template is the leader's (its hook reads loopback, --enable-metrics
    added); workerTemplatePatch holds the workers' (by the engine container's name:
    RBG merges it over the template), reading $(RBG_LWP_LEADER_ADDRESS)."""
    docs, result = wired(name)
    assert result.code == 0, result.lines
    doc = docs[-1]
    for role in doc["spec"]["roles"]:
        pattern = role.get("leaderWorkerPattern")
        if pattern is None:
            continue
        lead = containers(pattern["template"]["spec"])["sglang"]
        (worker,) = pattern["workerTemplatePatch"]["spec"]["containers"]
        assert worker["name"] == "sglang" and "command" not in worker
        assert "--enable-metrics" in lead["command"]
        assert env_of(worker)["DRAINHOOK_HOST"] == "$(RBG_LWP_LEADER_ADDRESS)"
        g = pattern["template"]["spec"]["terminationGracePeriodSeconds"]
        wg = pattern["workerTemplatePatch"]["spec"]["terminationGracePeriodSeconds"]
        # A worker is planned as its leader's engine: SGLang's R 10 (sglang-exit), not
        # the 5 an unknown engine gets.
        assert hook_params(worker)["exit_reserve"] == 10.0
        assert wg == g + 5 + 10 and hook_params(worker)["grace"] == wg
        assert hook_params(worker)["exit_zero"] is True
    assert pattern["workerTemplatePatch"]["metadata"] == {"labels": {"role": "worker"}}


def test_rbg_routers_are_named_and_left_alone() -> None:
    docs, result = wired("rbg-pd-disagg-standalone.yaml")
    router = docs[-1]["spec"]["roles"][0]["standalonePattern"]["template"]["spec"]
    assert "lifecycle" not in router["containers"][0]
    assert "terminationGracePeriodSeconds" not in router
    (skipped,) = said(result, "skipped")
    assert "role router holds no engine container (a router, a gateway)" in skipped


def test_rbg_role_templates_lws_roles_and_custom_components() -> None:
    """A roleTemplate shared by two roles is wired once, its leader-worker role's
    workers in that role's patch; a role run as a LeaderWorkerSet reads
    $(LWS_LEADER_ADDRESS); a custom components pattern is named, not wired."""
    docs, result = wired("own-shapes.yaml")
    shared, on_lws, custom, pod_ip = docs
    template = shared["spec"]["roleTemplates"][0]["template"]["spec"]
    assert hook_params(containers(template)["sglang"])["grace"] == 35.0
    batch = shared["spec"]["roles"][1]["leaderWorkerPattern"]
    (worker,) = batch["workerTemplatePatch"]["spec"]["containers"]
    assert env_of(worker)["DRAINHOOK_HOST"] == "$(RBG_LWP_LEADER_ADDRESS)"
    assert "workerTemplatePatch" not in shared["spec"]["roles"][0]["standalonePattern"]
    lws = on_lws["spec"]["roles"][0]["leaderWorkerPattern"]
    (worker,) = lws["workerTemplatePatch"]["spec"]["containers"]
    assert env_of(worker)["DRAINHOOK_HOST"] == "$(LWS_LEADER_ADDRESS)"
    assert hook_params(containers(lws["template"]["spec"])["sglang"])["port"] == (31000,)
    assert custom == yaml.safe_load((OPERATORS / "own-shapes.yaml").read_text().split("---")[2])
    assert any("customComponentsPattern" in t for t in said(result, "skipped"))
    engine = at(pod_ip, "spec.template.spec.roles[0].template.spec.containers[0]")
    assert env_of(engine)["DRAINHOOK_HOST"] == "$(POD_IP)"


@pytest.mark.parametrize(
    ("patch", "where"),
    [("leaderTemplatePatch", "leaderTemplatePatch sets container sglang's command"),
     ("workerTemplatePatch", "workerTemplatePatch sets container sglang's command")],
)  # fmt: skip
def test_rbg_a_patch_that_sets_the_engines_command_is_refused(patch: str, where: str) -> None:
    text = (OPERATORS / "rbg-agg-leader-worker.yaml").read_text()
    doc = list(yaml.safe_load_all(text))[-1]
    pattern = doc["spec"]["roles"][0]["leaderWorkerPattern"]
    pattern[patch]["spec"] = {"containers": [{"name": "sglang", "command": ["ray", "start"]}]}
    source = yaml.safe_dump(doc)
    result = inject_texts([("p.yaml", source)], VIA_INIT)
    assert (result.code, result.stdout) == (1, source)
    assert any(where in t for t in said(result, "refused")), result.lines
    pattern[patch]["spec"]["containers"][0]["name"] = "sidecar"  # not the engine's: wired
    result = inject_texts([("p.yaml", yaml.safe_dump(doc))], VIA_INIT)
    assert result.code == 0 and said(result, "injected"), result.lines


@pytest.mark.parametrize(
    ("host", "fix"),
    [("10.0.0.5", "bind it to 0.0.0.0"), ("$(NODE_IP)", "status.podIP")],
)
def test_an_engine_on_an_address_the_hook_cannot_read_is_refused(host: str, fix: str) -> None:
    """Never wired to read 127.0.0.1 in silence: a literal address, or a variable that
    is not the Pod's IP, is refused with the fix (a Deployment too)."""
    text = (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec:\n"
        "  selector:\n    matchLabels: {app: d}\n  template:\n    metadata:\n"
        "      labels: {app: d}\n    spec:\n      containers:\n        - name: vllm\n"
        "          image: vllm/vllm-openai:v0.18.0\n          env:\n            - name: NODE_IP\n"
        "              valueFrom: {fieldRef: {fieldPath: status.hostIP}}\n"
        f"          args: [m, --host, '{host}']\n"
    )
    result = inject_texts([("d.yaml", text)], VIA_INIT)
    assert (result.code, result.stdout) == (1, text)
    (refused,) = said(result, "refused")
    assert f"the engine listens on --host {host} alone" in refused and fix in refused


@pytest.mark.parametrize(
    ("index", "kind", "route"),
    [(0, "RoleBasedGroup", "write its v1alpha2 form"),
     (1, "ModelBooster", "write the ModelServing it makes and inject that"),
     (2, "NIMService", "admission policy"),
     (3, "DynamoGraphDeployment", "extraPodSpec.mainContainer.lifecycle")],
)  # fmt: skip
def test_a_kind_with_no_field_for_the_hook_names_its_route(
    index: int, kind: str, route: str
) -> None:
    """Written as it came, exit 0, one `skipped` line with the route: never silence."""
    text = (OPERATORS / "own-named.yaml").read_text()
    result = inject_texts([("n.yaml", text)], VIA_INIT)
    assert (result.code, result.stdout) == (0, text)
    lines = [m for ln in result.lines if (m := LINE.match(ln))]
    assert [m[1] for m in lines] == ["RoleBasedGroup", "ModelBooster", "NIMService",
                                     "DynamoGraphDeployment"]  # fmt: skip
    assert lines[index][1] == kind and lines[index][3] == "skipped"
    assert route in lines[index][4]


def test_every_via_wires_the_operators_kinds() -> None:
    """--via image, image-volume and init each bring the binary into every wired pod
    template, a worker's patch included (its volume merged by name)."""
    for via, image, binary in (
        ("image", None, "/usr/local/bin/drainhook"),
        ("image-volume", "registry.example/drainhook:0.1.0", "/opt/drainhook/drainhook"),
        ("init", "registry.example/drainhook:0.1.0", "/hook/drainhook/drainhook"),
    ):
        options = Options(via, image, wait_params=WAIT, binary_given=True)  # type: ignore[arg-type]
        docs, _ = wired("rbg-agg-leader-worker.yaml", options)
        pattern = docs[-1]["spec"]["roles"][0]["leaderWorkerPattern"]
        for spec in (pattern["template"]["spec"], pattern["workerTemplatePatch"]["spec"]):
            assert prestop(containers(spec)["sglang"])[0] == binary, via
            if via != "image":
                assert any(v["name"] in ("drainhook", "hook") for v in spec["volumes"])


def test_readme_names_every_file_here() -> None:
    readme = (OPERATORS / "README.md").read_text()
    files = [p.name for p in OPERATORS.iterdir() if p.suffix == ".yaml"]
    files += [f"crds/{p.name}" for p in (OPERATORS / "crds").iterdir()]
    assert [f for f in files if f not in readme] == []


@pytest.mark.parametrize("name", ["DRAINHOOK_HOST", "DRAINHOOK_ALLOW_REMOTE"])
def test_a_workers_own_hook_variable_is_kept_and_named(name: str) -> None:
    """A Kthena worker that sets the hook's variable itself (its leader behind a
    Service of its own, say): kept as written and named, the other one added; before,
    overwritten without a word. Its value is not echoed."""
    path = OPERATORS / "kthena-multi-node.yaml"
    mine = f"                  - name: {name}\n                    value: mine.example\n"
    text = path.read_text().replace(
        "                    value: $HUGGING_FACE_HUB_TOKEN\n",
        "                    value: $HUGGING_FACE_HUB_TOKEN\n" + mine,
    )
    result = inject_texts([(path.name, text)], VIA_INIT)
    assert result.code == 0, result.lines
    (doc,) = [d for d in yaml.safe_load_all(result.stdout) if d is not None]
    worker = containers(at(doc, "spec.template.roles[0].workerTemplate.spec"))["worker"]
    env = env_of(worker)
    assert env[name] == "mine.example"
    other = {"DRAINHOOK_HOST": "$(ENTRY_ADDRESS)", "DRAINHOOK_ALLOW_REMOTE": "1"}
    assert all(env[k] == v for k, v in other.items() if k != name)
    (kept,) = [w for w in said(result, "warning") if f"{name} kept" in w]
    assert f"container worker: {name} kept as the container sets it" in kept
    assert "mine.example" not in kept
    again = inject_texts([(path.name, result.stdout)], VIA_INIT)
    assert again.stdout == result.stdout  # injecting twice is injecting once


def test_rbg_a_role_whose_template_ref_patch_runs_the_engine_is_wired_in_its_patch() -> None:
    """The hook in the patch's container, the grace in the patch's spec, a leader-
    worker role's workers in its workerTemplatePatch; the roles whose patch runs no
    engine (a frontend, a store) and the shared template left as they are; a
    templateRef to no roleTemplate named."""
    (doc,), result = wired("own-patches.yaml")
    source = yaml.safe_load((OPERATORS / "own-patches.yaml").read_text())
    assert result.code == 0, result.lines
    assert doc["spec"]["roleTemplates"] == source["spec"]["roleTemplates"]
    roles = doc["spec"]["roles"]
    for i in (0, 3, 4):  # the frontend's, the store's, the orphan's: as they came
        assert roles[i] == source["spec"]["roles"][i]
    prefill = roles[1]["standalonePattern"]["templateRef"]["patch"]["spec"]
    assert prefill["terminationGracePeriodSeconds"] == 45  # SGLang prefill: R 20, G >= 45
    assert hook_params(prefill["containers"][0])["exit_reserve"] == 20.0
    decode = roles[2]["leaderWorkerPattern"]
    lead = decode["templateRef"]["patch"]["spec"]
    (worker,) = decode["workerTemplatePatch"]["spec"]["containers"]
    assert hook_params(lead["containers"][0])["grace"] == lead["terminationGracePeriodSeconds"]
    assert env_of(worker)["DRAINHOOK_HOST"] == "$(RBG_LWP_LEADER_ADDRESS)"
    skipped = said(result, "skipped")
    assert any("role frontend holds no engine container" in t for t in skipped)
    assert any("role store holds no engine container" in t for t in skipped)
    assert any("templateRef names roleTemplate missing" in t for t in skipped)


def test_rbg_a_patch_that_runs_no_engine_over_a_wired_template_is_refused_by_role() -> None:
    """Where another role wires the shared template, a role whose patch runs something
    else would get that hook merged in: refused, naming that role, document unchanged."""
    doc = yaml.safe_load((OPERATORS / "own-patches.yaml").read_text())
    base = doc["spec"]["roleTemplates"][0]["template"]["spec"]["containers"][0]
    base["command"] = ["python3", "-m", "sglang.launch_server", "--enable-metrics"]
    doc["spec"]["roles"].append(
        {"name": "plain", "replicas": 1, "standalonePattern": {"templateRef": {"name": "base"}}}
    )
    source = yaml.safe_dump(doc)
    result = inject_texts([("p.yaml", source)], VIA_INIT)
    assert (result.code, result.stdout) == (1, source)
    (refused,) = said(result, "refused")
    assert refused.startswith("role frontend: spec.roles[0].standalonePattern.templateRef.patch")
    assert "runs python3 -m dynamo.frontend" in refused


ROUTED = """\
apiVersion: kaito.sh/v1alpha1
kind: InferenceSet
metadata: {name: phi}
spec: {replicas: 2, template: {inference: {preset: {name: phi-4-mini}}}}
---
apiVersion: kaito.sh/v1alpha1
kind: MultiRoleInference
metadata: {name: pd}
spec: {roles: [{type: prefill}, {type: decode}]}
---
apiVersion: nvidia.com/v1beta1
kind: DynamoGraphDeployment
metadata: {name: dgd}
spec:
  backendFramework: sglang
  components:
    - name: Frontend
      type: frontend
      podTemplate:
        spec:
          containers:
            - {name: main, image: nvcr.io/nvidia/ai-dynamo/sglang-runtime:1.0.0,
               command: [python3, -m, dynamo.frontend]}
    - name: Worker
      type: worker
      podTemplate:
        spec:
          containers:
            - {name: main, image: nvcr.io/nvidia/ai-dynamo/sglang-runtime:1.0.0,
               command: [python3, -m, sglang.launch_server, --model-path, m]}
"""


def test_kaito_sets_and_dynamo_v1beta1_are_named_with_their_own_route() -> None:
    """Named, never passed in silence, exit 0, written as they came; a v1beta1 graph
    with v1beta1's field, and the component that runs SGLang's own server said."""
    result = inject_texts([("r.yaml", ROUTED)], VIA_INIT)
    assert (result.code, result.stdout) == (0, ROUTED)
    lines = [m for ln in result.lines if (m := LINE.match(ln))]
    assert [(m[1], m[3]) for m in lines] == [
        ("InferenceSet", "skipped"), ("MultiRoleInference", "skipped"),
        ("DynamoGraphDeployment", "skipped"),
    ]  # fmt: skip
    assert "an InferenceSet makes Workspaces" in lines[0][4]
    assert "admission policy" in lines[1][4]
    dynamo = lines[2][4]
    assert "spec.components[].podTemplate.spec.containers[].lifecycle" in dynamo
    assert "extraPodSpec" not in dynamo
    assert "spec.components[1].podTemplate.spec.containers[0] runs sglang's own server" in dynamo
    assert "components[0]" not in dynamo.split("own server")[0].split(": ")[-1]


def test_rbg_a_refusal_in_a_shared_template_names_every_role_that_runs_it() -> None:
    """Not the first role of the template alone: each role whose Pods run it."""
    doc = next(yaml.safe_load_all((OPERATORS / "own-shapes.yaml").read_text()))
    doc["spec"]["roleTemplates"][0]["template"]["spec"]["hostNetwork"] = True
    source = yaml.safe_dump(doc)
    result = inject_texts([("s.yaml", source)], VIA_INIT)
    assert (result.code, result.stdout) == (1, source)
    (refused,) = said(result, "refused")
    assert refused.startswith(
        "spec.roleTemplates[0].template.spec (roles chat, batch): hostNetwork"
    )
