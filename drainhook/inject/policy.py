"""`drainhook policy` (CONTRACT §4): the hook wired into every engine Pod of opted-in
namespaces by the apiserver itself, with no server. A MutatingAdmissionPolicy
(admissionregistration.k8s.io/v1, Kubernetes >= 1.36) whose CEL finds the engine
container by inject's own rules (containers.MODULES, the gauge table's names,
wire.UNREADABLE) and writes what inject writes for the same Pod: the preStop,
the Pod's grace by plan's own advice, a worker's variables, the installer; a
ValidatingAdmissionPolicy that warns (never denies) on an engine Pod left
unwired. Every expression is one pass over the Pod's containers."""

from __future__ import annotations

import json
import re
import typing

import yaml

from drainhook.engines.gauges import BY_NAME, default_port
from drainhook.inject.argv import LOOPBACK_REACHES
from drainhook.inject.containers import ENTRY, MODULES, NOT_AN_ENGINE, SHELLS
from drainhook.inject.options import (
    Options,
)
from drainhook.inject.via import arrival
from drainhook.inject.wire import DRAIN_WINDOW, UNREADABLE, WORKER_MARGIN
from drainhook.planning.plan import (
    LOG_FILE,
    SPLIT_ROLES,
    Role,
    apply_advice,
    make_plan,
    wait_config,
)

ROLES: tuple[Role, ...] = ("unified", *SPLIT_ROLES)
LABEL = "drainhook.io/inject"  # a namespace's `enabled`, a Pod's `disabled`
NOTES = "drainhook.io/policy"  # the annotation on a Pod the policy wired
API = "admissionregistration.k8s.io/v1"
NAME = "drainhook"
META = {"name": NAME, "labels": {"app.kubernetes.io/name": "drainhook"}}
WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_LEADER = "LWS_LEADER_ADDRESS"
DEFAULT_GRACE = 30  # what the apiserver defaults terminationGracePeriodSeconds to
# What only `inject` can do, said on every Pod the policy wires (and in docs/inject.md).
ONLY_INJECT = (
    "wired by drainhook's admission policy; inject alone adds the engine flags the hook "
    "reads through (their version gates), reads an image's ENTRYPOINT, a $(VAR) port "
    "and a shell's variables, wires each engine container (this, the first), and "
    "warns"
)
WORKER_NOTE = (
    "; a LeaderWorkerSet worker: it waits on $(LWS_LEADER_ADDRESS) at the engine's "
    "default port, and its grace takes the leader's as this Pod's own (a worker Pod "
    "shows neither)"
)


def _q(text: str) -> str:
    """A CEL string literal."""
    return json.dumps(text)


def _join(c: str) -> str:
    """A container's command and args as one text, blank-bounded (a script's too)."""
    words = f"(has({c}.command) ? {c}.command : []) + (has({c}.args) ? {c}.args : [])"
    return f'(" " + ({words}).join(" ") + " ")'


def _engine_of(c: str) -> str:
    """CEL: the engine a container runs, "" for none (containers.recognise, rendered):
    its program's `NAME serve` or an engine's module; else, where its command shows
    no program (none, or an entry script), the engine its image is named after; and
    on a worker, a Ray worker of its leader's vLLM."""
    by: dict[str, list[str]] = {}
    for name in BY_NAME:
        by.setdefault(BY_NAME[name].name, []).append(rf"[\s/]{re.escape(name)}\s+serve\s")
    for module, started in MODULES:
        by.setdefault(started, []).append(rf"\s-m\s+{re.escape(module)}")
    unread = _q(r"\s-m\s+(" + "|".join(re.escape(m) for m in UNREADABLE) + r")\s")
    text = _join(c)
    shells = "|".join(SHELLS)
    entry = ENTRY.pattern.replace(".*", "[^\\s/]*")
    opaque = _q(rf"^\s(((/usr)?/bin/)?({shells})\s+-[a-z]*c[a-z]*\s+)?(\S*/)?({entry})\s")
    shown = f"(!has({c}.command) || {text}.matches({opaque}))"
    router = _q(r"(^|/)[^/:@]*(" + "|".join(NOT_AN_ENGINE) + r")[^/:@]*([:@]|$)")
    out = '""'
    for engine, patterns in reversed(by.items()):
        named = _q(rf"(^|/)[^/:@]*{engine}[^/:@]*([:@]|$)")
        image = f"({shown} && has({c}.image) && {c}.image.matches({named}) && "
        image += f"!{c}.image.matches({router}))"
        test = f"{text}.matches({_q('|'.join(patterns))})"
        if engine == "vllm":
            ray = f"(variables.worker && {text}.matches({_q(RAY)}))"
            test = f"(({test} && !{text}.matches({unread})) || {ray})"
        out = f"{test} || ({image} && !{text}.matches({_q(ANY_START)})) ? {_q(engine)} : {out}"
    return out


RAY = r"[\s/]ray\s+start\s"
# Any engine's start: a container that starts one is that engine's, not its image's.
ANY_START = r"[\s/](vllm|sglang)\s+serve\s|\s-m\s+(vllm|sglang)\."


def _advice() -> str:
    """CEL: [delta, least, R] for the engine and role, from plan's own advice: G rises
    by delta and to least at least, R is the exit reserve."""
    rows = []
    for engine in ("vllm", "sglang"):
        for role in ROLES:

            def planned(g: float, engine: str = engine, role: Role = role) -> tuple[float, float]:
                plan = make_plan(wait_config(grace=g, engine=engine), role)
                config = apply_advice(plan).plan.config
                return config.grace, config.exit_reserve

            high, reserve = planned(1000.0)
            delta = int(high - 1000)
            least = int(planned(1.0)[0])
            least = least if least > 1 + delta else 0
            rows.append((engine, role, [delta, least, int(reserve)]))
    out = "[0, 0, 5]"
    for engine, role, values in reversed(rows):
        test = f"variables.engine == {_q(engine)} && variables.role == {_q(role)}"
        out = f"{test} ? {json.dumps(values)} : {out}"
    return out


DISAGGREGATION, SPACE = "--disaggregation-mode[= ]", r"\s"


LABELS = "(has(object.metadata.labels) ? object.metadata.labels : {})"


def _found() -> list[dict[str, str]]:
    """The variables that find the engine container and what its preStop holds
    (the validating policy's too)."""
    labels = LABELS
    shells = "|".join(SHELLS)
    shell = rf"((/usr)?/bin/)?({shells})\s+-[a-z]*c[a-z]*\s+"
    sleep = rf"^({shell})?(exec\s+)?((/usr)?/bin/)?sleep\s+[0-9]+s?\s*;?\s*$"
    pre = "variables.ctr.lifecycle.preStop"
    has_pre = "has(variables.ctr.lifecycle) && has(variables.ctr.lifecycle.preStop)"
    command = f"({has_pre} && has({pre}.exec) && has({pre}.exec.command) ? {pre}.exec.command : [])"
    return [
        {
            "name": "worker",
            "expression": f'{labels}.exists(k, k == "{WORKER_INDEX}") && '
            f'{labels}["{WORKER_INDEX}"] != "0"',
        },
        {"name": "engines", "expression": f"object.spec.containers.map(c, {_engine_of('c')})"},
        {"name": "at", "expression": 'variables.engines.map(e, e != "").indexOf(true)'},
        {
            "name": "ctr",
            "expression": "object.spec.containers[variables.at < 0 ? 0 : variables.at]",
        },
        {"name": "engine", "expression": 'variables.at < 0 ? "" : variables.engines[variables.at]'},
        {"name": "text", "expression": _join("variables.ctr")},
        {"name": "command", "expression": command},
        {
            "name": "prestop",
            "expression": (
                f'!({has_pre}) ? "none" : has({pre}.sleep) ? "sleep" : '
                f'variables.command.size() >= 2 && variables.command[0].endsWith("drainhook") '
                f'&& variables.command[1] == "wait" ? "drainhook" : '
                f'variables.command.join(" ").matches({_q(sleep)}) ? "sleep" : "other"'
            ),
        },
        {
            "name": "slept",
            "expression": (
                f'variables.prestop != "sleep" ? 0 : has({pre}.sleep) ? {pre}.sleep.seconds : '
                'int(variables.command.join(" ").find("sleep\\\\s+[0-9]+").find("[0-9]+"))'
            ),
        },
    ]


def _wiring() -> list[dict[str, str]]:
    """The variables that decide the wiring: whether to wire, the role and plan's
    advice for it, the grace, the port, the scheme."""
    labels = LABELS
    kv = {"prefill": "kv_producer", "decode": "kv_consumer"}
    roles = " : ".join(
        f"variables.text.matches({_q(DISAGGREGATION + r + SPACE)}) || "
        f"variables.text.contains({_q(kv[r])}) ? {_q(r)}"
        for r in SPLIT_ROLES
    )
    return [
        {"name": "hostgiven", "expression": _last("--host", r"\S+")},
        {"name": "host", "expression": _host()},
        {
            "name": "wire",
            "expression": (
                'variables.at >= 0 && variables.prestop in ["none", "sleep"] && '
                "!(has(object.spec.hostNetwork) && object.spec.hostNetwork) && "
                '(variables.worker || variables.host != "!") && '
                f"({labels}.exists(k, k == {_q(WORKER_INDEX)}) || "
                f"!variables.text.matches({_q(RANKED)})) && "
                '!(variables.engine == "vllm" && '
                'variables.text.contains(" --disable-log-stats ")) && '
                '!(variables.engine == "sglang" && !variables.text.contains(" --enable-metrics"))'
            ),
        },
        {
            "name": "role",
            "expression": (
                f'{labels}.exists(k, k == "llm-d.ai/role") && '
                f'{labels}["llm-d.ai/role"] in {json.dumps(list(SPLIT_ROLES))} ? '
                f'{labels}["llm-d.ai/role"] : {roles} : "unified"'
            ),
        },
        {"name": "advice", "expression": _advice()},
        {"name": "settle", "expression": "variables.slept > 5 ? variables.slept : 5"},
        {
            "name": "given",
            "expression": (
                "has(object.spec.terminationGracePeriodSeconds) ? "
                f"object.spec.terminationGracePeriodSeconds : {DEFAULT_GRACE}"
            ),
        },
        {"name": "floor", "expression": _floor()},
        {
            "name": "grace",
            "expression": (
                "variables.floor + variables.advice[0] > variables.advice[1] ? "
                "variables.floor + variables.advice[0] : variables.advice[1]"
            ),
        },
        {"name": "portgiven", "expression": _last("--port", r"\S+")},
        {"name": "port", "expression": _port()},
        {"name": "https", "expression": _https()},
    ]


def _https() -> str:
    """CEL: the engine serves TLS (its --ssl-certfile, or a probe that says HTTPS)."""
    probes = [
        f"(has(variables.ctr.{p}) && has(variables.ctr.{p}.httpGet) && "
        f'has(variables.ctr.{p}.httpGet.scheme) && variables.ctr.{p}.httpGet.scheme == "HTTPS")'
        for p in ("readinessProbe", "livenessProbe", "startupProbe")
    ]
    return (
        '!variables.worker && (variables.text.contains(" --ssl-certfile") || '
        + " || ".join(probes)
        + ")"
    )


def _last(flag: str, value: str) -> str:
    """CEL: the last value the engine's text gives flag (argparse's rule), unquoted;
    "" for none."""
    pattern = r"\s" + flag + "[= ]" + value
    found = f"variables.text.findAll({_q(pattern)})"
    last = f"{found}[{found}.size() - 1].substring({len(flag) + 2})"
    unquoted = last + '.replace("\\"", "").replace("\'", "")'
    return f'({found}.size() == 0 ? "" : {unquoted})'


# A rank of an engine over several Pods that serves no HTTP (vLLM's --headless, a
# node rank past 0 or one a variable gives): wired only in a LeaderWorkerSet, whose
# worker index says which Pod leads (a worker waits on it).
RANKED = r"\s--headless\s|\s--node-rank[= ][\"']?([1-9]|\$)"


def _host() -> str:
    """CEL: where the hook reads the engine: "" (loopback reaches it), `$(VAR)` (the
    Pod's IP, from the downward API), "!" (an address the hook cannot read)."""
    given = "variables.hostgiven"
    loopback = json.dumps(list(LOOPBACK_REACHES))
    pod_ip = (
        f'has(variables.ctr.env) && variables.ctr.env.exists(e, {given} == "$(" + e.name + ")" '
        "&& has(e.valueFrom) && has(e.valueFrom.fieldRef) && "
        'e.valueFrom.fieldRef.fieldPath in ["status.podIP", "status.podIPs"])'
    )
    return (
        f'{given} == "" || {given} in {loopback} || {given}.startsWith("127.") ? "" : '
        f'{pod_ip} ? {given} : "!"'
    )


def _floor() -> str:
    """CEL: G before plan's advice: raised for a kept sleep (its S, then the default
    timeline's time to drain, then R) and, on a worker, past its leader's kill."""
    lead = (
        "variables.given + variables.advice[0] > variables.advice[1] ? "
        "variables.given + variables.advice[0] : variables.advice[1]"
    )
    worker = f"({lead}) + {int(WORKER_MARGIN)} + 5"
    kept = f"variables.settle > 5 ? variables.settle + {int(DRAIN_WINDOW)} + 5 : 0"
    floor = f"(variables.worker ? {worker} : {kept})"
    return f"{floor} > variables.given ? {floor} : variables.given"


def _port() -> str:
    """CEL: the engine's --port where it is a number other than its default ("" else;
    a worker reads its leader, whose port it does not show): a number, or a variable
    (`$(NAME)`, `$NAME`, `${NAME}`, `${NAME:-N}`) the container's env gives a literal
    value (else its default N)."""
    name = 'variables.portgiven.find("[A-Za-z_][A-Za-z0-9_]*")'
    env = "(has(variables.ctr.env) ? variables.ctr.env : [])"
    values = f"{env}.filter(e, e.name == {name} && has(e.value))"
    default = 'variables.portgiven.find(":-[0-9]+").replace(":-", "")'
    resolved = (
        'variables.portgiven.matches("^[0-9]+$") ? variables.portgiven : '
        f"{values}.size() > 0 ? {values}[{values}.size() - 1].value : {default}"
    )
    defaults = " || ".join(
        f'(p == "{default_port(e)}" && variables.engine == "{e}")' for e in ("vllm", "sglang")
    )
    number = '!p.matches("^[0-9]+$")'
    return f'variables.worker ? "" : [{resolved}].map(p, {number} || {defaults} ? "" : p)[0]'


def _hook(options: Options) -> str:
    """CEL: the preStop's command, as inject's (prestop_command, then its flags)."""
    return (
        f'[{_q(options.hook_binary)}, "wait", "--grace", string(variables.grace)]'
        ' + (variables.settle > 5 ? ["--settle", string(variables.settle)] : [])'
        f" + (variables.advice[2] != {int(wait_config().exit_reserve)} ? "
        '["--exit-reserve", string(variables.advice[2])] : [])'
        ' + (variables.worker ? [] : ["--engine", variables.engine])'
        ' + (variables.port != "" ? ["--port", variables.port] : [])'
        ' + (variables.https ? ["--scheme", "https"] : [])'
        ' + (variables.worker ? ["--exit-zero"] : [])'
        f' + ["--log-file", {_q(LOG_FILE)}]'
    )


def _patch(path: str, value: str) -> str:
    return f'JSONPatch{{op: "add", path: {path}, value: {value}}}'


def _entries(where: str, at: str, key: str, values: str) -> str:
    """CEL: named entries (the CEL list `values`) added to the list `key` of `where`
    (whose JSON Pointer is the CEL `at`), made where it is missing; one whose name is
    there already is left out."""
    new = f"{values}.filter(v, !(has({where}.{key}) && {where}.{key}.exists(e, e.name == v.name)))"
    one = _patch(f'{at} + "/{key}/-"', "v")
    made = _patch(f'{at} + "/{key}"', new)
    return f"({new}.size() == 0 ? [] : has({where}.{key}) ? {new}.map(v, {one}) : [{made}])"


def _entry(where: str, at: str, key: str, value: dict[str, object]) -> str:
    return _entries(where, at, key, f"[{json.dumps(value)}]")


def _mutation(options: Options) -> str:
    """CEL: the JSON Patch that wires the Pod, [] for one the policy leaves as it is."""
    ctr, base, spec = "variables.ctr", '"/spec/containers/" + string(variables.at)', '"/spec"'
    prestop = f'{{"exec": {{"command": {_hook(options)}}}}}'
    parts = [
        f"(has({ctr}.lifecycle) ? [{_patch(base + ' + ' + _q('/lifecycle/preStop'), prestop)}] : "
        f"[{_patch(base + ' + ' + _q('/lifecycle'), '{' + _q('preStop') + ': ' + prestop + '}')}])",
        f"[{_patch(_q('/spec/terminationGracePeriodSeconds'), 'variables.grace')}]",
    ]
    worker = json.dumps(
        [
            {"name": "DRAINHOOK_HOST", "value": f"$({LWS_LEADER})"},
            {"name": "DRAINHOOK_ALLOW_REMOTE", "value": "1"},
        ]
    )
    own = '[{"name": "DRAINHOOK_HOST", "value": variables.host}]'
    env = f'(variables.worker ? {worker} : variables.host.startsWith("$(") ? {own} : [])'
    parts.append(_entries(ctr, base, "env", env))
    installer, volume, mount = arrival(options)
    for where, at, key, entry in (
        ("object.spec", spec, "initContainers", installer),
        ("object.spec", spec, "volumes", volume),
        (ctr, base, "volumeMounts", mount),
    ):
        parts += [_entry(where, at, key, entry)] if entry is not None else []
    note = f'{_q(ONLY_INJECT)} + (variables.worker ? {_q(WORKER_NOTE)} : "")'
    key = NOTES.replace("~", "~0").replace("/", "~1")
    parts.append(
        f"(has(object.metadata.annotations) ? [{_patch(_q('/metadata/annotations/' + key), note)}] "
        f": [{_patch(_q('/metadata/annotations'), '{' + _q(NOTES) + ': ' + note + '}')}])"
    )
    return "variables.wire ? (\n  " + " +\n  ".join(parts) + "\n) : []"


RULES = [
    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
]
OPTED_OUT = (
    f'!(has(object.metadata.labels) && "{LABEL}" in object.metadata.labels && '
    f'object.metadata.labels["{LABEL}"] == "disabled")'
)
UNWIRED = (
    '"engine container " + variables.ctr.name + " has no drainhook preStop: label its '
    f"namespace {LABEL}=enabled (drainhook policy), or run drainhook inject on its "
    "manifest (a preStop of its own, hostNetwork, SGLang without --enable-metrics, vLLM "
    'with --disable-log-stats, a rank of a group outside a LeaderWorkerSet stay unwired)"'
)


def objects(options: Options) -> list[dict[str, typing.Any]]:
    """The four objects `drainhook policy` writes, in the order to apply them."""
    options.check()
    variables = _found() + _wiring()
    match = {"resourceRules": RULES}
    conditions = [{"name": "not-opted-out", "expression": OPTED_OUT}]
    mutating = {
        "apiVersion": API,
        "kind": "MutatingAdmissionPolicy",
        "metadata": META,
        "spec": {
            "matchConstraints": match,
            "matchConditions": conditions,
            "failurePolicy": "Ignore",
            "reinvocationPolicy": "IfNeeded",
            "variables": variables,
            "mutations": [
                {"patchType": "JSONPatch", "jsonPatch": {"expression": _mutation(options)}}
            ],
        },
    }
    enabled = {"namespaceSelector": {"matchLabels": {LABEL: "enabled"}}}
    not_disabled = {"key": LABEL, "operator": "NotIn", "values": ["disabled"]}
    found = _found()
    validating = {
        "apiVersion": API,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": META,
        "spec": {
            "matchConstraints": match,
            "matchConditions": conditions,
            "failurePolicy": "Ignore",
            "variables": found,
            "validations": [
                {
                    "expression": 'variables.at < 0 || variables.prestop == "drainhook"',
                    "messageExpression": UNWIRED,
                    "reason": "Invalid",
                }
            ],
        },
    }
    return [
        mutating,
        _binding("Mutating", matchResources=enabled),
        validating,
        _binding(
            "Validating",
            validationActions=["Warn", "Audit"],
            matchResources={"namespaceSelector": {"matchExpressions": [not_disabled]}},
        ),
    ]


def _binding(kind: str, **spec: object) -> dict[str, typing.Any]:
    """A policy's binding: the policy it binds, and where."""
    return {
        "apiVersion": API,
        "kind": f"{kind}AdmissionPolicyBinding",
        "metadata": META,
        "spec": {"policyName": NAME, **spec},
    }


class _Dumper(yaml.SafeDumper):
    """Block scalars for the expressions (`|`), plain YAML for the rest."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value or len(value) > 80 else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def render(options: Options) -> str:
    """`drainhook policy`'s stdout: the objects as one YAML stream."""
    docs = [yaml.dump(o, Dumper=_Dumper, sort_keys=False, width=1000) for o in objects(options)]
    head = f"# Made by `drainhook policy --via {options.via} --image {options.image}`.\n"
    return head + "---\n".join(docs)
