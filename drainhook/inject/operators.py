"""The serving operators' own pod templates (CONTRACT §4), read in each operator's
API types: where AIBrix's StormService, Kthena's ModelServing and RBG's
RoleBasedGroup (v1alpha2) hold the templates their controllers make Pods from,
which template is an engine's leader and which its workers, and the variable each
operator's controller sets in a worker to its leader's address. And the kinds
that hold no field for the hook, each with the route that exists."""

from __future__ import annotations

from collections.abc import Mapping

from drainhook.hook.config import DEFAULT_GRACE
from drainhook.inject.manifests import Node
from drainhook.inject.pods import Options, Refused, Site, engine_containers, listed, templates
from drainhook.planning.plan import Role

# The variables a worker's controller sets to its leader's address: Kthena's
# createCommonEnvVars (appended after the container's own env: Kubernetes leaves a
# `$(ENTRY_ADDRESS)` there as written, and the hook reads it itself, CONTRACT §4);
# RBG's lwp_env injector on a RoleInstanceSet (the default workload), before the
# user's variables; a role run as a LeaderWorkerSet has LeaderWorkerSet's own.
KTHENA_ENTRY = "ENTRY_ADDRESS"
RBG_LEADER = "RBG_LWP_LEADER_ADDRESS"
RBG_WORKLOAD = "rbg.workloads.x-k8s.io/role-workload-type"
RBG_ON_LWS = "leaderworkerset.x-k8s.io/v1/LeaderWorkerSet"
# One engine across the Pods of an AIBrix pod group, all from one template: a Pod past
# the first serves no HTTP, so its hook would find no engine and let it go at once.
POD_GROUP = (
    "podGroupSize {}: one engine across the group's Pods, all made from this template; "
    "a Pod past the first serves no HTTP, and a hook there would find no engine and let it "
    "go at once, cutting the group's work: add the hook by hand, each Pod's reading the "
    "group's first Pod (DRAINHOOK_HOST, DRAINHOOK_ALLOW_REMOTE=1)"
)
CUSTOM = (
    "a customComponentsPattern: which component leads is the role's own; add each "
    "component's hook by hand (a worker's waits on its leader, as docs/inject.md shows)"
)

# Kinds whose Pods carry an engine and whose resource has no field for the hook: the
# route that exists, said on stderr (CONTRACT §4).
ROUTES = {
    ("kubeai.org", "Model"): "KubeAI makes every model Pod from its own configuration: add "
    "the hook with modelServerPods.jsonPatches in KubeAI's system configuration (its "
    "chart's values), which reaches every model Pod",
    ("workload.serving.volcano.sh", "ModelBooster"): "a ModelBooster (every type, the "
    "disaggregated ones too) has no field for a container's lifecycle: write the "
    "ModelServing it makes and inject that",
    ("kaito.sh", "Workspace"): "a preset Workspace's Pods are KAITO's own: run the engine "
    "from the Workspace's inference.template (a pod template of yours) with the hook in it",
    ("apps.nvidia.com", "NIMService"): "a NIMService (one node or several) has no field for "
    "a container's lifecycle or the Pod's grace: add the hook to the Pods it makes with an "
    "admission policy (a MutatingAdmissionPolicy), or run NIM from a Deployment of yours",
    ("nvidia.com", "DynamoGraphDeployment"): "Dynamo's workers serve Dynamo's own endpoints, "
    "not an engine's HTTP /metrics the hook reads; if a worker or the frontend serves one, "
    "services.<name>.extraPodSpec.mainContainer.lifecycle and extraPodSpec."
    "terminationGracePeriodSeconds carry the hook",
}

# Of those, the kinds named even where no engine shows in the resource (a NIM's image
# is NVIDIA's own, a Dynamo worker runs `dynamo.vllm`, a ModelBooster names a backend
# type).
ALWAYS = {
    ("apps.nvidia.com", "NIMService"),
    ("nvidia.com", "DynamoGraphDeployment"),
    ("workload.serving.volcano.sh", "ModelBooster"),
}


def route(doc: Mapping[str, Node]) -> str | None:
    """The route for a kind inject does not wire, or None."""
    api = str(doc.get("apiVersion", ""))
    group, kind = api.split("/")[0], doc.get("kind")
    if (group, kind) == ("workloads.x-k8s.io", "RoleBasedGroup") and api.endswith("/v1alpha1"):
        return (
            "inject wires RoleBasedGroup v1alpha2: write its v1alpha2 form (RBG converts "
            "between them) and inject that"
        )
    return ROUTES.get((group, str(kind)))


def operator_sites(doc: Mapping[str, Node], options: Options) -> list[Site] | None:
    """The pod specs of an operator's resource, leaders before their workers; None for
    a kind that is no operator's."""
    api = str(doc.get("apiVersion", ""))
    group, kind, spec = api.split("/")[0], doc.get("kind"), doc.get("spec")
    builder = BUILDERS.get((group, str(kind)))
    if builder is None or route(doc) is not None:
        return None
    return builder(spec, options) if isinstance(spec, dict) else []


def _split(name: Node) -> Role | None:
    """A role named prefill or decode is that role (plan's advice for it)."""
    return "prefill" if name == "prefill" else "decode" if name == "decode" else None


def _named(found: list[Site], role: Mapping[str, Node]) -> list[Site]:
    for site in found:
        site.role, site.named = _split(role.get("name")), f"role {role.get('name')}"
    return found


def _follow(lead: Site, workers: list[Site], address: str) -> None:
    lead.leads = bool(workers)
    for w in workers:  # a worker's role is its own args' (the leader's is the leader's)
        w.leader, w.leader_address, w.role = lead, address, None


def _storm_service(spec: dict[str, Node], options: Options) -> list[Site]:
    """AIBrix's StormService: spec.template.spec.roles[].template, a PodTemplateSpec."""
    roleset = spec.get("template")
    inner = roleset.get("spec") if isinstance(roleset, dict) else None
    roles = listed(inner.get("roles")) if isinstance(inner, dict) else []
    out: list[Site] = []
    for i, role in enumerate(roles):
        if isinstance(role, dict):
            path = f"spec.template.spec.roles[{i}].template"
            found = _named(templates([(path, role.get("template"))]), role)
            size = role.get("podGroupSize")
            if isinstance(size, int) and not isinstance(size, bool) and size > 1:
                for site in found:
                    site.not_wired = POD_GROUP.format(size)
            out += found
    return out


def _model_serving(spec: dict[str, Node], options: Options) -> list[Site]:
    """Kthena's ModelServing: spec.template.roles[], an entryTemplate (the engine's
    entry, which serves it) and a workerTemplate (its workers, which wait on it)."""
    group = spec.get("template")
    out: list[Site] = []
    for i, role in enumerate(listed(group.get("roles") if isinstance(group, dict) else None)):
        if not isinstance(role, dict):
            continue
        base = f"spec.template.roles[{i}]"
        entry = _named(templates([(f"{base}.entryTemplate", role.get("entryTemplate"))]), role)
        workers = _named(templates([(f"{base}.workerTemplate", role.get("workerTemplate"))]), role)
        if entry:
            _follow(entry[0], workers, KTHENA_ENTRY)
        out += entry + workers
    return out


def _role_based_group(spec: dict[str, Node], options: Options) -> list[Site]:
    """RBG's RoleBasedGroup v1alpha2: each role's standalonePattern or
    leaderWorkerPattern template, inline or a roleTemplates[] entry by templateRef
    (wired once, for every role that refers to it); a leader-worker role's workers
    get theirs in its workerTemplatePatch, merged over the leader's template."""
    shared: dict[str, Site] = {}
    by_name = {
        t.get("name"): (k, t) for k, t in enumerate(listed(spec.get("roleTemplates")))
        if isinstance(t, dict)
    }  # fmt: skip
    out: list[Site] = []
    for i, role in enumerate(listed(spec.get("roles"))):
        if not isinstance(role, dict):
            continue
        base = f"spec.roles[{i}]"
        custom = role.get("customComponentsPattern")
        if isinstance(custom, dict):
            for j, part in enumerate(listed(custom.get("components"))):
                path = f"{base}.customComponentsPattern.components[{j}].template"
                template = part.get("template") if isinstance(part, dict) else None
                for site in _named(templates([(path, template)]), role):
                    site.not_wired = CUSTOM
                    out.append(site)
        for pattern in ("standalonePattern", "leaderWorkerPattern"):
            held = role.get(pattern)
            if not isinstance(held, dict):
                continue
            lead = _rbg_template(held, f"{base}.{pattern}", role, by_name, shared, out)
            names = [c.get("name") for c, _ in engine_containers(lead, options)] if lead else []
            ref = held.get("templateRef")
            patches = [("templateRef.patch", ref.get("patch") if isinstance(ref, dict) else None)]
            patches += [(k, held.get(k)) for k in ("leaderTemplatePatch", "workerTemplatePatch")]
            for key, patch in patches:
                _no_command(patch, f"{base}.{pattern}.{key}", names)
            if lead is not None and names and pattern == "leaderWorkerPattern":
                _rbg_workers(held, f"{base}.{pattern}", role, lead, names, out)
    return out


def _rbg_template(
    held: dict[str, Node],
    where: str,
    role: Mapping[str, Node],
    by_name: Mapping[Node, tuple[int, dict[str, Node]]],
    shared: dict[str, Site],
    out: list[Site],
) -> Site | None:
    """A pattern's template: its own, or the roleTemplate its templateRef names (the
    same Site for every role that refers to it)."""
    ref = held.get("templateRef")
    if not isinstance(ref, dict):
        found = _named(templates([(f"{where}.template", held.get("template"))]), role)
        out += found
        return found[0] if found else None
    name = ref.get("name")
    if name not in by_name:
        return None
    if str(name) not in shared:
        k, entry = by_name[name]
        found = _named(
            templates([(f"spec.roleTemplates[{k}].template", entry.get("template"))]), role
        )
        if not found:
            return None
        shared[str(name)] = found[0]
        out.append(found[0])
    site = shared[str(name)]
    if site.role != _split(role.get("name")):
        site.role = None  # roles of two kinds share it: the engine's flags say
    return site


def _rbg_workers(
    held: dict[str, Node],
    where: str,
    role: Mapping[str, Node],
    lead: Site,
    names: list[Node],
    out: list[Site],
) -> None:
    """The workers of a leader-worker role: the engine containers of the leader's
    template, by name, in workerTemplatePatch (a strategic merge patch: the worker's
    preStop and env replace or join the leader's)."""
    patch = held.setdefault("workerTemplatePatch", {})
    if not isinstance(patch, dict):
        raise Refused(f"{where}.workerTemplatePatch is not a mapping")
    spec = patch.setdefault("spec", {})
    containers = spec.setdefault("containers", []) if isinstance(spec, dict) else None
    if not isinstance(spec, dict) or not isinstance(containers, list):
        raise Refused(f"{where}.workerTemplatePatch.spec.containers is not a list")
    for name in names:
        if not any(isinstance(c, dict) and c.get("name") == name for c in containers):
            containers.append({"name": name})
    grace = lead.spec.get("terminationGracePeriodSeconds")
    annotations = role.get("annotations")
    on_lws = isinstance(annotations, Mapping) and annotations.get(RBG_WORKLOAD) == RBG_ON_LWS
    worker = Site(
        f"{where}.workerTemplatePatch.spec",
        spec,
        {},
        lead.role,
        default_grace=float(grace) if isinstance(grace, int) else DEFAULT_GRACE,
        main=str(names[0]),
    )
    _follow(lead, [worker], "LWS_LEADER_ADDRESS" if on_lws else RBG_LEADER)
    out.append(worker)


def _no_command(patch: Node, where: str, engines: list[Node]) -> None:
    """A patch that sets an engine container's command or args: the engine its Pods
    run is then the patch's, which inject does not merge: refused, with the fix."""
    spec = patch.get("spec") if isinstance(patch, dict) else None
    for c in listed(spec.get("containers") if isinstance(spec, dict) else None):
        if isinstance(c, dict) and c.get("name") in engines and ("command" in c or "args" in c):
            raise Refused(
                f"{where} sets container {c.get('name')}'s command: the engine its Pods run "
                "is the patch's, which inject does not merge; put the command in the "
                "template, or add the hook by hand"
            )


BUILDERS = {
    ("orchestration.aibrix.ai", "StormService"): _storm_service,
    ("workload.serving.volcano.sh", "ModelServing"): _model_serving,
    ("workloads.x-k8s.io", "RoleBasedGroup"): _role_based_group,
}
