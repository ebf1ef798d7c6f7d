"""What one container runs (CONTRACT §4: the command decides, not the image): its
commands as a shell splits them, the engine they start or the programs they run
instead, its image's name, tag and version, a preStop sleep."""

from __future__ import annotations

import itertools
import re
import shlex
from collections.abc import Mapping, Sequence

from drainhook.engines.gauges import BY_NAME, EngineName
from drainhook.inject.manifests import Node

# Routing proxies, gateways and schedulers whose images carry an engine's name.
NOT_AN_ENGINE = ("router", "proxy", "sidecar", "gateway", "scheduler", "epp")
SHELLS = ("sh", "bash", "dash", "ash")
# A preStop `sleep` (exec or the kubelet's sleep action) is what inject replaces.
SLEEP = re.compile(r"^(?:exec\s+)?(?:/usr)?(?:/bin/)?sleep\s+(\d+(?:\.\d+)?)s?\s*;?\s*$")


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


# The Python modules that start each engine's server (`python -m MODULE`); an
# engine's own program starts it as `NAME serve` (its name in the gauge table).
# `drainhook policy` renders the same rules into CEL.
MODULES: tuple[tuple[str, EngineName], ...] = (
    ("vllm.entrypoints.", "vllm"),
    ("sglang.launch_server", "sglang"),
)


def starts(command: Sequence[str]) -> EngineName | None:
    """The engine these words start: `vllm serve`, `python -m vllm.entrypoints...`,
    `python -m sglang.launch_server`, `sglang serve`."""
    for w, after in itertools.pairwise([*command, ""]):
        base = w.rsplit("/", 1)[-1]
        if base in BY_NAME and after == "serve":
            return BY_NAME[base].name
        for module, engine in MODULES if w == "-m" else ():
            if after.startswith(module):
                return engine
    return None


# Words before a command's program (a prefix, an assignment, a compound's keyword).
PREFIX = re.compile(r"exec|env|nohup|time|do|done|then|else|if|fi|while|until|[!{}]|\w+=.*")
# A program is its basename, wherever it lies (/opt/venv/bin/lmcache_server runs
# lmcache_server, no engine); a script, or a program named as an entry point, may
# start the engine where inject cannot see it.
ENTRY = re.compile(r"(docker-)?entrypoint|start|run|launch|serve|boot|init|.*\.(sh|bash|py)")
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
    if base in SHELLS or ENTRY.fullmatch(base):
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
