"""Kubernetes manifests checked against the `kubernetes` client's models
(generated from the Kubernetes OpenAPI definitions): an unknown field, a wrong
type or a missing required field raises SchemaError naming the path; and a
preStop command parsed by drainhook's own CLI, without running it."""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import kubernetes.client.models as k8s
import yaml

from drainhook.cli.main import cli
from tests.support.process import ROOT

EXAMPLES = ROOT / "examples"


MANIFESTS = sorted(EXAMPLES.glob("*.yaml"))


# The kinds the examples use, by (apiVersion, kind), and the client model of each.
MODELS = {
    ("apps/v1", "Deployment"): "V1Deployment",
    ("apps/v1", "StatefulSet"): "V1StatefulSet",
    ("v1", "Pod"): "V1Pod",
    ("v1", "Service"): "V1Service",
}


PRIMITIVES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "object": (str, int, float, bool, dict, list),  # IntOrString and free-form fields
    "datetime": (str,),
    "date": (str,),
    "bytes": (str,),
}


class SchemaError(AssertionError):
    """A manifest that the Kubernetes object model rejects."""


def load_model(data: object, type_name: str, path: str = "") -> object:
    """Build `type_name` (a client model, `list[...]`, `dict(str, ...)` or a
    primitive) from YAML data, strictly: unknown keys, wrong types and missing
    required fields raise SchemaError naming the path."""
    # The client writes `List[T]` and `Dict[str, T]` (older releases: `list[T]`, `dict(str, T)`).
    if m := re.fullmatch(r"[Ll]ist\[(.+)\]", type_name):
        if not isinstance(data, list):
            raise SchemaError(f"{path}: expected a list, got {type(data).__name__}")
        return [load_model(x, m.group(1), f"{path}[{i}]") for i, x in enumerate(data)]
    if m := re.fullmatch(r"(?:Dict\[str, (.+)\]|dict\(str, (.+)\))", type_name):
        if not isinstance(data, dict):
            raise SchemaError(f"{path}: expected a mapping, got {type(data).__name__}")
        value_type = m.group(1) or m.group(2)
        return {k: load_model(v, value_type, f"{path}.{k}") for k, v in data.items()}
    if type_name in PRIMITIVES:
        ok = isinstance(data, PRIMITIVES[type_name])
        if type_name in ("int", "float") and isinstance(data, bool):
            ok = False
        if not ok:
            raise SchemaError(f"{path}: expected {type_name}, got {data!r}")
        return data
    klass = getattr(k8s, type_name)
    if not isinstance(data, dict):
        raise SchemaError(f"{path}: expected a {type_name} mapping, got {data!r}")
    by_key = {key: attr for attr, key in klass.attribute_map.items()}
    unknown = sorted(set(data) - set(by_key))
    if unknown:
        raise SchemaError(f"{path}: unknown field(s) {unknown} in {type_name}")
    kwargs = {
        by_key[k]: load_model(v, klass.openapi_types[by_key[k]], f"{path}.{k}")
        for k, v in data.items()
    }
    try:
        return klass(**kwargs)  # the client's setters reject a missing required field
    except ValueError as exc:
        raise SchemaError(f"{path}: {exc}") from None


# LeaderWorkerSet is a CRD (leaderworkerset.x-k8s.io/v1) with no model in the
# client: its top level is checked here against the fields of its Go types
# (api/leaderworkerset/v1 in kubernetes-sigs/lws), and its pod templates,
# which are core PodTemplateSpecs, against the client's V1PodTemplateSpec.
LWS_SPEC = {"replicas", "leaderWorkerTemplate", "rolloutStrategy", "startupPolicy", "networkConfig"}


LWS_TEMPLATE = {
    "leaderTemplate",
    "workerTemplate",
    "size",
    "restartPolicy",
    "subGroupPolicy",
    "volumeClaimTemplates",
    "persistentVolumeClaimRetentionPolicy",
}


LWS_RESTART = {"RecreateGroupOnPodRestart", "RecreateGroupAfterStart", "None", "Default"}


def load_lws(doc: dict[str, typing.Any], where: str) -> list[tuple[str, object]]:
    """Check a LeaderWorkerSet; return its pod templates as (path, V1PodTemplateSpec)."""
    if set(doc) - {"apiVersion", "kind", "metadata", "spec"}:
        raise SchemaError(f"{where}: unknown top-level field(s) in {sorted(doc)}")
    load_model(doc.get("metadata"), "V1ObjectMeta", f"{where}.metadata")
    spec = doc["spec"]
    if not isinstance(spec, dict) or set(spec) - LWS_SPEC:
        raise SchemaError(f"{where}.spec: unknown field(s) {sorted(set(spec) - LWS_SPEC)}")
    load_model(spec.get("replicas", 1), "int", f"{where}.spec.replicas")
    if spec.get("startupPolicy", "LeaderCreated") not in ("LeaderCreated", "LeaderReady"):
        raise SchemaError(f"{where}.spec.startupPolicy: {spec['startupPolicy']!r}")
    lwt = spec["leaderWorkerTemplate"]
    if not isinstance(lwt, dict) or set(lwt) - LWS_TEMPLATE:
        raise SchemaError(f"{where}.spec.leaderWorkerTemplate: unknown field(s)")
    if "workerTemplate" not in lwt:
        raise SchemaError(f"{where}.spec.leaderWorkerTemplate.workerTemplate is required")
    load_model(lwt.get("size", 1), "int", f"{where}.spec.leaderWorkerTemplate.size")
    if lwt.get("restartPolicy", "RecreateGroupOnPodRestart") not in LWS_RESTART:
        raise SchemaError(f"{where}.spec.leaderWorkerTemplate.restartPolicy")
    templates = []
    for key in ("leaderTemplate", "workerTemplate"):
        if key in lwt:
            path = f"{where}.spec.leaderWorkerTemplate.{key}"
            templates.append((path, load_model(lwt[key], "V1PodTemplateSpec", path)))
    return templates


@dataclass(frozen=True)
class PodSpec:
    """One pod spec found in a manifest, as the client's V1PodSpec."""

    where: str
    spec: k8s.V1PodSpec
    annotations: dict[str, str]


def load_manifest(path: Path) -> list[PodSpec]:
    """Every document of a manifest, checked; the pod specs it holds."""
    return load_objects(path.read_text(), path.name)


def load_objects(text: str, name: str) -> list[PodSpec]:
    """Every document of a YAML stream of Kubernetes objects, checked; their pod specs."""
    found: list[PodSpec] = []
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    assert docs, f"{name} holds no object"
    for n, doc in enumerate(docs):
        where = f"{name}#{n}"
        assert isinstance(doc, dict), where
        key = (doc.get("apiVersion"), doc.get("kind"))
        if key == ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"):
            templates = load_lws(doc, where)
        elif key in MODELS:
            obj = load_model(doc, MODELS[key], where)
            if key[1] == "Pod":
                templates = [(where, k8s.V1PodTemplateSpec(metadata=obj.metadata, spec=obj.spec))]
            elif key[1] in ("Deployment", "StatefulSet"):
                templates = [(f"{where}.spec.template", obj.spec.template)]
            else:
                templates = []
        else:
            raise SchemaError(f"{where}: no model for apiVersion/kind {key}")
        for tpath, template in templates:
            meta = template.metadata
            annotations = dict(meta.annotations or {}) if meta else {}
            found.append(PodSpec(tpath, template.spec, annotations))
    return found


def containers(pod: PodSpec) -> Iterator[k8s.V1Container]:
    yield from pod.spec.init_containers or []
    yield from pod.spec.containers


def parse_hook(command: list[str]) -> tuple[str, dict[str, typing.Any], click.Context]:
    """Parse a drainhook command line with drainhook's own CLI, without running it."""
    assert Path(command[0]).name == "drainhook", command
    root = click.Context(cli, info_name="drainhook")
    sub = cli.get_command(root, command[1])
    assert sub is not None, f"drainhook has no command {command[1]!r}"
    ctx = sub.make_context(command[1], list(command[2:]), parent=root)
    return command[1], ctx.params, ctx
