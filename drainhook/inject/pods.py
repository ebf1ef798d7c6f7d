"""Where `inject` wires (CONTRACT §4): its options and messages, the pod specs each
kind holds (`sites`), the engine container (`recognise`), the version in its tag."""

from __future__ import annotations

import dataclasses
import itertools
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import click

from drainhook import exits
from drainhook.engines.gauges import BY_NAME, EngineChoice, EngineName
from drainhook.errors import DrainhookError, UsageError
from drainhook.hook.config import DEFAULT_GRACE, DEFAULT_SETTLE
from drainhook.inject.manifests import Node
from drainhook.planning.plan import DEFAULT_BINARY, Role, Via, wait_config

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
# A preStop `sleep` (exec or the kubelet's sleep action) is what inject replaces.
SLEEP = re.compile(r"^(?:exec\s+)?(?:/usr)?(?:/bin/)?sleep\s+(\d+(?:\.\d+)?)s?\s*;?\s*$")


@dataclass(frozen=True)
class Options:
    """How `inject` wires the hook: built once from the command line."""

    via: Via = "image"
    image: str | None = None
    binary: str = DEFAULT_BINARY  # --via image: where the engine image holds it
    container: str | None = None
    engine: EngineChoice = "auto"
    engine_version: str | None = None  # X.Y: what the image tags cannot say
    # `wait`'s own click parameters, handed in by the command line (planning sits
    # below cli/): an existing hook's flags are read by them (parse_hook).
    wait_params: tuple[click.Parameter, ...] = ()
    binary_given: bool = False  # --binary said where the image holds it (an upstream one too)

    def check(self) -> None:
        if self.via != "image" and not self.image:
            raise UsageError(f"--via {self.via} needs --image REF (drainhook's image)")
        if self.via == "image" and self.image:
            raise UsageError("--image is for --via image-volume or init")
        if self.via != "image" and self.binary != DEFAULT_BINARY:
            raise UsageError(f"--binary is for --via image (--via {self.via} puts the hook itself)")
        if not self.wait_params:
            raise DrainhookError("inject was not handed wait's options")
        if self.engine_version is not None and version_in(self.engine_version) is None:
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


Level = Literal["refused", "injected", "replaced", "changed", "warning", "skipped"]


@dataclass(frozen=True)
class Message:
    """One line on stderr about one document: `refused` (written unchanged),
    `injected`, `replaced` (a sleep hook), `changed` (a value other than the one
    given), `warning` (advice inject could not apply), `skipped` (pod specs of a
    kind inject does not know, written unchanged)."""

    where: str  # "SOURCE#N KIND/NAME"
    level: Level
    text: str

    def line(self) -> str:
        return " ".join(f"drainhook inject: {self.where}: {self.level}: {self.text}".split())


class Refused(DrainhookError):
    """A document inject must leave as it is; the message says why."""

    exit_code = exits.INJECT_REFUSED


@dataclass(frozen=True)
class Wired:
    """A leader's wiring, which its workers' hooks follow."""

    grace: float
    engine: EngineChoice
    port: int | None
    https: bool  # a worker's hook reads its leader as the leader is served


@dataclass
class Site:
    """One pod spec of a workload, and what the platform says of it."""

    path: str  # where it sits in the document, dotted
    spec: dict[str, Node]
    labels: Mapping[str, Node]
    role: Role | None = None  # the platform's word (KServe's prefill template)
    leader: Site | None = None  # a worker's: it waits on this leader's engine
    default_grace: float = DEFAULT_GRACE  # when terminationGracePeriodSeconds is unset
    main: str | None = None  # the engine container's name by the platform's convention
    # What wiring its engine left (for a worker of it): grace, port, engine.
    wired: Wired | None = None  # once its hook is wired: what a worker waits on
    leads: bool = False  # a leader's: its workers wait on it
    # A worker's: the variable its platform sets to the leader's address.
    leader_address: str = "LWS_LEADER_ADDRESS"
    named: str | None = None  # an operator's role: named when it holds no engine
    not_wired: str | None = None  # why its engine is named, not wired


APPS = ("Deployment", "StatefulSet", "DaemonSet")
KNATIVE_WORDS = "Knative rejects `lifecycle` on its containers (no preStop hook can run)"


def sites(doc: Node, options: Options) -> list[Site]:
    """The pod specs of a workload inject knows, leaders before their workers; none
    for anything else. Raises Refused for a kind it knows and must not touch."""
    if not isinstance(doc, dict):
        return []
    api, kind, spec = str(doc.get("apiVersion", "")), doc.get("kind"), doc.get("spec")
    group = api.split("/")[0]
    if not isinstance(spec, dict):
        return []
    if api == "v1" and kind == "Pod":  # a pod template itself: metadata and spec
        return templates([("", doc)])
    if (group == "apps" and kind in APPS) or (group == "argoproj.io" and kind == "Rollout"):
        return templates([("spec.template", spec.get("template"))])
    if group == "leaderworkerset.x-k8s.io" and kind == "LeaderWorkerSet":
        lwt = spec.get("leaderWorkerTemplate")
        if not isinstance(lwt, dict):
            return []
        base = "spec.leaderWorkerTemplate"
        leader = templates([(f"{base}.leaderTemplate", lwt.get("leaderTemplate"))])
        workers = templates([(f"{base}.workerTemplate", lwt.get("workerTemplate"))])
        for w in workers:  # without a leaderTemplate, the worker's is every Pod's
            w.leader = leader[0] if leader else None
        if leader and workers:
            leader[0].leads = True
        return leader + workers
    if group == "serving.kserve.io" and kind == "LLMInferenceService":
        return _llm_inference_service(spec)
    if group == "serving.kserve.io" and kind == "InferenceService":
        return _inference_service(doc, spec, options)
    if group == "serving.knative.dev" and kind == "Service":
        template = spec.get("template")
        found = templates([("spec.template", template)])
        if any(engine_containers(s, options) for s in found):
            raise Refused(f"a Knative Service: {KNATIVE_WORDS}")
    return []


# The kinds `sites` reads, by (API group, kind): a document of another kind that
# holds pod specs is named on stderr instead of passing by in silence.
KNOWN = {("apps", k) for k in APPS} | {
    ("", "Pod"),
    ("argoproj.io", "Rollout"),
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"),
    ("serving.kserve.io", "LLMInferenceService"),
    ("serving.kserve.io", "InferenceService"),
    ("serving.knative.dev", "Service"),
    # The serving operators' (drainhook.inject.operators).
    ("orchestration.aibrix.ai", "StormService"),
    ("workload.serving.volcano.sh", "ModelServing"),
    ("workloads.x-k8s.io", "RoleBasedGroup"),
}


def known_kind(doc: Mapping[str, Node]) -> bool:
    api = str(doc.get("apiVersion", ""))
    return (api.split("/")[0] if "/" in api else "", doc.get("kind")) in KNOWN


# An unrendered template: a whole value that is an envsubst `${VAR}`, a Helm action
# in a value (`{{ .Values.x }}`, `{{- include`), a key that is no scalar (`{{ x }}`
# read as a flow map); not a script's `${VAR}`, `$(VAR)` or a chat's `{{ messages }}`.
_TEMPLATE = re.compile(
    r"^\s*\$\{[^}]*\}\s*$|\{\{-?\s*(?:[.$]|(?:include|toYaml|template|tpl|if|"
    r"range|with|end|default|quote|required|printf|lookup)\b)"
)


def templated(value: Node, path: str = "") -> Iterator[str]:
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


def _short(value: Node) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= 40 else text[:37] + "..."


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


# Kinds whose controller makes an engine's Pods from a spec that names none: KAITO's
# `inference` preset runs vLLM.
CONTROLLERS = {("kaito.sh", "Workspace"): "inference"}


def names_engine(value: Node, path: str = "") -> Iterator[str]:
    """Where a document names an engine outside any pod spec, dotted: an engine's image
    under `image` or `repository` (a chart's values), its start in a string, an `engine:`
    naming one (KubeAI's Model), a preset a controller runs on one (KAITO's)."""
    if isinstance(value, Mapping):
        api = str(value.get("apiVersion", "")).split("/")[0]
        if not path and (preset := CONTROLLERS.get((api, str(value.get("kind"))))) in value:
            yield str(preset)
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


def templates(pairs: Sequence[tuple[str, Node]]) -> list[Site]:
    out = []
    for path, template in pairs:
        if isinstance(template, dict) and isinstance(template.get("spec"), dict):
            meta = template.get("metadata")
            labels = meta.get("labels") if isinstance(meta, Mapping) else None
            out.append(Site(f"{path}.spec".lstrip("."), template["spec"], labels or {}))
    return out


def _llm_inference_service(spec: dict[str, Node]) -> list[Site]:
    """KServe's LLMInferenceService (serving.kserve.io/v1alpha1): `template` and
    `worker` are PodSpecs merged over the preset's, whose engine container is
    `main`; `prefill` holds its own pair. Where the CR has no template, one holding
    only `main` is written: the preset's image, command and args stay the preset's."""
    out: list[Site] = []
    prefill = spec.get("prefill")
    pairs: list[tuple[str, dict[str, Node], Role | None]] = [
        ("spec", spec, "decode" if prefill else None)
    ]
    if isinstance(prefill, dict):
        pairs.append(("spec.prefill", prefill, "prefill"))
    for path, part, role in pairs:
        template = part.get("template")
        if template is None:
            template = part["template"] = {"containers": []}
        if not isinstance(template, dict):
            continue
        containers = template.setdefault("containers", [])
        if isinstance(containers, list) and not any(
            isinstance(c, Mapping) and c.get("name") == KSERVE_MAIN for c in containers
        ):
            containers.append({"name": KSERVE_MAIN})
        lead = Site(f"{path}.template", template, {}, role, None, KSERVE_PRESET_GRACE, KSERVE_MAIN)
        out.append(lead)
        worker = part.get("worker")
        if isinstance(worker, dict):  # the preset's too: its engine container is `main`
            out.append(dataclasses.replace(lead, path=f"{path}.worker", spec=worker, leader=lead))
            lead.leads = True
    return out


RAW_MODES = ("RawDeployment", "Standard")


def _inference_service(doc: dict[str, Node], spec: dict[str, Node], options: Options) -> list[Site]:
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
    return [site]


def script_option(seq: Sequence[Node]) -> int | None:
    """Where a shell's `-c` is in seq, alone or among other short options (`bash -lc`,
    `sh -ec`, `-exc`): the script is the next word."""
    return next(
        (i for i, w in enumerate(seq) if re.fullmatch(r"-[a-zA-Z]*c[a-zA-Z]*", str(w))), None
    )


def script_of(container: Mapping[str, Node]) -> tuple[list[Node], int | None] | None:
    """Where a shell's script is: (the list holding it, its place), (the list, None) for
    a shell given no script; None when no shell runs first (the command, else the args:
    an image without an entrypoint runs its args)."""
    seqs = [listed(s) for s in (container.get("command"), container.get("args")) if listed(s)]
    if not seqs or str(seqs[0][0]).rsplit("/", 1)[-1] not in SHELLS:
        return None
    for seq in seqs:
        if (at := script_option(seq)) is not None and at + 1 < len(seq):
            return seq, at + 1
    if len(seqs) == 2 and script_option(seqs[0]) is not None:
        return seqs[1], 0
    return seqs[0], None


def commands(container: Mapping[str, Node]) -> list[list[str]]:
    """The simple commands the container runs: its command and args as one, or a shell
    script's, split as the shell splits them (`;`, `&&`, `|`, `&`, lines; a
    redirection's file dropped); [] for a script no shell can split."""
    found = script_of(container)
    if found is None or found[1] is None:
        return [[str(w) for p in ("command", "args") for w in listed(container.get(p))]]
    script = unfolded(str(found[0][found[1]]))
    lex = shlex.shlex(script, posix=True, punctuation_chars="();<>|&\n")
    lex.whitespace, lex.whitespace_split, lex.commenters = " \t\r", True, "#"
    out: list[list[str]] = [[]]
    redirect = False
    try:
        for token in lex:
            if token and not token.strip("();<>|&\n"):
                redirect = "<" in token or ">" in token
                out += [] if redirect else [[]]
            elif redirect:
                redirect = False
            else:
                out[-1].append(token)
    except ValueError:
        return []
    return [c for c in out if c]


def unfolded(script: str) -> str:
    """The script with its lines continued by `\\` joined, as the shell reads it."""
    return re.sub(r"\\\r?\n", " ", script)


def listed(value: Node) -> list[Node]:
    return value if isinstance(value, list) else []


def starts(command: Sequence[str]) -> EngineName | None:
    """The engine these words start: `vllm serve`, `python -m vllm.entrypoints...`,
    `python -m sglang.launch_server`, `sglang serve`."""
    for w, after in itertools.pairwise([*command, ""]):
        base = w.rsplit("/", 1)[-1]
        if base in BY_NAME and after == "serve":
            return BY_NAME[base].name
        if w == "-m" and after.startswith("vllm.entrypoints."):
            return "vllm"
        if w == "-m" and after.startswith("sglang.launch_server"):
            return "sglang"
    return None


# Words before a command's program (a prefix, an assignment, a compound's keyword), and
# the directories of the image's own programs: a program elsewhere, or a `.sh`, is an
# entry script of the user's, which may start the engine where inject cannot see it.
PREFIX = re.compile(r"exec|env|nohup|time|do|done|then|else|if|fi|while|until|[!{}]|\w+=.*")
SYSTEM = ("/bin/", "/sbin/", "/usr/bin/", "/usr/sbin/", "/usr/local/bin/")
BUILTIN = re.compile(r"[.:]|source|cd|export|set|echo|true")
PYTHON = re.compile(r"python[\d.]*")
# Images whose entrypoint starts the engine (vLLM's: `vllm serve`): args are its flags.
ENTRYPOINTS = ("vllm-openai",)


def _program(command: Sequence[str]) -> str | None:
    """What one command runs, in words (`python3 -m MODULE`, `vllm bench`, a program's
    name), "" for what inject cannot read (an entry script, a Python file), None for
    no program (a compound's `done`)."""
    rest = list(itertools.dropwhile(PREFIX.fullmatch, command))
    if not rest:
        return None
    base, after = rest[0].rsplit("/", 1)[-1], [*rest[1:3], "", ""]
    if PYTHON.fullmatch(base):
        return f"{base} -m {after[1]}" if after[0] == "-m" else ""
    own = "/" in rest[0] and not rest[0].startswith(SYSTEM)
    if own or base in SHELLS or re.search(r"\.(sh|bash|py)$", base):
        return ""
    return f"{base} {after[0]}" if base in BY_NAME else base


def runs(container: Mapping[str, Node]) -> tuple[EngineName | None, tuple[str, ...]]:
    """What the container runs (CONTRACT §4: the command decides, not the image): the
    engine its command starts, else the programs it runs instead; neither where it shows
    nothing: no command (the image's entrypoint, given no program), an entry script."""
    found = commands(container)
    if engine := next((e for c in found if (e := starts(c))), None):
        return engine, ()
    first = str(next(iter(listed(container.get("args"))), ""))
    base = first.rsplit("/", 1)[-1]
    program = first.startswith("/") or base in (*SHELLS, *BY_NAME) or PYTHON.fullmatch(base)
    if not container.get("command") and (not program or image_name(container)[0] in ENTRYPOINTS):
        return None, ()  # args for the image's entrypoint (flags, a model), not a program
    programs = [p for c in found if (p := _program(c)) is not None]
    if not programs or "" in programs:
        return None, ()
    return None, tuple(dict.fromkeys([p for p in programs if not BUILTIN.fullmatch(p)] or programs))


def image_name(container: Mapping[str, Node]) -> tuple[str, str]:
    """The repository's last component and the tag of the container's image."""
    ref = str(container.get("image", "")).split("@", 1)[0]
    name, _, tag = ref.rsplit("/", 1)[-1].partition(":")
    return name.lower(), tag


# The engines' own published images (their repositories, Docker Hub's prefix dropped):
# none holds drainhook, so `--via image` on one is a preStop that cannot start.
UPSTREAM = (
    "vllm/vllm-openai", "vllm/vllm-openai-rocm", "rocm/vllm", "lmsysorg/sglang",
    "ghcr.io/llm-d/llm-d", "ghcr.io/llm-d/llm-d-cuda", "nvcr.io/nvidia/vllm",
    "nvcr.io/nvidia/sglang"
)  # fmt: skip


def upstream_image(container: Mapping[str, Node]) -> str | None:
    """The container's image when it is an engine's own published one (UPSTREAM)."""
    ref = str(container.get("image", "")).split("@", 1)[0]
    repo = re.sub(r":[^/]*$", "", ref).lower()
    repo = re.sub(r"^(index\.)?docker\.io/(library/)?", "", repo)
    return repo if repo in UPSTREAM else None


def engine_image(container: Mapping[str, Node]) -> EngineName | None:
    """The engine an image is named after (not a router's, a proxy's...)."""
    name, _ = image_name(container)
    if any(x in name for x in NOT_AN_ENGINE):
        return None
    return next((e for e in ("sglang", "vllm") if e in name), None)


def recognise(container: Mapping[str, Node]) -> EngineName | None:
    """vllm or sglang: what its command starts, else, where the command shows no
    other program, the engine its image is named after; None for anything else."""
    engine, instead = runs(container)
    return engine or (None if instead else engine_image(container))


def version_in(text: str) -> tuple[int, int] | None:
    m = re.match(r"v?(\d+)\.(\d+)(?:\.\d+)?(?:[-+.].*)?$", text.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


def image_version(container: Mapping[str, Node], engine: str) -> tuple[int, int] | None:
    """The engine's version from an image named after the engine, tagged as the engines
    tag their releases (vllm-openai:v0.18.0, lmsysorg/sglang:v0.5.23-cu126); None when
    the image says nothing of it: another project's tag (llm-d's carry llm-d's
    version, NGC's `26.02-py3` a year and month), `latest`, a digest."""
    name, tag = image_name(container)
    m = re.match(r"v(\d+)\.(\d+)\.\d+", tag)
    return (int(m.group(1)), int(m.group(2))) if m and engine in name else None


# Flags only one engine's server takes (vLLM 0.32's and SGLang 0.5.23's argparse):
# args made of them, on an image named after neither, are that engine's (a vendor's
# accelerator image runs vLLM with the image's own entrypoint).
OWN_FLAGS: dict[EngineName, tuple[str, ...]] = {
    "vllm": ("--max-model-len", "--gpu-memory-utilization", "--max-num-seqs", "--enforce-eager"),
    "sglang": ("--model-path", "--mem-fraction-static", "--tp-size", "--context-length"),
}


def flags_of(container: Mapping[str, Node]) -> EngineName | None:
    """The one engine whose own flags a container's args carry, with no command and
    an image named after no engine; None otherwise."""
    if container.get("command") or engine_image(container):
        return None
    words = {str(a).split("=", 1)[0] for a in listed(container.get("args"))}
    found = [e for e, flags in OWN_FLAGS.items() if words & set(flags)]
    return found[0] if len(found) == 1 else None


def ray_worker(site: Site, container: Mapping[str, Node]) -> bool:
    """A worker's container that runs a Ray worker (`ray start --address=$(LWS_LEADER_
    ADDRESS):6379`): part of its leader's vLLM, whose hook it waits on."""
    return site.leader is not None and "ray" in runs(container)[1]


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
