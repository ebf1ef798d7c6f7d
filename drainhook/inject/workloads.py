"""Pod specs, and Kubernetes' own workloads and KServe's (CONTRACT §4): a `Site` is one
pod spec, a `Group` an engine's leader and the workers that wait on it; each builder
finds a kind's groups. The operators' builders: drainhook.inject.operators; which
kind has which: drainhook.inject.kinds."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from drainhook.engines.gauges import EngineName
from drainhook.hook.config import DEFAULT_GRACE
from drainhook.inject.containers import listed, recognise, runs
from drainhook.inject.manifests import Node
from drainhook.inject.options import Options, Refused
from drainhook.planning.plan import Role

# KServe's LLMInferenceService presets (its vLLM config templates) set
# terminationGracePeriodSeconds 60; the template a user writes is merged over them.
KSERVE_PRESET_GRACE = 60.0
KSERVE_MAIN = "main"  # the preset's engine container, by name
KNATIVE_WORDS = "Knative rejects `lifecycle` on its containers (no preStop hook can run)"
LWS_LEADER = "LWS_LEADER_ADDRESS"


@dataclass
class Site:
    """One pod spec of a workload, and what the platform says of it."""

    path: str  # where it sits in the document, dotted
    spec: dict[str, Node]
    labels: Mapping[str, Node]
    role: Role | None = None  # the platform's word (KServe's prefill template)
    default_grace: float = DEFAULT_GRACE  # when terminationGracePeriodSeconds is unset
    main: str | None = None  # the engine container's name by the platform's convention
    named: str | None = None  # an operator's role: named when it holds no engine
    not_wired: str | None = None  # why its engine is named, not wired
    worker: bool = False  # a group's worker: its hook waits on the group's leader
    leader_address: str = LWS_LEADER  # a worker's: the variable its platform sets to it


@dataclass
class Group:
    """An engine's leader and its workers, wired together: each worker's hook reads
    the leader's engine. A pod spec alone is a group of one."""

    lead: Site
    workers: list[Site] = field(default_factory=list)


Builder = Callable[[dict[str, Node], Mapping[str, Node], Options], list[Group]]


def led(lead: Site, workers: list[Site], address: str = LWS_LEADER) -> Group:
    """A group: its workers marked as such, reading the leader at `address`."""
    for w in workers:
        w.worker, w.leader_address = True, address
    return Group(lead, workers)


def templates(pairs: Sequence[tuple[str, Node]]) -> list[Site]:
    """The pod templates (`metadata` and `spec`) among (path, value) pairs."""
    out = []
    for path, template in pairs:
        if isinstance(template, dict) and isinstance(template.get("spec"), dict):
            meta = template.get("metadata")
            labels = meta.get("labels") if isinstance(meta, Mapping) else None
            out.append(Site(f"{path}.spec".lstrip("."), template["spec"], labels or {}))
    return out


def alone(sites: list[Site]) -> list[Group]:
    return [Group(s) for s in sites]


def pod(spec: dict[str, Node], doc: Mapping[str, Node], options: Options) -> list[Group]:
    """A Pod: a pod template itself, its metadata and spec."""
    return alone(templates([("", doc)]))


def template(spec: dict[str, Node], doc: Mapping[str, Node], options: Options) -> list[Group]:
    """A workload of one pod template, at spec.template."""
    return alone(templates([("spec.template", spec.get("template"))]))


def leader_worker_set(
    spec: dict[str, Node], doc: Mapping[str, Node], options: Options
) -> list[Group]:
    """LeaderWorkerSet: leaderTemplate and workerTemplate; without a leaderTemplate,
    the worker's is every Pod's."""
    lwt = spec.get("leaderWorkerTemplate")
    if not isinstance(lwt, dict):
        return []
    base = "spec.leaderWorkerTemplate"
    leader = templates([(f"{base}.leaderTemplate", lwt.get("leaderTemplate"))])
    workers = templates([(f"{base}.workerTemplate", lwt.get("workerTemplate"))])
    return [led(leader[0], workers)] if leader else alone(workers)


def llm_inference_service(
    spec: dict[str, Node], doc: Mapping[str, Node], options: Options
) -> list[Group]:
    """KServe's LLMInferenceService (serving.kserve.io/v1alpha1): `template` and
    `worker` are PodSpecs merged over the preset's, whose engine container is
    `main`; `prefill` holds its own pair. Where the CR has no template, one holding
    only `main` is written: the preset's image, command and args stay the preset's."""
    out: list[Group] = []
    prefill = spec.get("prefill")
    pairs: list[tuple[str, dict[str, Node], Role | None]] = [
        ("spec", spec, "decode" if prefill else None)
    ]
    if isinstance(prefill, dict):
        pairs.append(("spec.prefill", prefill, "prefill"))
    for path, part, role in pairs:
        held = part.get("template")
        if held is None:
            held = part["template"] = {"containers": []}
        if not isinstance(held, dict):
            continue
        containers = held.setdefault("containers", [])
        if isinstance(containers, list) and not any(
            isinstance(c, Mapping) and c.get("name") == KSERVE_MAIN for c in containers
        ):
            containers.append({"name": KSERVE_MAIN})
        lead = Site(f"{path}.template", held, {}, role, KSERVE_PRESET_GRACE, KSERVE_MAIN)
        worker = part.get("worker")  # the preset's too: its engine container is `main`
        if not isinstance(worker, dict):
            out.append(Group(lead))
            continue
        out.append(led(lead, [dataclasses.replace(lead, path=f"{path}.worker", spec=worker)]))
    return out


RAW_MODES = ("RawDeployment", "Standard")


def inference_service(
    spec: dict[str, Node], doc: Mapping[str, Node], options: Options
) -> list[Group]:
    """KServe's InferenceService: its predictor is a PodSpec. In raw deployment mode
    KServe makes a Deployment of it; otherwise a Knative Service, which a hook
    cannot run in."""
    predictor = spec.get("predictor")
    if not isinstance(predictor, dict):
        return []
    site = Site("spec.predictor", predictor, {})
    if not engine_containers(site, options):
        return []
    meta = doc.get("metadata") or {}
    annotations = meta.get("annotations") or {} if isinstance(meta, Mapping) else {}
    mode = annotations.get("serving.kserve.io/deploymentMode", "Serverless")
    if mode not in RAW_MODES:
        raise Refused(
            f"an InferenceService in {mode} mode runs as a Knative Service: {KNATIVE_WORDS}; "
            "set the annotation serving.kserve.io/deploymentMode: RawDeployment"
        )
    return [Group(site)]


def ray_worker(site: Site, container: Mapping[str, Node]) -> bool:
    """A worker's container that runs a Ray worker (`ray start --address=$(LWS_LEADER_
    ADDRESS):6379`): part of its leader's vLLM, whose hook it waits on."""
    return site.worker and "ray" in runs(container)[1]


def engine_containers(site: Site, options: Options) -> list[tuple[dict[str, Node], EngineName]]:
    """The engine containers of a pod spec and the engine of each. Init containers
    (native sidecars: routing proxies) are never one."""
    found = []
    for c in listed(site.spec.get("containers")):
        if not isinstance(c, dict):
            continue
        name = c.get("name")
        if options.container is not None and name != options.container:
            continue
        engine = recognise(c) or ("vllm" if site.main is not None and name == site.main else None)
        if engine is None and ray_worker(site, c):
            engine = "vllm"
        if options.engine != "auto" and (engine or options.container is not None):
            engine = options.engine
        if engine is None and options.container is not None:
            raise Refused(
                f"container {name}: neither vLLM nor SGLang by its command, args or image: "
                "say which with --engine"
            )
        if engine is not None:
            found.append((c, engine))
    return found
