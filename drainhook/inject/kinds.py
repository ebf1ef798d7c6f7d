"""The kinds `inject` knows, in one table (CONTRACT §4): each (API group, kind) is
wired by a builder that finds its groups of pod specs, named with the route a user
takes (a resource with no field for the hook), or refused where it holds an engine.
`inject --help` and docs/inject.md's table of kinds are made from it. A document
of any other kind that holds or names an engine is named, never passed in silence."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from drainhook.engines.gauges import BY_NAME
from drainhook.inject import operators, workloads
from drainhook.inject.containers import engine_image, recognise, runs, starts
from drainhook.inject.manifests import Node
from drainhook.inject.options import Options, Refused
from drainhook.inject.workloads import KNATIVE_WORDS, Builder, Group, engine_containers


@dataclass(frozen=True)
class Kind:
    """One row: a kind, and what inject does with it: `build` wires it (`does` says
    how, in the docs), `refuse` refuses it where it holds an engine; a row with
    neither is named `skipped` with the route its users take (`does`, on stderr and
    in the docs), where an engine shows in it."""

    name: str  # as its users say it
    group: str
    kind: str
    does: str
    build: Builder | None = None
    refuse: str | None = None
    always: bool = False  # named even where no engine shows (its image is the vendor's)
    version: str | None = None  # this API version only
    preset: str | None = None  # a field whose presence means its controller runs an engine


KAITO_OWN = (
    "its Pods are KAITO's own: run the engine from {} inference.template (a pod "
    "template of yours) with the hook in it, or add it to the Pods KAITO makes with an "
    "admission policy (a MutatingAdmissionPolicy)"
)
DYNAMO = (
    "Dynamo's workers serve Dynamo's own endpoints (dynamo.vllm, dynamo.sglang), not an "
    "engine's HTTP /metrics the hook reads; where a component serves one, {0}{1}."
    "lifecycle and {0}terminationGracePeriodSeconds carry the hook"
)

APPS = "the pod template (`spec.template`)"
KINDS: tuple[Kind, ...] = (
    Kind("Pod", "", "Pod", "the Pod itself", workloads.pod),
    Kind("Deployment", "apps", "Deployment", APPS, workloads.template),
    Kind("StatefulSet", "apps", "StatefulSet", APPS, workloads.template),
    Kind("DaemonSet", "apps", "DaemonSet", APPS, workloads.template),
    Kind("Argo Rollout", "argoproj.io", "Rollout", APPS, workloads.template),
    Kind(
        "LeaderWorkerSet",
        "leaderworkerset.x-k8s.io",
        "LeaderWorkerSet",
        "leader and worker templates; workers wait on `$(LWS_LEADER_ADDRESS)`",
        workloads.leader_worker_set,
    ),
    Kind(
        "KServe LLMInferenceService",
        "serving.kserve.io",
        "LLMInferenceService",
        "`template`, `worker` and `prefill`'s pair, merged over the preset (`main`); "
        "workers wait on their leader",
        workloads.llm_inference_service,
    ),
    Kind(
        "KServe InferenceService (raw mode)",
        "serving.kserve.io",
        "InferenceService",
        "the predictor; refused in Serverless mode (a Knative Service)",
        workloads.inference_service,
    ),
    Kind(
        "Knative Service",
        "serving.knative.dev",
        "Service",
        f"refused where it holds an engine: {KNATIVE_WORDS}",
        workloads.template,
        refuse=KNATIVE_WORDS,
    ),
    Kind(
        "AIBrix StormService",
        "orchestration.aibrix.ai",
        "StormService",
        "each role's `template` (`spec.template.spec.roles[]`)",
        operators.storm_service,
    ),
    Kind(
        "Kthena ModelServing",
        "workload.serving.volcano.sh",
        "ModelServing",
        "each role's `entryTemplate`; its `workerTemplate` waits on `$(ENTRY_ADDRESS)`",
        operators.model_serving,
    ),
    Kind(
        "RBG RoleBasedGroup v1alpha1",
        "workloads.x-k8s.io",
        "RoleBasedGroup",
        "inject wires RoleBasedGroup v1alpha2: write its v1alpha2 form (RBG converts "
        "between them) and inject that",
        version="v1alpha1",
    ),
    Kind(
        "RBG RoleBasedGroup v1alpha2",
        "workloads.x-k8s.io",
        "RoleBasedGroup",
        "each role's `standalonePattern` or `leaderWorkerPattern` template, or the "
        "`roleTemplates[]` entry its `templateRef` names (once), or that role's "
        "`templateRef.patch` where it sets the engine's command; a leader-worker role's "
        "workers in its `workerTemplatePatch`, waiting on `$(RBG_LWP_LEADER_ADDRESS)` "
        "(`$(LWS_LEADER_ADDRESS)` for a role run as a LeaderWorkerSet)",
        operators.role_based_group,
    ),
    Kind(
        "KubeAI Model",
        "kubeai.org",
        "Model",
        "KubeAI makes every model Pod from its own configuration: add the hook with "
        "`modelServerPods.jsonPatches` in KubeAI's system configuration (its chart's "
        "values), which reaches every model Pod",
    ),
    Kind(
        "Kthena ModelBooster",
        "workload.serving.volcano.sh",
        "ModelBooster",
        "a ModelBooster (every type, the disaggregated ones too) has no field for a "
        "container's lifecycle: write the ModelServing it makes and inject that",
        always=True,
    ),
    Kind(
        "KAITO Workspace (preset)",
        "kaito.sh",
        "Workspace",
        "a preset Workspace: " + KAITO_OWN.format("the Workspace's"),
        preset="inference",
    ),
    Kind(
        "KAITO InferenceSet",
        "kaito.sh",
        "InferenceSet",
        "an InferenceSet makes Workspaces: " + KAITO_OWN.format("a Workspace's"),
        always=True,
    ),
    Kind(
        "KAITO MultiRoleInference",
        "kaito.sh",
        "MultiRoleInference",
        "a MultiRoleInference's roles: " + KAITO_OWN.format("a Workspace's"),
        always=True,
    ),
    Kind(
        "NVIDIA NIMService",
        "apps.nvidia.com",
        "NIMService",
        "a NIMService (one node or several) has no field for a container's lifecycle or "
        "the Pod's grace: add the hook to the Pods it makes with an admission policy (a "
        "MutatingAdmissionPolicy), or run NIM from a Deployment of yours",
        always=True,
    ),
    Kind(
        "Dynamo DynamoGraphDeployment v1alpha1",
        "nvidia.com",
        "DynamoGraphDeployment",
        DYNAMO.format("services.<name>.extraPodSpec.", "mainContainer"),
        always=True,
        version="v1alpha1",
    ),
    Kind(
        "Dynamo DynamoGraphDeployment v1beta1",
        "nvidia.com",
        "DynamoGraphDeployment",
        DYNAMO.format("spec.components[].podTemplate.spec.", "containers[]"),
        always=True,
        version="v1beta1",
    ),
)


def kind_of(doc: Mapping[str, Node]) -> Kind | None:
    """The table's row for a document: its API version's own, else its kind's."""
    api = str(doc.get("apiVersion", ""))
    group, _, version = api.rpartition("/")
    rows = [k for k in KINDS if (k.group, k.kind) == (group, doc.get("kind"))]
    return next((k for k in rows if k.version == version), None) or next(
        (k for k in rows if k.version is None), None
    )


def groups(doc: Node, options: Options) -> list[Group]:
    """The groups of pod specs of a document of a kind inject wires; none for
    anything else. Raises Refused for a kind it knows and must not touch."""
    if not isinstance(doc, dict) or not isinstance(spec := doc.get("spec"), dict):
        return []
    kind = kind_of(doc)
    if kind is None or kind.build is None:
        return []
    found = kind.build(spec, doc, options)
    sites = [s for g in found for s in (g.lead, *g.workers)]
    if kind.refuse is not None and any(engine_containers(s, options) for s in sites):
        raise Refused(f"a {kind.name}: {kind.refuse}")
    return found


def wired_kind(doc: Node) -> bool:
    """A document of a kind inject wires (a YAML alias in it is refused)."""
    kind = kind_of(doc) if isinstance(doc, Mapping) else None
    return kind is not None and kind.build is not None


def unwired(doc: Mapping[str, Node]) -> str | None:
    """What is said of a document inject wired nothing in: a kind with a route, where
    an engine shows in it; a kind it does not know that holds or names an engine; None
    for anything else."""
    kind = kind_of(doc)
    if kind is not None and kind.build is None:
        held = list(pod_specs(doc)) or list(names_engine(doc))
        if not held and not kind.always:
            return None
        at = f" (an engine at {', '.join(held[:3])})" if held else ""
        own = [f"{p} runs {BY_NAME[e].name}'s own server" for p, e in servers(doc)][:3]
        return f"{doc.get('kind')}: not wired{at}: {kind.does}" + "".join(
            f"; {o}, which the hook reads: wire it there" for o in own
        )
    if kind is not None:
        return None
    made = (
        "its controller's own Pod template, or the workload that runs it"
        if "kind" in doc
        else "the chart's values or templates (or inject what `helm template` renders)"
    )
    if held := list(pod_specs(doc)):
        text = f"containers at {', '.join(held)} not wired: inject does not know this kind "
        text += "(wire the workload it renders, or add the hook by hand)"
    elif named := list(names_engine(doc)):
        text = f"names an engine at {', '.join(named[:3])} but holds no pod spec inject can "
        text += f"wire: wire the hook in {made}"
    else:
        return None
    return f"{doc.get('kind', 'no kind')}: {text}"


def listing() -> str:
    """`inject --help`'s paragraph of kinds."""
    wired = [k.name for k in KINDS if k.build is not None and k.refuse is None]
    named = [k.name for k in KINDS if k.build is None]
    refused = [k.name for k in KINDS if k.refuse is not None]
    return (
        f"Kinds it wires: {', '.join(wired)}, and a List of them. Named with the route "
        f"that exists: {', '.join(named)}. Refused where they hold an engine: "
        f"{', '.join(refused)}."
    )


def table() -> str:
    """docs/inject.md's table of kinds."""
    rows = ["| kind | apiVersion, kind | what inject does |", "|---|---|---|"]
    for k in KINDS:
        api = f"{k.group}/{k.version or '*'}".lstrip("/").replace("*", "v1", not k.group)
        does = k.does if k.build is not None else f"named, not wired: {k.does}"
        rows.append(f"| {k.name} | `{api}` `{k.kind}` | {does} |")
    return "\n".join(rows) + "\n"


def pod_specs(value: Node, path: str = "") -> Iterator[str]:
    """Where a document holds pod specs (a `containers` list of named mappings) or an
    engine's container under a key of its own (a CRD's `mainContainer`, `runner`),
    dotted: what a kind inject does not know may still carry an engine."""
    if isinstance(value, Mapping):
        containers = value.get("containers")
        if isinstance(containers, list) and any(
            isinstance(c, Mapping) and "name" in c for c in containers
        ):
            yield path or "."
            return
        if ("image" in value or "command" in value) and (recognise(value) or engine_image(value)):
            yield path or "."
            return
        for key, inner in value.items():
            yield from pod_specs(inner, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield from pod_specs(inner, f"{path}[{i}]")


def names_engine(value: Node, path: str = "") -> Iterator[str]:
    """Where a document names an engine outside any pod spec, dotted: an engine's image
    under `image` or `repository` (a chart's values), its start in a string, an `engine:`
    naming one (KubeAI's Model), a preset a controller runs on one (KAITO's)."""
    if isinstance(value, Mapping):
        if not path and (kind := kind_of(value)) is not None and kind.preset in value:
            yield str(kind.preset)
        for key, inner in value.items():
            where, text = f"{path}.{key}" if path else str(key), str(inner)
            if key in ("metadata", "selector"):  # labels say what a thing is called, not runs
                continue
            if isinstance(inner, str) and (
                (key in ("image", "repository") and engine_image({"image": text}))
                or (key == "engine" and text.lower() in BY_NAME)
                or starts(text.split())
            ):
                yield where
            else:
                yield from names_engine(inner, where)
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield from names_engine(inner, f"{path}[{i}]")


def servers(value: Node, path: str = "") -> Iterator[tuple[str, str]]:
    """The containers whose command starts an engine's own server, dotted, and its
    engine: what a route's kind may run where the hook can read it."""
    if isinstance(value, Mapping):
        for key, inner in value.items():
            where = f"{path}.{key}" if path else str(key)
            if key == "containers" and isinstance(inner, list):
                for i, c in enumerate(inner):
                    if isinstance(c, Mapping) and (engine := runs(c)[0]) is not None:
                        yield f"{where}[{i}]", engine
            else:
                yield from servers(inner, where)
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield from servers(inner, f"{path}[{i}]")
