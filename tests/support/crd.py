"""The serving operators' own CRDs (tests/manifests/operators/crds/, each the file of
an operator's release, gzipped: README.md there says which), and a document checked
against the OpenAPI schema of its version, strictly, as `kubectl apply
--validate=strict` does: an unknown field (where the schema does not preserve
unknown ones), a wrong type, a value outside an enum or a missing required field
raises SchemaError naming the path."""

from __future__ import annotations

import functools
import gzip
import typing

import yaml

from tests.support.process import ROOT

CRDS = ROOT / "tests" / "manifests" / "operators" / "crds"
FILES = {
    ("orchestration.aibrix.ai", "StormService"): "aibrix-stormservices.yaml.gz",
    ("workload.serving.volcano.sh", "ModelServing"): "kthena-modelservings.yaml.gz",
    ("workloads.x-k8s.io", "RoleBasedGroup"): "rbg-rolebasedgroups.yaml.gz",
}
Schema = dict[str, typing.Any]


class SchemaError(AssertionError):
    """A document its operator's CRD rejects."""


@functools.cache
def crd(group: str, kind: str) -> dict[str, typing.Any]:
    with gzip.open(CRDS / FILES[group, kind], "rt", encoding="utf-8") as f:
        found: dict[str, typing.Any] = yaml.safe_load(f)
    return found


def schema_of(api_version: str, kind: str) -> Schema:
    group, _, version = api_version.partition("/")
    for v in crd(group, kind)["spec"]["versions"]:
        if v["name"] == version and v["served"]:
            found: Schema = v["schema"]["openAPIV3Schema"]
            return found
    raise SchemaError(f"{api_version} {kind}: no served version in its CRD")


def validate(doc: dict[str, typing.Any]) -> None:
    """doc against its operator's CRD; metadata as the API server takes it."""
    body = {k: v for k, v in doc.items() if k != "metadata"}
    check(body, schema_of(doc["apiVersion"], doc["kind"]), "")


TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def check(value: object, schema: Schema, path: str) -> None:
    if schema.get("x-kubernetes-int-or-string"):
        if not isinstance(value, (int, str)) or isinstance(value, bool):
            raise SchemaError(f"{path}: expected an int or a string, got {value!r}")
        return
    kind = schema.get("type")
    if kind is not None:
        ok = isinstance(value, TYPES[kind]) and not (
            kind in ("integer", "number") and isinstance(value, bool)
        )
        if not ok:
            raise SchemaError(f"{path}: expected {kind}, got {value!r}")
    if "enum" in schema and value not in schema["enum"]:
        raise SchemaError(f"{path}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            check(item, schema["items"], f"{path}[{i}]")
    if not isinstance(value, dict):
        return
    missing = [k for k in schema.get("required", []) if k not in value]
    if missing:
        raise SchemaError(f"{path or '.'}: missing required {missing}")
    properties: dict[str, Schema] = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    for key, inner in value.items():
        where = f"{path}.{key}" if path else key
        if key in properties:
            check(inner, properties[key], where)
        elif isinstance(extra, dict):
            check(inner, extra, where)
        elif not schema.get("x-kubernetes-preserve-unknown-fields") and extra is not True:
            raise SchemaError(f"{where}: unknown field")
