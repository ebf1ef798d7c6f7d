"""The serving operators' own pod templates (CONTRACT §4), read in each operator's
API types: where AIBrix's StormService, Kthena's ModelServing and RBG's
RoleBasedGroup (v1alpha2) hold the templates their controllers make Pods from,
which template is an engine's leader and which its workers, and the variable each
operator's controller sets in a worker to its leader's address."""

from __future__ import annotations

from collections.abc import Mapping

from drainhook.hook.config import DEFAULT_GRACE
from drainhook.inject.containers import listed, runs
from drainhook.inject.manifests import Node
from drainhook.inject.options import Options, Refused
from drainhook.inject.workloads import (
    LWS_LEADER,
    Group,
    Site,
    engine_containers,
    led,
    templates,
)
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


def _split(name: Node) -> Role | None:
    """A role named prefill or decode is that role (plan's advice for it)."""
    return "prefill" if name == "prefill" else "decode" if name == "decode" else None


def _named(found: list[Site], role: Mapping[str, Node]) -> list[Site]:
    for site in found:
        site.role, site.named = _split(role.get("name")), f"role {role.get('name')}"
    return found


def _following(lead: Site, workers: list[Site], address: str) -> Group:
    for w in workers:  # a worker's role is its own args' (the leader's is the leader's)
        w.role = None
    return led(lead, workers, address)


def storm_service(spec: dict[str, Node], doc: Mapping[str, Node], options: Options) -> list[Group]:
    """AIBrix's StormService: spec.template.spec.roles[].template, a PodTemplateSpec."""
    roleset = spec.get("template")
    inner = roleset.get("spec") if isinstance(roleset, dict) else None
    out: list[Group] = []
    for i, role in enumerate(listed(inner.get("roles")) if isinstance(inner, dict) else []):
        if isinstance(role, dict):
            path = f"spec.template.spec.roles[{i}].template"
            found = _named(templates([(path, role.get("template"))]), role)
            size = role.get("podGroupSize")
            if isinstance(size, int) and not isinstance(size, bool) and size > 1:
                for site in found:
                    site.not_wired = POD_GROUP.format(size)
            out += [Group(s) for s in found]
    return out


def model_serving(spec: dict[str, Node], doc: Mapping[str, Node], options: Options) -> list[Group]:
    """Kthena's ModelServing: spec.template.roles[], an entryTemplate (the engine's
    entry, which serves it) and a workerTemplate (its workers, which wait on it)."""
    group = spec.get("template")
    out: list[Group] = []
    for i, role in enumerate(listed(group.get("roles") if isinstance(group, dict) else None)):
        if not isinstance(role, dict):
            continue
        base = f"spec.template.roles[{i}]"
        entry = _named(templates([(f"{base}.entryTemplate", role.get("entryTemplate"))]), role)
        workers = _named(templates([(f"{base}.workerTemplate", role.get("workerTemplate"))]), role)
        out += (
            [_following(entry[0], workers, KTHENA_ENTRY)] if entry else [Group(w) for w in workers]
        )
    return out


class _Shared:
    """An RBG document's roleTemplates, by name: each one group, wired once, whose
    workers are those of every leader-worker role that refers to it."""

    def __init__(self, spec: dict[str, Node]) -> None:
        self.held = {
            t.get("name"): (k, t) for k, t in enumerate(listed(spec.get("roleTemplates")))
            if isinstance(t, dict)
        }  # fmt: skip
        self.groups: dict[str, Group] = {}
        self.roles: dict[str, list[str]] = {}
        self.away: list[tuple[Group, str]] = []  # a template, and a role whose patch runs none

    def group(self, name: Node, role: Mapping[str, Node]) -> Group | None:
        """The roleTemplate's group, its roles named; None where the document holds
        no such template."""
        if (found := self.groups.get(str(name))) is None and name in self.held:
            k, entry = self.held[name]
            sites = templates([(f"spec.roleTemplates[{k}].template", entry.get("template"))])
            if not sites:
                return None
            found = self.groups[str(name)] = Group(_named(sites, role)[0])
        if found is not None:
            roles = self.roles.setdefault(str(name), [])
            roles.append(str(role.get("name")))
            found.lead.named = ("role " if len(roles) == 1 else "roles ") + ", ".join(roles)
            if found.lead.role != _split(role.get("name")):
                found.lead.role = None  # roles of two kinds share it: the engine's flags say
        return found


def role_based_group(
    spec: dict[str, Node], doc: Mapping[str, Node], options: Options
) -> list[Group]:
    """RBG's RoleBasedGroup v1alpha2: each role's standalonePattern or
    leaderWorkerPattern template, inline or a roleTemplates[] entry by templateRef
    (wired once, for every role that refers to it; in the role's templateRef patch
    where that sets the engine's command); a leader-worker role's workers get theirs
    in its workerTemplatePatch, merged over the leader's template."""
    shared, out = _Shared(spec), []
    for i, role in enumerate(listed(spec.get("roles"))):
        if not isinstance(role, dict):
            continue
        base = f"spec.roles[{i}]"
        custom = role.get("customComponentsPattern")
        parts = listed(custom.get("components")) if isinstance(custom, dict) else []
        for j, part in enumerate(parts):
            path = f"{base}.customComponentsPattern.components[{j}].template"
            template = part.get("template") if isinstance(part, dict) else None
            for site in _named(templates([(path, template)]), role):
                site.not_wired = CUSTOM
                out.append(Group(site))
        for pattern in ("standalonePattern", "leaderWorkerPattern"):
            if isinstance(held := role.get(pattern), dict):
                group = _rbg_pattern(held, f"{base}.{pattern}", role, shared, options)
                out += [group] if group is not None and all(group is not g for g in out) else []
    for template, why in shared.away:
        if any(template is g for g in out):  # wired for another role, merged into this one's
            raise Refused(why)
    return out


def _rbg_pattern(
    held: dict[str, Node], where: str, role: Mapping[str, Node], shared: _Shared, options: Options
) -> Group | None:
    """One role's pattern, as a group: its own template's, the roleTemplate's it
    refers to, or its templateRef patch's where that sets a container's command."""
    ref = held.get("templateRef")
    if not isinstance(ref, dict):
        found = _named(templates([(f"{where}.template", held.get("template"))]), role)
        group = Group(found[0]) if found else None
    elif (group := shared.group(ref.get("name"), role)) is None:
        named = Site(f"{where}.templateRef", {}, {}, named=f"role {role.get('name')}")
        named.not_wired = f"templateRef names roleTemplate {ref.get('name')}, which this "
        named.not_wired += "document does not hold: inject the document that holds both"
        return Group(named)
    else:
        base = group
        group, away = _patched(ref.get("patch"), f"{where}.templateRef.patch", role, base, options)
        shared.away += [(base, away)] if away else []
    names = [c.get("name") for c, _ in engine_containers(group.lead, options)] if group else []
    for key in ("leaderTemplatePatch", "workerTemplatePatch"):
        _no_command(held.get(key), f"{where}.{key}", names, role)
    if group is not None and names and where.endswith("leaderWorkerPattern"):
        worker = _rbg_worker(held, where, group.lead, names)
        group.workers += _following(group.lead, [worker], _rbg_address(role)).workers
    return group


def _patched(
    patch: Node, where: str, role: Mapping[str, Node], group: Group, options: Options
) -> tuple[Group, str | None]:
    """The role's own group where its templateRef patch sets a container's command or
    args (its Pods run the patch's program, strategic merge replacing the lists): the
    hook in the patch's container, the grace in the patch's spec; a patch that runs no
    engine leaves the role alone. With why the role refuses the template's hook, where
    its patch replaces that engine with another program."""
    spec = patch.get("spec") if isinstance(patch, dict) else None
    ran = [
        c
        for c in listed(spec.get("containers") if isinstance(spec, dict) else None)
        if isinstance(c, dict) and ("command" in c or "args" in c)
    ]
    if not ran or not isinstance(spec, dict):
        return group, None
    grace = group.lead.spec.get("terminationGracePeriodSeconds")
    site = _named([Site(f"{where}.spec", spec, {})], role)[0]
    site.default_grace = float(grace) if isinstance(grace, int) else DEFAULT_GRACE
    engines = [c.get("name") for c, _ in engine_containers(group.lead, options)]
    replaced = [c for c in ran if c.get("name") in engines]
    if engine_containers(site, options) or not replaced:
        return Group(site), None
    program = ", ".join(runs(replaced[0])[1]) or "a program inject cannot read"
    return Group(site), (
        f"role {role.get('name')}: {where} runs {program} in container "
        f"{replaced[0].get('name')}, whose template's engine inject wires for another "
        "role: that hook would hold this role's Pods; give the role a template of its own"
    )


def _rbg_address(role: Mapping[str, Node]) -> str:
    """The variable a role's workers hold their leader's address in."""
    annotations = role.get("annotations")
    on_lws = isinstance(annotations, Mapping) and annotations.get(RBG_WORKLOAD) == RBG_ON_LWS
    return LWS_LEADER if on_lws else RBG_LEADER


def _rbg_worker(held: dict[str, Node], where: str, lead: Site, names: list[Node]) -> Site:
    """A leader-worker role's workers: the engine containers of the leader's template,
    by name, in workerTemplatePatch (a strategic merge patch: the worker's preStop and
    env replace or join the leader's)."""
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
    return Site(
        f"{where}.workerTemplatePatch.spec",
        spec,
        {},
        lead.role,
        default_grace=float(grace) if isinstance(grace, int) else DEFAULT_GRACE,
        main=str(names[0]),
    )


def _no_command(patch: Node, where: str, engines: list[Node], role: Mapping[str, Node]) -> None:
    """A leader's or workers' patch that sets an engine container's command or args:
    the engine its Pods run is then the patch's, which inject does not merge: refused,
    naming the role, with the fix."""
    spec = patch.get("spec") if isinstance(patch, dict) else None
    for c in listed(spec.get("containers") if isinstance(spec, dict) else None):
        if isinstance(c, dict) and c.get("name") in engines and ("command" in c or "args" in c):
            raise Refused(
                f"role {role.get('name')}: {where} sets container {c.get('name')}'s command: "
                "the engine its Pods run is the patch's, which inject does not merge; put "
                "the command in the template, or add the hook by hand"
            )
