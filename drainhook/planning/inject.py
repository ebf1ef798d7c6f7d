"""`drainhook inject`: the hook wired into a user's own manifests (CONTRACT §4).

A text transform, as `linkerd inject` is: YAML documents in (files, directories,
stdin), every document out, in order. Each workload it recognises gets, in each
engine container, the preStop `wait` that `plan` would write for it, from the
same rules (drainhook.planning.plan: `make_plan`, `apply_advice`, `prestop_command`,
`engine_flags`), and the engine's own flags that advice names. What it cannot do
it refuses: the document is written unchanged and one line on stderr says why.

Layout: the options (`Options`) and the messages (`Message`); where the pod
specs of each kind sit (`sites`); which container is the engine (`recognise`);
where its flags can be written (`argv_of`: a list, or the tail of a shell
script); the hook of one container (`_wire`); one document (`inject_document`);
the command (`run_inject`).

Imported only by the `inject` command, lazily: the hook's path never loads it
nor the YAML library (tests/test_import_closure.py).
"""

from __future__ import annotations

import copy
import itertools
import re
import shlex
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import click
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark
from ruamel.yaml.scalarstring import DoubleQuotedScalarString, FoldedScalarString
from ruamel.yaml.tokens import CommentToken

from drainhook import exits
from drainhook.engines.gauges import default_port
from drainhook.errors import DrainhookError, UsageError
from drainhook.hook.config import DEFAULT_GRACE, DEFAULT_SETTLE
from drainhook.numfmt import number
from drainhook.planning import manifests
from drainhook.planning.manifests import Document, insert_before, mapping, sequence
from drainhook.planning.plan import (
    DEFAULT_BINARY,
    EngineFlag,
    apply_advice,
    engine_flags,
    make_plan,
    prestop_command,
    wait_config,
)

VIA = ("image", "image-volume", "init")
ENGINES = ("auto", "vllm", "sglang")
# The kubelet throws a hook's output away (its event says only "PreStopHook
# failed"): the container's PID 1's stdout puts the hook's lines in `kubectl logs`.
LOG_FILE = "/proc/1/fd/1"
# Where the Dockerfile's default image (FROM scratch) holds the directory build:
# /drainhook/drainhook/ (the launcher `drainhook`, its bootloader, _internal/).
IMAGE_BUILD_DIR = "drainhook/drainhook"
IMAGE_LAUNCHER = "/" + IMAGE_BUILD_DIR + "/drainhook"
# --via image-volume: that image as a volume, its build directory mounted alone
# (subPath: a directory, as image volumes allow; containerd >= 2.2, CRI-O >= 1.33).
VOLUME_NAME = "drainhook"
VOLUME_MOUNT = "/opt/drainhook"
# --via init: `drainhook install /hook` fills an emptyDir; install's own layout
# puts the launcher at DIR/drainhook/drainhook.
INIT_NAME = "install-drainhook"
INIT_VOLUME = "hook"
INIT_MOUNT = "/hook"
INIT_SIZE = "64Mi"
INSTALL_UID = 65534  # nobody: the installer runs as a user no image needs to name
# The time to drain between S and D in the default timeline (G 30 - S 5 - R 5): what
# a pod spec keeps after a long sleep is kept as its settle.
DRAIN_WINDOW = DEFAULT_GRACE - DEFAULT_SETTLE - wait_config().exit_reserve
# A LeaderWorkerSet worker's hook waits on its leader (examples/lws-vllm.yaml):
# its deadline falls this long after the leader's kill, so a worker holding a
# stage of the model outlives whatever the leader still finishes.
WORKER_MARGIN = 5.0
# KServe's LLMInferenceService presets (its vLLM config templates) set
# terminationGracePeriodSeconds 60; the template a user writes is merged over them.
KSERVE_PRESET_GRACE = 60.0
KSERVE_MAIN = "main"  # the preset's engine container, by name
# Routing proxies, gateways and schedulers whose images carry an engine's name.
NOT_AN_ENGINE = ("router", "proxy", "sidecar", "gateway", "scheduler", "epp")
SHELLS = ("sh", "bash", "dash", "ash")
# The timeline's flags of `wait`: `plan` renders them (prestop_command); the
# hook's other flags (--port, --annotations, --exit-zero, ...) are kept as given.
TIMELINE = ("grace", "settle", "exit_reserve", "interval", "read_timeout", "confirm",
            "linger", "max_wait", "stall_after", "engine")  # fmt: skip
# A preStop `sleep` (exec or the kubelet's sleep action) is what inject replaces.
_SLEEP = re.compile(r"^(?:exec\s+)?(?:/usr)?(?:/bin/)?sleep\s+(\d+(?:\.\d+)?)s?\s*;?\s*$")


@dataclass(frozen=True)
class Options:
    """How `inject` wires the hook: built once from the command line."""

    via: str = "image"
    image: str | None = None
    binary: str = DEFAULT_BINARY  # --via image: where the engine image holds it
    container: str | None = None
    engine: str = "auto"
    engine_version: str | None = None  # X.Y: what the image tags cannot say
    # `wait`'s own click parameters, handed in by the command line (planning sits
    # below cli/): an existing hook's flags are read by them (parse_hook).
    wait_params: tuple[click.Parameter, ...] = ()

    def check(self) -> None:
        if self.via not in VIA:
            raise UsageError(f"--via must be one of {', '.join(VIA)}, not {self.via!r}")
        if self.engine not in ENGINES:
            raise UsageError(f"--engine must be one of {', '.join(ENGINES)}, not {self.engine!r}")
        if self.via != "image" and not self.image:
            raise UsageError(f"--via {self.via} needs --image REF (drainhook's image)")
        if self.via == "image" and self.image:
            raise UsageError("--image is for --via image-volume or init")
        if self.via != "image" and self.binary != DEFAULT_BINARY:
            raise UsageError(f"--binary is for --via image (--via {self.via} puts the hook itself)")
        if not self.wait_params:
            raise DrainhookError("inject was not handed wait's options")
        if self.engine_version is not None and _version(self.engine_version) is None:
            raise UsageError(f"--engine-version must be X.Y (0.18), not {self.engine_version!r}")
        if not self.binary.startswith("/"):
            raise UsageError(
                f"--binary must be an absolute path (an exec hook), not {self.binary!r}"
            )

    @property
    def hook_binary(self) -> str:
        if self.via == "image-volume":
            return f"{VOLUME_MOUNT}/drainhook"
        if self.via == "init":
            return f"{INIT_MOUNT}/drainhook/drainhook"
        return self.binary


@dataclass(frozen=True)
class Message:
    """One line on stderr about one document: `refused` (written unchanged),
    `injected`, `replaced` (a sleep hook), `changed` (a value other than the one
    given), `warning` (advice inject could not apply), `skipped` (pod specs of a
    kind inject does not know, written unchanged)."""

    where: str  # "SOURCE#N KIND/NAME"
    level: str
    text: str

    def line(self) -> str:
        return " ".join(f"drainhook inject: {self.where}: {self.level}: {self.text}".split())


class Refused(DrainhookError):
    """A document inject must leave as it is; the message says why."""

    exit_code = exits.INJECT_REFUSED


# -- where the pod specs are --------------------------------------------------------


@dataclass
class Site:
    """One pod spec of a workload, and what the platform says of it."""

    path: str  # where it sits in the document, dotted
    spec: CommentedMap
    labels: Mapping[str, typing.Any]
    role: str | None = None  # the platform's word (KServe's prefill template)
    leader: Site | None = None  # a worker's: it waits on this leader's engine
    default_grace: float = DEFAULT_GRACE  # when terminationGracePeriodSeconds is unset
    main: str | None = None  # the engine container's name by the platform's convention
    # What wiring its engine left (for a worker of it): grace, port, engine.
    wired: dict[str, typing.Any] = field(default_factory=dict)


APPS = ("Deployment", "StatefulSet", "DaemonSet")
KNATIVE_WORDS = "Knative rejects `lifecycle` on its containers (no preStop hook can run)"


def sites(doc: typing.Any, options: Options) -> list[Site]:
    """The pod specs of a workload inject knows, leaders before their workers; none
    for anything else. Raises Refused for a kind it knows and must not touch. A
    `List` (what `kubectl get -o yaml` prints) is each of its items."""
    if not isinstance(doc, CommentedMap):
        return []
    api, kind, spec = str(doc.get("apiVersion", "")), doc.get("kind"), doc.get("spec")
    group = api.split("/")[0]
    if api == "v1" and kind == "List" and isinstance(doc.get("items"), list):
        found = []
        for i, item in enumerate(doc["items"]):
            for site in sites(item, options):
                site.path = f"items[{i}].{site.path}"
                found.append(site)
        return found
    if not isinstance(spec, CommentedMap):
        return []
    if api == "v1" and kind == "Pod":
        meta = doc.get("metadata")
        labels = meta.get("labels") if isinstance(meta, Mapping) else None
        return [Site("spec", spec, labels or {})]
    if (group == "apps" and kind in APPS) or (group == "argoproj.io" and kind == "Rollout"):
        return _templates([("spec.template", spec.get("template"))])
    if group == "leaderworkerset.x-k8s.io" and kind == "LeaderWorkerSet":
        lwt = spec.get("leaderWorkerTemplate")
        if not isinstance(lwt, CommentedMap):
            return []
        base = "spec.leaderWorkerTemplate"
        leader = _templates([(f"{base}.leaderTemplate", lwt.get("leaderTemplate"))])
        workers = _templates([(f"{base}.workerTemplate", lwt.get("workerTemplate"))])
        for w in workers:  # without a leaderTemplate, the worker's is every Pod's
            w.leader = leader[0] if leader else None
        return leader + workers
    if group == "serving.kserve.io" and kind == "LLMInferenceService":
        return _llm_inference_service(spec)
    if group == "serving.kserve.io" and kind == "InferenceService":
        return _inference_service(doc, spec, options)
    if group == "serving.knative.dev" and kind == "Service":
        template = spec.get("template")
        found = _templates([("spec.template", template)])
        if any(_engine_containers(s, options) for s in found):
            raise Refused(f"a Knative Service: {KNATIVE_WORDS}")
    return []


# The kinds `sites` reads, by (API group, kind): a document of another kind that
# holds pod specs is named on stderr instead of passing by in silence.
KNOWN = {("apps", k) for k in APPS} | {
    ("", "Pod"), ("", "List"), ("argoproj.io", "Rollout"),
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"),
    ("serving.kserve.io", "LLMInferenceService"), ("serving.kserve.io", "InferenceService"),
    ("serving.knative.dev", "Service"),
}  # fmt: skip


def _known(doc: Mapping[str, typing.Any]) -> bool:
    api = str(doc.get("apiVersion", ""))
    return (api.split("/")[0] if "/" in api else "", doc.get("kind")) in KNOWN


# A template that parsed as YAML: a whole value that is an envsubst `${VAR}`, or a
# Helm action anywhere in a value (`{{ .Values.x }}`, `{{- include ...`), or a key
# that is no scalar (Helm's `{{ x }}` read as a flow mapping). A shell's `${VAR}`
# inside a script, Kubernetes' own `$(VAR)` and a chat template's `{{ messages }}`
# are none of these.
_TEMPLATE = re.compile(
    r"^\s*\$\{[^}]*\}\s*$|\{\{-?\s*(?:[.$]|(?:include|toYaml|template|tpl|if|"
    r"range|with|end|default|quote|required|printf|lookup)\b)"
)


def templated(value: typing.Any, path: str = "") -> Iterator[str]:
    """Where a parsed document holds template expressions (CONTRACT §4: it is
    unrendered): `path: text` of each."""
    if isinstance(value, Mapping):
        for key, inner in value.items():
            where = f"{path}.{key}" if path else str(key)
            if not isinstance(key, (str, int, float, bool)) or (
                isinstance(key, str) and _TEMPLATE.search(key)
            ):
                yield f"{path or '.'}: a key {_short(key)}"  # Helm's `{{ x }}` as a flow map
                continue
            yield from templated(inner, where)
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield from templated(inner, f"{path}[{i}]")
    elif isinstance(value, str) and _TEMPLATE.search(value):
        yield f"{path}: {_short(value)}"


def _short(value: typing.Any) -> str:
    text = " ".join(str(_plain(value)).split())
    return text if len(text) <= 40 else text[:37] + "..."


def pod_specs(value: typing.Any, path: str = "") -> Iterator[str]:
    """Where a document holds pod specs (a `containers` list of named mappings),
    dotted: what a kind inject does not know may still carry an engine."""
    if isinstance(value, Mapping):
        containers = value.get("containers")
        if isinstance(containers, list) and any(
            isinstance(c, Mapping) and "name" in c for c in containers
        ):
            yield path or "."
            return
        for key, inner in value.items():
            yield from pod_specs(inner, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield from pod_specs(inner, f"{path}[{i}]")


def _templates(pairs: Sequence[tuple[str, typing.Any]]) -> list[Site]:
    out = []
    for path, template in pairs:
        if isinstance(template, CommentedMap) and isinstance(template.get("spec"), CommentedMap):
            meta = template.get("metadata")
            labels = meta.get("labels") if isinstance(meta, Mapping) else None
            out.append(Site(f"{path}.spec", template["spec"], labels or {}))
    return out


def _llm_inference_service(spec: CommentedMap) -> list[Site]:
    """KServe's LLMInferenceService (serving.kserve.io/v1alpha1): `template` and
    `worker` are PodSpecs merged over the preset's, whose engine container is
    `main`; `prefill` holds its own pair. Where the CR has no template, one holding
    only `main` is written: the preset's image, command and args stay the preset's."""
    out: list[Site] = []
    prefill = spec.get("prefill")
    pairs: list[tuple[str, CommentedMap, str]] = [("spec", spec, "decode" if prefill else "")]
    if isinstance(prefill, CommentedMap):
        pairs.append(("spec.prefill", prefill, "prefill"))
    for path, part, role in pairs:
        template = part.get("template")
        if template is None:
            template = part["template"] = mapping(("containers", sequence([])))
        if not isinstance(template, CommentedMap):
            continue
        containers = template.setdefault("containers", sequence([]))
        if isinstance(containers, list) and not any(
            isinstance(c, Mapping) and c.get("name") == KSERVE_MAIN for c in containers
        ):
            containers.append(mapping(("name", KSERVE_MAIN)))
        lead = Site(f"{path}.template", template, {}, role or None, None, KSERVE_PRESET_GRACE,
                    KSERVE_MAIN)  # fmt: skip
        out.append(lead)
        worker = part.get("worker")
        if isinstance(worker, CommentedMap):
            out.append(Site(f"{path}.worker", worker, {}, role or None, lead, KSERVE_PRESET_GRACE,
                            KSERVE_MAIN))  # fmt: skip
    return out


RAW_MODES = ("RawDeployment", "Standard")


def _inference_service(doc: CommentedMap, spec: CommentedMap, options: Options) -> list[Site]:
    """KServe's InferenceService: its predictor is a PodSpec. In raw deployment mode
    KServe makes a Deployment of it; otherwise a Knative Service, which a hook
    cannot run in."""
    predictor = spec.get("predictor")
    if not isinstance(predictor, CommentedMap):
        return []
    site = Site("spec.predictor", predictor, {})
    if not _engine_containers(site, options):
        return []
    meta = doc.get("metadata") or {}
    annotations = meta.get("annotations") or {} if isinstance(meta, Mapping) else {}
    mode = annotations.get("serving.kserve.io/deploymentMode", "Serverless")
    if mode not in RAW_MODES:
        raise Refused(
            f"an InferenceService in {mode} mode runs as a Knative Service: {KNATIVE_WORDS}; "
            "set the annotation serving.kserve.io/deploymentMode: RawDeployment"
        )
    return [site]


# -- which container is the engine --------------------------------------------------


def _words(container: Mapping[str, typing.Any]) -> list[str]:
    """The container's command and args as words, a shell script's split as the
    shell would (roughly: a script shlex cannot split is split on blanks)."""
    words: list[str] = []
    for part in ("command", "args"):
        for w in container.get(part) or []:
            text = str(w)
            if any(ch.isspace() for ch in text):
                try:
                    words += shlex.split(text, comments=True)
                except ValueError:
                    words += text.split()
            else:
                words.append(text)
    return words


def _image_name(image: str) -> tuple[str, str]:
    """The repository's last component and the tag of an image reference."""
    ref = image.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    name, _, tag = last.partition(":")
    return name.lower(), tag


def recognise(container: Mapping[str, typing.Any]) -> str | None:
    """vllm or sglang, from the container's command and args (`vllm serve`,
    `python -m vllm.entrypoints.openai.api_server`, `python -m sglang.launch_server`,
    `sglang serve`), else from its image's name; None for anything else."""
    words = _words(container)
    for w, after in itertools.pairwise([*words, ""]):
        base = w.rsplit("/", 1)[-1]
        if base in ("vllm", "sglang") and after == "serve":
            return base
        if w == "-m" and after.startswith("vllm.entrypoints."):
            return "vllm"
        if w == "-m" and after.startswith("sglang.launch_server"):
            return "sglang"
    name, _ = _image_name(str(container.get("image", "")))
    if any(x in name for x in NOT_AN_ENGINE):
        return None
    for engine in ("sglang", "vllm"):
        if engine in name:
            return engine
    return None


def _version(text: str) -> tuple[int, int] | None:
    m = re.match(r"v?(\d+)\.(\d+)(?:\.\d+)?(?:[-+.].*)?$", text.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


def image_version(container: Mapping[str, typing.Any], engine: str) -> tuple[int, int] | None:
    """The engine's version from an image named after the engine (vllm-openai:v0.18.0,
    lmsysorg/sglang:v0.5.23); None when the image says nothing of it."""
    name, tag = _image_name(str(container.get("image", "")))
    if engine not in name:
        return None  # another project's version (llm-d's images carry their own)
    m = re.match(r"v?(\d+)\.(\d+)", tag)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _engine_containers(site: Site, options: Options) -> list[tuple[CommentedMap, str]]:
    """The engine containers of a pod spec and the engine of each. Init containers
    (native sidecars: routing proxies) are never one."""
    found = []
    for c in site.spec.get("containers") or []:
        if not isinstance(c, CommentedMap):
            continue
        name = c.get("name")
        if options.container is not None and name != options.container:
            continue
        engine = recognise(c) or ("vllm" if site.main is not None and name == site.main else None)
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


# -- where the engine's flags can be written ----------------------------------------


class Argv:
    """The engine's command line as `inject` can edit it: a list of arguments (the
    container's args, or an exec-form command), or the last command of a shell
    script (`sh -c`), which must be the engine's own."""

    def __init__(self, seq: list[typing.Any], index: int | None = None) -> None:
        self.seq = seq
        self.index = index  # the script's place in seq, for a shell script

    @property
    def script(self) -> str:
        assert self.index is not None
        return str(self.seq[self.index])

    @property
    def joined(self) -> str:
        """The script with its lines continued by `\\` joined, as the shell reads it."""
        return re.sub(r"\\\r?\n", " ", self.script)

    def value(self, flag: str) -> str | bool | None:
        """The value given to flag (the last one: argparse's rule), True for a switch
        that is there, None when it is not."""
        words = shlex.split(self.joined) if self.index is not None else [str(w) for w in self.seq]
        found: str | bool | None = None
        for i, w in enumerate(words):
            if w == flag:
                found = (
                    words[i + 1]
                    if i + 1 < len(words) and not words[i + 1].startswith("--")
                    else True
                )
            elif w.startswith(flag + "="):
                found = w.split("=", 1)[1]
        return found

    def set(self, flag: str, value: str) -> None:
        """Give every occurrence of flag this value."""
        if self.index is None:
            for i, w in enumerate(list(self.seq)):
                if str(w) == flag and i + 1 < len(self.seq):
                    self.seq[i + 1] = DoubleQuotedScalarString(value) if _numeric(value) else value
                elif str(w).startswith(flag + "="):
                    self.seq[i] = f"{flag}={value}"
            return
        pattern = re.compile(rf"(?<!\S){re.escape(flag)}(=|\s+)[^\s;&|]+")
        self._rewrite(pattern.sub(lambda m: f"{flag}{m.group(1)}{value}", self.script))

    def can_append(self) -> bool:
        if self.index is None:
            return True
        tail = re.split(r"&&|\|\||;|\n", self.joined.rstrip())[-1]
        try:
            words = shlex.split(tail)
        except ValueError:
            return False
        if words[:1] == ["exec"]:
            words = words[1:]
        if any(w in ("&", "|") or w.startswith((">", "<", "2>")) for w in words):
            return False
        return recognise({"command": words}) is not None

    def append(self, args: Sequence[str]) -> None:
        if self.index is None:
            self.seq.extend(DoubleQuotedScalarString(a) if _numeric(a) else a for a in args)
            return
        text = self.script
        body = text.rstrip()
        self._rewrite(body + " " + " ".join(shlex.quote(a) for a in args) + text[len(body) :])
        folds = getattr(self.seq[self.index], "fold_pos", None)
        if isinstance(folds, list):  # a folded script: the added flags on a line of their own
            folds.append(len(body))

    def _rewrite(self, text: str) -> None:
        assert self.index is not None
        old = self.seq[self.index]
        new: typing.Any = type(old)(text) if type(old) is not str else text
        if isinstance(old, FoldedScalarString):  # the folds stay where they were
            new.fold_pos = list(getattr(old, "fold_pos", []))
        self.seq[self.index] = new


def _script_option(seq: typing.Any) -> int | None:
    """Where a shell's `-c` is in seq, alone or among other short options (`bash -lc`,
    `sh -ec`, `-exc`): the script is the next word."""
    if not isinstance(seq, list):
        return None
    for i, w in enumerate(seq):
        if re.fullmatch(r"-[a-zA-Z]*c[a-zA-Z]*", str(w)):
            return i
    return None


def _numeric(value: str) -> bool:
    return re.fullmatch(r"-?\d+(\.\d+)?", value) is not None


def argv_of(container: CommentedMap) -> Argv | None:
    """Where the engine's flags go, or None where they cannot be written: no
    command and no args (the image's own, which args would replace)."""
    command, args = container.get("command"), container.get("args")
    if isinstance(command, list) and command and str(command[0]).rsplit("/", 1)[-1] in SHELLS:
        for seq in (command, args):
            at = _script_option(seq)
            if at is not None and at + 1 < len(seq):
                return Argv(seq, at + 1)
        if isinstance(args, list) and args and _script_option(command) is not None:
            return Argv(args, 0)
        return None
    if isinstance(args, list):
        return Argv(args)
    if isinstance(command, list) and command:
        return Argv(command)
    return None


def _port(argv: Argv | None, container: Mapping[str, typing.Any]) -> int | None:
    """The engine's --port; `$(NAME)` is Kubernetes' expansion of the container's
    own env, read where NAME has a literal value there."""
    value = argv.value("--port") if argv is not None else None
    if isinstance(value, str) and (m := re.fullmatch(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", value)):
        env = container.get("env")
        found = [e.get("value") for e in env or [] if isinstance(e, Mapping)
                 and e.get("name") == m.group(1)] if isinstance(env, list) else []  # fmt: skip
        value = str(found[-1]) if found and found[-1] is not None else None
    return int(value) if isinstance(value, str) and value.isdigit() else None


def _role(site: Site, argv: Argv | None) -> str:
    """unified, prefill or decode: the platform's word (KServe's prefill template,
    llm-d's llm-d.ai/role label), else the engine's own flags."""
    if site.role:
        return site.role
    label = str(site.labels.get("llm-d.ai/role", ""))
    if label in ("prefill", "decode"):
        return label
    if argv is None:
        return "unified"
    mode = argv.value("--disaggregation-mode")
    if mode in ("prefill", "decode"):
        return str(mode)
    kv = argv.value("--kv-transfer-config")
    if isinstance(kv, str):
        if '"kv_producer"' in kv:
            return "prefill"
        if '"kv_consumer"' in kv:
            return "decode"
    return "unified"


def _count(argv: Argv, *flags: str) -> int | None:
    for flag in flags:
        value = argv.value(flag)
        if isinstance(value, str) and value.isdigit():
            return int(value)
    return None


def _switch(argv: Argv, *flags: str) -> bool:
    return any(argv.value(flag) not in (None, "false", "False") for flag in flags)


def api_servers(engine: str, argv: Argv | None) -> int | None:
    """vLLM's API-server processes from its flags, by vLLM 0.32's own defaulting
    (vllm/entrypoints/cli/serve.py): --api-server-count when given; else 1 with
    an external or multi-port load balancer, --data-parallel-size-local with a
    hybrid one, --data-parallel-size otherwise. None: not vLLM, no flags to read,
    or --headless (no API server at all)."""
    if engine != "vllm" or argv is None or _switch(argv, "--headless"):
        return None
    given = _count(argv, "--api-server-count", "-asc")
    if given is not None:
        return given
    external = _switch(argv, "--data-parallel-external-lb", "-dpe") or (
        argv.value("--data-parallel-rank") is not None or argv.value("-dpn") is not None
    )
    if external or _switch(argv, "--data-parallel-multi-port-external-lb"):
        return 1
    hybrid = _switch(argv, "--data-parallel-hybrid-lb", "-dph") or (
        argv.value("--data-parallel-start-rank") is not None or argv.value("-dpr") is not None
    )
    if hybrid:
        return _count(argv, "--data-parallel-size-local", "-dpl") or 1
    return _count(argv, "--data-parallel-size", "-dp") or 1


# -- the existing hook --------------------------------------------------------------


def _wait_options(params: Sequence[click.Parameter]) -> dict[str, click.Option]:
    """`wait`'s options by each of their flags, from the command itself."""
    return {
        opt: p
        for p in params
        if isinstance(p, click.Option)
        for opt in (*p.opts, *p.secondary_opts)
    }


@dataclass
class Hook:
    """A drainhook `wait` preStop as given: the timeline's values, and every other
    flag in its order (kept as they are)."""

    timeline: dict[str, typing.Any]
    others: list[list[str]]  # each flag with its value, as written


def parse_hook(command: Sequence[str], where: str, params: Sequence[click.Parameter]) -> Hook:
    """The flags of an existing `drainhook wait` command line, read by `wait`'s own
    options (`params`); one inject cannot read refuses the document."""
    options = _wait_options(params)
    timeline: dict[str, typing.Any] = {}
    others: list[list[str]] = []
    words = [str(w) for w in command[2:]]
    i = 0
    while i < len(words):
        word = words[i]
        flag, eq, inline = word.partition("=")
        p = options.get(flag)
        if p is None:
            raise Refused(f"{where}: its drainhook hook has {word!r}, which `wait` does not take")
        if p.is_flag or p.count:
            given = [word]
            value: str | None = None
        elif eq:
            given, value = [word], inline
        elif i + 1 < len(words):
            given, value = [word, words[i + 1]], words[i + 1]
            i += 1
        else:
            raise Refused(f"{where}: its drainhook hook has {flag} without a value")
        i += 1
        if p.name in TIMELINE and value is not None:
            try:
                timeline[p.name] = p.type.convert(value, p, None)
            except click.BadParameter as exc:
                raise Refused(f"{where}: its drainhook hook's {flag}: {exc.message}") from None
        else:
            others.append(given)
    return Hook(timeline, others)


def _prestop(container: CommentedMap) -> tuple[str, typing.Any]:
    """What the container's preStop is: none, drainhook, sleep, or other; and its
    command (drainhook's), seconds (a sleep's) or a description (other's)."""
    lifecycle = container.get("lifecycle")
    prestop = lifecycle.get("preStop") if isinstance(lifecycle, Mapping) else None
    if not prestop:
        return "none", None
    if isinstance(prestop, Mapping) and isinstance(prestop.get("sleep"), Mapping):
        return "sleep", prestop["sleep"].get("seconds")
    exe = prestop.get("exec") if isinstance(prestop, Mapping) else None
    command = [str(w) for w in (exe.get("command") or [])] if isinstance(exe, Mapping) else []
    if len(command) >= 2 and command[0].rsplit("/", 1)[-1] == "drainhook" and command[1] == "wait":
        return "drainhook", command
    text = " ".join(command[2:]) if command[:1] and command[0].rsplit("/", 1)[-1] in SHELLS else ""
    text = text if _script_option(command[1:2]) == 0 else " ".join(command)
    if m := _SLEEP.match(text.strip()):
        return "sleep", m.group(1)
    kind = next(iter(prestop), "?") if isinstance(prestop, Mapping) else "?"
    shown = " ".join(command) if command else kind
    return "other", shown


# -- one container's hook -----------------------------------------------------------


@dataclass
class Wiring:
    """What inject does to one engine container, decided before anything is written."""

    container: CommentedMap
    engine: str
    hook: Hook
    argv: Argv | None
    role: str
    port: int | None  # the engine's --port, when it is not the engine's default
    prestop: str  # what was there: none, drainhook, sleep
    slept: typing.Any = None
    worker: bool = False  # a LeaderWorkerSet worker's: it waits on its leader
    api_servers: int | None = None  # vLLM's API-server processes, from its flags
    https: bool = False  # the engine serves TLS: the hook reads it as its clients do


def _decide(
    site: Site, container: CommentedMap, engine: str, params: Sequence[click.Parameter]
) -> Wiring:
    name = container.get("name")
    kind, what = _prestop(container)
    if kind == "other":
        raise Refused(
            f"container {name}: its preStop runs {what}: inject replaces only a sleep or "
            "its own hook"
        )
    hook = parse_hook(what, f"container {name}", params) if kind == "drainhook" else Hook({}, [])
    if kind == "sleep" and _numeric(str(what)) and float(what) > DEFAULT_SETTLE:
        # A sleep longer than the default settle is a measured propagation time (a
        # load balancer's): it stays, as the settle (CONTRACT §4).
        hook.timeline["settle"] = float(what)
    argv = argv_of(container)
    port = _port(argv, container)
    port = port if port is not None and port != default_port(engine) else None
    return Wiring(container, engine, hook, argv, _role(site, argv), port, kind,
                  what if kind == "sleep" else None,
                  api_servers=api_servers(engine, argv),
                  https=serves_tls(container, argv))  # fmt: skip


def serves_tls(container: Mapping[str, typing.Any], argv: Argv | None) -> bool:
    """Whether the engine serves https: its own flags (vLLM's and SGLang's
    --ssl-certfile) or a probe of the container that says HTTPS (KServe's)."""
    if argv is not None and argv.value("--ssl-certfile") not in (None, False):
        return True
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        spec = container.get(probe)
        get = spec.get("httpGet") if isinstance(spec, Mapping) else None
        if isinstance(get, Mapping) and str(get.get("scheme", "")).upper() == "HTTPS":
            return True
    return False


def _config_for(w: Wiring, grace: float, binary: str) -> typing.Any:
    values = {k: v for k, v in w.hook.timeline.items() if k in TIMELINE}
    values["grace"] = grace
    # A worker's hook reads its leader's engine and recognises it (`auto`): the
    # engine's own advice (its flags) is the leader's to follow.
    values["engine"] = w.hook.timeline.get("engine", "auto") if w.worker else w.engine
    try:
        config = wait_config(**values)
        return apply_advice(make_plan(config, w.role, binary, api_servers=w.api_servers))
    except DrainhookError as exc:
        raise Refused(f"container {w.container.get('name')}: its hook's values: {exc}") from None


def _command(w: Wiring, applied: typing.Any, binary: str, worker: bool) -> list[str]:
    """The new preStop: plan's own rendering of the timeline, then the hook's other
    flags as they were, the engine's port, a worker's --exit-zero, and --log-file."""
    args = list(prestop_command(applied.plan.config, binary))
    given = {words[0].partition("=")[0] for words in w.hook.others}
    for words in w.hook.others:
        args += words
    if w.port is not None and not given & {"--port", "--url", "--annotations"}:
        args += ["--port", str(w.port)]
    if w.https and not given & {"--scheme", "--url", "--annotations"}:
        args += ["--scheme", "https"]  # a loopback listener: read without verification
    if worker and "--exit-zero" not in given:
        args.append("--exit-zero")
    if "--log-file" not in given:
        args += ["--log-file", LOG_FILE]
    return args


def _set_prestop(container: CommentedMap, command: Sequence[str]) -> None:
    seq = sequence([DoubleQuotedScalarString(a) if _numeric(a) else a for a in command])
    lifecycle = container.get("lifecycle")
    if not isinstance(lifecycle, CommentedMap):
        lifecycle = mapping()
        insert_before(container, "lifecycle", lifecycle, ("resources", "volumeMounts"))
    prestop = lifecycle.get("preStop")
    if isinstance(prestop, CommentedMap) and isinstance(prestop.get("exec"), CommentedMap):
        for key in [k for k in prestop if k != "exec"]:
            del prestop[key]
        exe = prestop["exec"]
        if _plain(exe.get("command")) == _plain(seq):
            return  # as it is, in its own style
        # A comment after the old command (its last line's, and any comment lines
        # below it) is kept after the new one's last word, and so are the comments
        # among the old command's words (the words they spoke of are gone).
        inner = _comment_lines(exe.get("command"))
        after = exe.ca.items.pop("command", None)
        eol = after[2] if after and len(after) > 2 else None
        if eol is not None or inner:
            text = str(eol.value) if eol is not None else "\n"
            text += "" if text.endswith("\n") else "\n"
            text += "".join(" " * column + line + "\n" for column, line in inner)
            column = eol.column if eol is not None else inner[0][0]
            seq.ca.items[len(seq) - 1] = [CommentToken(text, CommentMark(column), None), None]
        exe["command"] = seq
    else:
        lifecycle["preStop"] = mapping(("exec", mapping(("command", seq))))


def _comment_lines(old: typing.Any) -> list[tuple[int, str]]:
    """The comment lines among an old command's words (before its first, after each),
    in order, with the column each stood at."""
    if not isinstance(old, CommentedSeq):
        return []
    tokens = list(old.ca.comment[1] or []) if old.ca.comment and len(old.ca.comment) > 1 else []
    for i in sorted(old.ca.items):
        tokens += [t for t in old.ca.items[i][:1] if t is not None]
    lines: list[tuple[int, str]] = []
    for token in tokens:
        column = getattr(token, "column", 0) or 0
        lines += [(column, ln.strip()) for ln in str(token.value).splitlines()
                  if ln.strip().startswith("#")]  # fmt: skip
    return lines


def _upsert(items: CommentedSeq, value: CommentedMap) -> None:
    """Put value in a list of named entries: replacing the one of its name."""
    for i, item in enumerate(items):
        if isinstance(item, Mapping) and item.get("name") == value["name"]:
            if _plain(item) != _plain(value):
                items[i] = value
            return
    items.append(value)


def _list(m: CommentedMap, key: str, before: Sequence[str] = ()) -> CommentedSeq:
    items = m.get(key)
    if not isinstance(items, CommentedSeq):
        items = sequence([])
        insert_before(m, key, items, before)
    return items


def _bring_binary(spec: CommentedMap, container: CommentedMap, options: Options) -> None:
    """Make the hook's binary reach the container, by --via; what another --via put
    there before (an image volume, the installer) is taken away."""
    if options.via != "image-volume":
        _drop(spec, "volumes", VOLUME_NAME, lambda v: "image" in v)
        _drop(container, "volumeMounts", VOLUME_NAME, lambda m: m.get("mountPath") == VOLUME_MOUNT)
    if options.via != "init" and _drop(spec, "initContainers", INIT_NAME, lambda c: True):
        _drop(spec, "volumes", INIT_VOLUME, lambda v: "emptyDir" in v)
        _drop(container, "volumeMounts", INIT_VOLUME, lambda m: m.get("mountPath") == INIT_MOUNT)
    if options.via == "image-volume":
        _upsert(
            _list(spec, "volumes"),
            mapping(("name", VOLUME_NAME),
                    ("image", mapping(("reference", options.image),
                                      ("pullPolicy", "IfNotPresent")))),
        )  # fmt: skip
        _upsert(
            _list(container, "volumeMounts"),
            mapping(("name", VOLUME_NAME), ("mountPath", VOLUME_MOUNT),
                    ("subPath", IMAGE_BUILD_DIR), ("readOnly", True)),
        )  # fmt: skip
    elif options.via == "init":
        _upsert(
            _list(spec, "initContainers", ("containers",)),
            mapping(("name", INIT_NAME), ("image", options.image),
                    ("command", sequence([IMAGE_LAUNCHER, "install", INIT_MOUNT])),
                    ("securityContext", _restricted()),
                    ("volumeMounts", sequence([mapping(("name", INIT_VOLUME),
                                                       ("mountPath", INIT_MOUNT))]))),
        )  # fmt: skip
        _upsert(
            _list(spec, "volumes"),
            mapping(("name", INIT_VOLUME), ("emptyDir", mapping(("sizeLimit", INIT_SIZE)))),
        )
        _upsert(
            _list(container, "volumeMounts"),
            mapping(("name", INIT_VOLUME), ("mountPath", INIT_MOUNT), ("readOnly", True)),
        )


def _restricted() -> CommentedMap:
    """The installer's securityContext: what Pod Security's `restricted` level asks
    (and `runAsNonRoot` with it: drainhook's image names no user, so one is given).
    `install` writes into the emptyDir, which the kubelet makes world-writable."""
    return mapping(
        ("runAsNonRoot", True),
        ("runAsUser", INSTALL_UID),
        ("allowPrivilegeEscalation", False),
        ("capabilities", mapping(("drop", sequence(["ALL"])))),
        ("seccompProfile", mapping(("type", "RuntimeDefault"))),
    )


def _drop(
    m: CommentedMap, key: str, name: str, ours: typing.Callable[[Mapping[str, typing.Any]], bool]
) -> bool:
    """Take the entry `name` out of m[key] when it is ours (a user's entry of that
    name stays); the list goes when it is left empty. Whether one was taken."""
    items = m.get(key)
    if not isinstance(items, list):
        return False
    for i, item in enumerate(items):
        if isinstance(item, Mapping) and item.get("name") == name and ours(item):
            del items[i]
            if not items:
                del m[key]
            return True
    return False


def _engine_flag_edits(w: Wiring, flag: EngineFlag) -> tuple[str, list[str] | str] | None:
    """What flag needs done to this engine's command line: ('set', value), ('add',
    args), or None (already so)."""
    have = w.argv.value(flag.flag) if w.argv is not None else None
    if have is None and not flag.add:
        return None
    if flag.value is None:
        return None if have is not None else ("add", flag.args)
    if isinstance(have, str):
        try:
            given = float(have)
        except ValueError:
            given = None
        if given is not None and flag.ceiling and given <= float(flag.value):
            return None
        return None if have == flag.value else ("set", flag.value)
    return ("add", flag.args)


def _apply_engine_flags(
    w: Wiring, applied: typing.Any, say: typing.Callable[[str, str], None], given: str | None
) -> None:
    """The engine flags the advice names, written where the engine's version is known
    to take them (CONTRACT §4: a flag an older engine rejects crash-loops the Pod):
    `given` (--engine-version), else the image's tag; a flag already there is only
    ever changed, which needs no version."""
    name = w.container.get("name")
    version = _version(given) if given is not None else image_version(w.container, w.engine)
    for flag in engine_flags(applied.plan):
        edit = _engine_flag_edits(w, flag)
        if edit is None:
            continue
        if flag.since is not None and edit[0] == "add" and version is None:
            say("warning", f"container {name}: {' '.join(flag.args)} not written ({flag.why}): "
                f"the image's tag names no {w.engine} version; add it yourself if it is "
                f"{w.engine} {flag.since} or newer, or give --engine-version")  # fmt: skip
            continue
        if flag.since is not None and version is not None:
            since = tuple(int(x) for x in flag.since.split("."))
            if version < since:
                say("warning", f"container {name}: {flag.flag} not written: the image's "
                    f"{w.engine} {version[0]}.{version[1]} is older than {flag.since}")  # fmt: skip
                continue
        if w.argv is None or (edit[0] == "add" and not w.argv.can_append()):
            where = (
                "its command is not one inject can extend"
                if w.argv
                else "it has no command or args here"
            )
            needed = flag.needed or edit[0] == "set"
            message = f"container {name}: needs {' '.join(flag.args)} ({flag.why}); {where}"
            if needed:
                raise Refused(message)
            say("warning", f"{message}: add it yourself")
            continue
        if edit[0] == "set":
            old = w.argv.value(flag.flag)
            w.argv.set(flag.flag, str(edit[1]))
            say("changed", f"container {name}: {flag.flag} {old} -> {edit[1]} ({flag.why})")
        else:
            w.argv.append(list(edit[1]))
            say("changed", f"container {name}: added {' '.join(flag.args)} ({flag.why})")


# -- one document -------------------------------------------------------------------


def _plain(value: typing.Any) -> typing.Any:
    """A parsed value as plain dicts, lists and scalars (order-blind mappings)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    return value


def _grace(spec: CommentedMap, default: float) -> float:
    given = spec.get("terminationGracePeriodSeconds")
    return (
        float(given) if isinstance(given, (int, float)) and not isinstance(given, bool) else default
    )


def _set_grace(spec: CommentedMap, grace: float) -> None:
    value = int(grace)
    if "terminationGracePeriodSeconds" in spec:
        spec["terminationGracePeriodSeconds"] = value
    else:
        spec.insert(0, "terminationGracePeriodSeconds", value)


@dataclass
class Outcome:
    """One document's output: its text, whether inject changed or refused it, and
    what it says of it on stderr."""

    text: str
    changed: bool
    refused: bool
    messages: list[Message]


def _describe(doc: Document) -> str:
    data = doc.data
    if isinstance(data, Mapping):
        meta = data.get("metadata")
        name = meta.get("name") if isinstance(meta, Mapping) else None
        return f"{doc.where} {data.get('kind', '?')}/{name or '?'}"
    return doc.where


def inject_document(doc: Document, options: Options) -> Outcome:
    """One document, wired: its new text, or its own text when nothing changes or
    when it is refused (one `refused` message then says why)."""
    where = _describe(doc)
    messages: list[Message] = []

    def say(level: str, text: str) -> None:
        messages.append(Message(where, level, text))

    found_templates = list(templated(doc.data))
    if found_templates:
        shown = "; ".join(found_templates[:3]) + ("; ..." if len(found_templates) > 3 else "")
        return Outcome(doc.text, False, True, [Message(where, "refused", (
            f"unrendered: template expressions ({shown}); run inject on what the template "
            "renders (helm template, kustomize build, envsubst)"))])  # fmt: skip
    before = _plain(doc.data)
    work = copy.deepcopy(doc.data)
    try:
        found = sites(work, options)
        injected = []
        for site in found:
            names = _wire_site(site, options, say)
            injected += [f"{site.path}: {n}" for n in names]
    except Refused as exc:
        return Outcome(doc.text, False, True, [Message(where, "refused", str(exc))])
    if not found and isinstance(doc.data, Mapping) and not _known(doc.data):
        held = list(pod_specs(doc.data))
        if held:
            kind = doc.data.get("kind", "?")
            messages = [Message(where, "skipped", f"{kind}: pod specs at {', '.join(held)} "
                                "not wired: inject does not know this kind (wire the "
                                "workload it renders, or add the hook by hand)")]  # fmt: skip
            return Outcome(doc.text, False, False, messages)
    if not injected or _plain(work) == before:
        return Outcome(doc.text, False, False, messages if injected else [])
    doc = Document(doc.source, doc.index, doc.text, doc.marker, work, doc.indent)
    messages.insert(0, Message(where, "injected", "; ".join(injected)))
    return Outcome(manifests.dump(doc), True, False, messages)


def _wire_site(site: Site, options: Options, say: typing.Callable[[str, str], None]) -> list[str]:
    """Wire every engine container of one pod spec; the names of those wired. Every
    message names the pod spec; a refusal too."""
    try:
        return _wire(site, options, lambda level, text: say(level, f"{site.path}: {text}"))
    except Refused as exc:
        text = str(exc)
        raise Refused(text if text.startswith(site.path) else f"{site.path}: {text}") from None


def _wire(site: Site, options: Options, say: typing.Callable[[str, str], None]) -> list[str]:
    chosen = _engine_containers(site, options)
    if not chosen:
        return []
    if site.spec.get("hostNetwork") is True:
        raise Refused(
            "hostNetwork: the Pod's loopback is the node's, where the hook "
            "would read another Pod's engine"
        )
    wirings = [_decide(site, c, engine, options.wait_params) for c, engine in chosen]
    worker = site.leader is not None and bool(site.leader.wired)
    given = _grace(site.spec, site.default_grace)
    grace, why = _after_kept_sleep(wirings, given)
    if worker:
        assert site.leader is not None
        lead = site.leader.wired
        for w in wirings:
            w.engine, w.port, w.worker = lead["engine"], lead["port"], True
            reserve = float(w.hook.timeline.get("exit_reserve", wait_config().exit_reserve))
            floor = lead["grace"] + WORKER_MARGIN + reserve
            if grace < floor:
                grace = floor
                why = (
                    f"a worker's deadline falls {number(WORKER_MARGIN)}s after its leader's "
                    "kill: the leader's grace + that + the worker's --exit-reserve"
                )
    # One grace for the Pod, the largest any engine's advice asks for; each hook is
    # then planned again with it and the values its advice gave (which only rise).
    first = [_config_for(w, grace, options.hook_binary) for w in wirings]
    grace = max([grace, *(a.plan.config.grace for a in first)])
    if any(a.plan.config.grace == grace != given for a in first) and not why:
        why = "; ".join(ch.because[-1] for a in first for ch in a.changes if ch.field == "grace")
    final = []
    for w, a in zip(wirings, first, strict=True):
        for _ in range(3):
            if a.plan.config.grace == grace:
                break
            w.hook.timeline["exit_reserve"] = a.plan.config.exit_reserve
            a = _config_for(w, grace, options.hook_binary)
            grace = max(grace, a.plan.config.grace)
        final.append(a)
    if "terminationGracePeriodSeconds" not in site.spec:
        left = "KServe's preset" if site.main == KSERVE_MAIN else "Kubernetes' default"
        say("changed", f"terminationGracePeriodSeconds written: {number(grace)} "
            f"({why or left + ', written so that --grace visibly equals it'})")  # fmt: skip
    elif grace != given:
        say("changed", f"terminationGracePeriodSeconds {number(given)} -> {number(grace)} "
            f"({why})")  # fmt: skip
    _set_grace(site.spec, grace)
    names = []
    for w, early, applied in zip(wirings, first, final, strict=True):
        name = w.container.get("name")
        for ch in early.changes:
            if ch.field != "grace":
                say("changed", f"container {name}: {ch.text()}")
        for warning in applied.plan.warnings:
            if warning.code != "vllm-shutdown-timeout":  # inject follows that advice itself
                say("warning", f"container {name}: {warning.code}: {warning.message}")
        if w.prestop == "sleep":
            kept = w.hook.timeline.get("settle")
            say("replaced", f"container {name}: preStop sleep {w.slept} (a blind wait) "
                "by drainhook wait" + (f", its {number(kept)}s kept as the settle (a "
                "router's measured propagation)" if kept else ""))  # fmt: skip
        if not worker:
            _say_multi_node(w, say)
            _apply_engine_flags(w, applied, say, options.engine_version)
        else:
            env = _list(w.container, "env", ("lifecycle", "resources"))
            _upsert(env, mapping(("name", "DRAINHOOK_HOST"), ("value", "$(LWS_LEADER_ADDRESS)")))
            _upsert(env, mapping(("name", "DRAINHOOK_ALLOW_REMOTE"),
                                 ("value", DoubleQuotedScalarString("1"))))  # fmt: skip
        _set_prestop(w.container, _command(w, applied, options.hook_binary, worker))
        _bring_binary(site.spec, w.container, options)
        names.append(str(name))
    site.wired = {"grace": grace, "engine": wirings[0].engine, "port": wirings[0].port}
    return names


def _after_kept_sleep(wirings: Sequence[Wiring], grace: float) -> tuple[float, str]:
    """G, raised where a sleep kept as the settle would leave less than the default
    timeline's time to drain after it (and R after that); why, when raised."""
    why = ""
    for w in wirings:
        settle = w.hook.timeline.get("settle")
        if w.prestop == "sleep" and settle is not None:
            reserve = float(w.hook.timeline.get("exit_reserve", wait_config().exit_reserve))
            if grace < settle + DRAIN_WINDOW + reserve:
                grace = settle + DRAIN_WINDOW + reserve
                why = (
                    f"the replaced sleep's {number(settle)}s kept as the settle, then "
                    f"{number(DRAIN_WINDOW)}s to drain and the exit reserve"
                )
    return grace, why


def _say_multi_node(w: Wiring, say: typing.Callable[[str, str], None]) -> None:
    """An SGLang over several nodes: every rank's Pod gets the hook, only rank 0 serves."""
    nodes = _count(w.argv, "--nnodes") if w.argv is not None and w.engine == "sglang" else None
    if nodes is not None and nodes > 1:
        say("warning", f"container {w.container.get('name')}: an SGLang over {nodes} nodes "
            "(--nnodes): only rank 0 serves HTTP, so every other rank's hook finds nothing "
            "to read and returns after the settle, and its SIGTERM can stop rank 0's work; "
            "point those ranks' hooks at rank 0 (DRAINHOOK_HOST, --allow-remote, "
            "--exit-zero) as a LeaderWorkerSet's workers are")  # fmt: skip


# -- the command --------------------------------------------------------------------


@dataclass(frozen=True)
class Injected:
    """What `inject` writes: stdout, the stderr lines, the exit code."""

    stdout: str
    lines: tuple[str, ...]
    code: int


def inject_texts(texts: Sequence[tuple[str, str]], options: Options) -> Injected:
    """Pure: (name, text) inputs in, the output stream, messages and exit code out.
    Every input is parsed before anything is written (a usage error writes none)."""
    options.check()
    docs = [d for name, text in texts for d in manifests.parse(name, text)]
    outcomes = [inject_document(d, options) for d in docs]
    lines = tuple(m.line() for o in outcomes for m in o.messages)
    code = exits.INJECT_REFUSED if any(o.refused for o in outcomes) else 0
    return Injected(manifests.join([o.text for o in outcomes]), lines, code)


def run_inject(paths: Sequence[str], options: Options) -> int:
    """`drainhook inject`: read, wire, write; 0, or 1 when a document was refused."""
    options.check()
    result = inject_texts(list(manifests.inputs(paths)), options)
    click.echo(result.stdout, nl=False)
    for line in result.lines:
        click.echo(line, err=True)
    return result.code


def documents(text: str) -> Iterator[typing.Any]:
    """The parsed documents of inject's output, as plain values (for comparisons)."""
    for data in manifests.load_string(text):
        yield _plain(data)
