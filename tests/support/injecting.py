"""What the inject tests share: the real-shaped manifests, Kubernetes' schemas,
and the parts of a wired container they read."""

from __future__ import annotations

import typing

import kubernetes_validate

from tests.support.process import ROOT

MANIFESTS = ROOT / "tests" / "manifests"
VERSIONS = ("1.33.0", "1.35.0")  # the Kubernetes schemas every output is checked against


def validate(doc: dict[str, typing.Any]) -> None:
    """doc against Kubernetes' schemas (strict), for each version; a CRD's pod
    templates as core PodTemplates (what its own schema embeds)."""
    for version in VERSIONS:
        for obj in schema_objects(doc):
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                raise AssertionError(f"{version}: {str(exc).splitlines()[0]}") from None


# Kinds with pod templates that inject does not wire: it names them on stderr.
SKIPPED_KINDS = (
    "LLMInferenceServiceConfig", "Model", "Workspace", "ModelBooster", "NIMService",
    "DynamoGraphDeployment", "InferencePool",
)  # fmt: skip
# The serving operators' kinds (their own CRDs: tests/support/crd.py): every pod
# template in them, a RoleBasedGroup's patches too, as a core PodTemplate.
OPERATOR_KINDS = ("StormService", "ModelServing", "RoleBasedGroup")


def schema_objects(doc: dict[str, typing.Any]) -> list[dict[str, typing.Any]]:
    api, kind = doc.get("apiVersion", ""), doc.get("kind")
    if kind is None:
        return []  # a chart's values, no object: inject names them and leaves them
    group = api.split("/")[0]
    if api == "v1" and kind == "List":  # kubectl's List: each item against its own
        return [o for item in doc.get("items", []) for o in schema_objects(item)]
    if "." not in group or (group.endswith(".k8s.io") and group != "leaderworkerset.x-k8s.io"):
        return [doc]  # a core or apps kind: its own schema
    spec = doc.get("spec") or {}
    templates: list[dict[str, typing.Any]] = []
    if kind == "LeaderWorkerSet":
        lwt = spec["leaderWorkerTemplate"]
        templates += [lwt[k] for k in ("leaderTemplate", "workerTemplate") if k in lwt]
    elif kind == "LLMInferenceService":
        for part in (spec, spec.get("prefill") or {}):
            templates += [{"spec": part[k]} for k in ("template", "worker") if k in part]
    elif kind == "InferenceService":
        predictor = dict(spec["predictor"])
        templates.append({"spec": predictor})
    elif kind == "Rollout" and group == "argoproj.io":
        templates.append(spec["template"])
    elif kind == "Service" and group == "serving.knative.dev":
        return []  # left unchanged: Knative's RevisionTemplateSpec is not a PodTemplateSpec
    elif kind in OPERATOR_KINDS:
        templates += list(pod_templates(spec))
    elif kind in SKIPPED_KINDS:
        return []  # kinds inject names and leaves unchanged
    else:
        raise AssertionError(f"no schema for {api} {kind}")
    return [
        {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": t}
        for t in templates
    ]


def pod_templates(value: typing.Any) -> typing.Iterator[dict[str, typing.Any]]:
    """Every mapping under value whose `spec` holds a `containers` list."""
    if isinstance(value, dict):
        if isinstance(value.get("spec"), dict) and "containers" in value["spec"]:
            yield value
            return
        for inner in value.values():
            yield from pod_templates(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from pod_templates(inner)


def containers(spec: dict[str, typing.Any]) -> dict[str, dict[str, typing.Any]]:
    return {c["name"]: c for c in spec.get("containers", [])}


def prestop(container: dict[str, typing.Any]) -> list[str]:
    return [str(w) for w in container["lifecycle"]["preStop"]["exec"]["command"]]
