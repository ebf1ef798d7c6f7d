"""The engine's command line as `inject` reads and edits it (CONTRACT §4): a list or a
shell script's tail (`argv_of`), the flags naming its port, role, API servers and
TLS, and an existing `drainhook wait` read by `wait`'s own options (`parse_hook`)."""

from __future__ import annotations

import itertools
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import click

from drainhook.engines.gauges import EngineChoice, default_port
from drainhook.hook.config import Parsed
from drainhook.inject.containers import (
    SHELLS,
    SLEEP,
    commands,
    listed,
    runs,
    script_of,
    script_option,
    starts,
    unfolded,
)
from drainhook.inject.manifests import Node
from drainhook.inject.options import Refused
from drainhook.inject.workloads import Site
from drainhook.planning.plan import SPLIT_ROLES, TIMELINE, Role


class Argv:
    """The engine's command line as `inject` reads it: a list of arguments (the
    container's args, or an exec-form command), or a shell script (`sh -c`), which
    inject reads and never edits (CONTRACT §4: it names the flag to add)."""

    def __init__(self, seq: list[Node], index: int | None = None) -> None:
        self.seq = seq
        self.index = index  # the script's place in seq, for a shell script

    def words(self) -> list[str]:
        """The words as the shell splits them (comments dropped); a script no shell
        reads as given (an unclosed quote) is refused: its flags cannot be known."""
        if self.index is None:
            return [str(w) for w in self.seq]
        try:
            return shlex.split(unfolded(str(self.seq[self.index])), comments=True)
        except ValueError as exc:
            raise Refused(f"its shell script cannot be split as a shell would ({exc})") from None

    def value(self, flag: str) -> str | bool | None:
        """The value given to flag (the last one: argparse's rule), True for a switch
        that is there, None when it is not."""
        words = self.words()
        found: str | bool | None = None
        for w, after in itertools.pairwise([*words, "--"]):  # a flag last is a switch
            if w == flag:
                found = True if after.startswith("--") else after
            elif w.startswith(flag + "="):
                found = w.split("=", 1)[1]
        return found


def numeric(value: str) -> bool:
    return re.fullmatch(r"-?\d+(\.\d+)?", value) is not None


def argv_of(container: Mapping[str, Node]) -> Argv | None:
    """Where the engine's flags go, or None where they cannot be written: no
    command and no args (the image's own, which args would replace)."""
    command, args = container.get("command"), container.get("args")
    if (script := script_of(container)) is not None:
        return Argv(*script) if script[1] is not None else None
    if isinstance(args, list):
        return Argv(args)
    if isinstance(command, list) and command:
        return Argv(command)
    return None


# A port as a command may give it from the container's env: Kubernetes' `$(NAME)`,
# and in a shell script the shell's `$NAME`, `${NAME}`, `${NAME:-N}`.
_EXPANSION = re.compile(r"\$\((\w+)\)|\$(\w+)|\$\{(\w+)(?::?-(\d+))?\}")


def engine_port(argv: Argv | None, container: Mapping[str, Node]) -> tuple[int | None, str]:
    """The engine's --port (None: not given, or not read), and what was given where
    it cannot be read: a variable with no literal value in the container's env."""
    given = argv.value("--port") if argv is not None else None
    if not isinstance(given, str):
        return None, ""
    value, m = given, _EXPANSION.fullmatch(given)
    if argv is not None and m and (m.group(1) or argv.index is not None):
        name = m.group(1) or m.group(2) or m.group(3)
        env = [e for e in listed(container.get("env")) if isinstance(e, Mapping)]
        env = [e for e in env if e.get("name") == name]
        default = None if container.get("envFrom") else m.group(4)
        value = str(env[-1].get("value")) if env else default or given
    return (int(value), "") if value.isdigit() else (None, given)


# Hosts an engine serves loopback on: every address, or loopback itself.
LOOPBACK_REACHES = ("0.0.0.0", "::", "[::]", "127.0.0.1", "localhost", "::1", "[::1]")
POD_IP_FIELDS = ("status.podIP", "status.podIPs")


def engine_host(argv: Argv | None, container: Mapping[str, Node]) -> str | None:
    """Where the hook reads an engine bound to the Pod's own address alone (CONTRACT
    §4, §6): `$(VAR)`, VAR the container's variable from the downward API's
    status.podIP; None for an engine loopback reaches. Any other host is refused: the
    hook would read nothing there."""
    given = argv.value("--host") if argv is not None else None
    if not isinstance(given, str) or given in LOOPBACK_REACHES or given.startswith("127."):
        return None
    m = _EXPANSION.fullmatch(given)
    name = m and (m.group(1) or m.group(2) or m.group(3))
    for e in listed(container.get("env")):
        if not isinstance(e, Mapping) or not name or e.get("name") != name:
            continue
        source = e.get("valueFrom")
        field = source.get("fieldRef") if isinstance(source, Mapping) else None
        if isinstance(field, Mapping) and field.get("fieldPath") in POD_IP_FIELDS:
            return f"$({name})"
    raise Refused(
        f"container {container.get('name')}: the engine listens on --host {given} alone, "
        "which the hook in its Pod cannot read: bind it to 0.0.0.0, or to the Pod's IP from "
        "an env var (valueFrom.fieldRef.fieldPath: status.podIP) named in --host as $(VAR)"
    )


def role_of(site: Site, argv: Argv | None) -> Role:
    """unified, prefill or decode: the platform's word (KServe's prefill template,
    llm-d's llm-d.ai/role label), else the engine's own flags."""
    if site.role:
        return site.role
    label = site.labels.get("llm-d.ai/role")
    if (role := next((r for r in SPLIT_ROLES if r == label), None)) is not None:
        return role
    if argv is None:
        return "unified"
    mode = argv.value("--disaggregation-mode")
    if (role := next((r for r in SPLIT_ROLES if r == mode), None)) is not None:
        return role
    kv = argv.value("--kv-transfer-config")
    if isinstance(kv, str):
        if '"kv_producer"' in kv:
            return "prefill"
        if '"kv_consumer"' in kv:
            return "decode"
    return "unified"


def count_of(argv: Argv, *flags: str) -> int | None:
    for flag in flags:
        value = argv.value(flag)
        if isinstance(value, str) and value.isdigit():
            return int(value)
    return None


def _switch(argv: Argv, *flags: str) -> bool:
    return any(argv.value(flag) not in (None, "false", "False") for flag in flags)


DP, DP_LOCAL = ("--data-parallel-size", "-dp"), ("--data-parallel-size-local", "-dpl")
HYBRID = ("--data-parallel-hybrid-lb", "--data-parallel-start-rank")


def balancer(argv: Argv) -> str:
    """vLLM's data-parallel balancing, as vLLM 0.32's serve.py tells it from the flags:
    `external` (an outside or multi-port balancer: an API server a rank), `hybrid` (each
    node's API servers take its own ranks' requests), else `internal` (rank 0's, all)."""
    external = _switch(argv, "--data-parallel-external-lb", "-dpe")
    if external or argv.value("--data-parallel-rank") is not None or argv.value("-dpn") is not None:
        return "external"
    if _switch(argv, "--data-parallel-multi-port-external-lb"):
        return "external"
    hybrid = _switch(argv, "--data-parallel-hybrid-lb", "-dph")
    starts_at = argv.value("--data-parallel-start-rank"), argv.value("-dpr")
    return "hybrid" if hybrid or starts_at != (None, None) else "internal"


def api_servers(engine: str, argv: Argv | None) -> int | None:
    """vLLM's API-server processes from its flags, by vLLM 0.32's own defaulting
    (vllm/entrypoints/cli/serve.py): --api-server-count when given; else 1 with
    an external or multi-port load balancer, --data-parallel-size-local with a
    hybrid one, --data-parallel-size otherwise. None: not vLLM, no flags to read,
    or --headless (no API server at all)."""
    if engine != "vllm" or argv is None or _switch(argv, "--headless"):
        return None
    given = count_of(argv, "--api-server-count", "-asc")
    if given is not None:
        return given
    mode = balancer(argv)
    return 1 if mode == "external" else count_of(argv, *(DP_LOCAL if mode == "hybrid" else DP)) or 1


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

    timeline: dict[str, Parsed]
    others: list[list[str]]  # each flag with its value, as written


def parse_hook(command: Sequence[str], where: str, params: Sequence[click.Parameter]) -> Hook:
    """The flags of an existing `drainhook wait` command line, read by `wait`'s own
    options (`params`); one inject cannot read refuses the document."""
    options = _wait_options(params)
    hook = Hook({}, [])
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
                hook.timeline[p.name] = p.type.convert(value, p, None)
            except click.BadParameter as exc:
                raise Refused(f"{where}: its drainhook hook's {flag}: {exc.message}") from None
        else:
            hook.others.append(given)
    return hook


def serves_tls(container: Mapping[str, Node], argv: Argv | None) -> bool:
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


def prestop_of(container: Mapping[str, Node]) -> tuple[str, Node]:
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
    text = text if script_option(command[1:2]) == 0 else " ".join(command)
    if m := SLEEP.match(text.strip()):
        return "sleep", m.group(1)
    kind = next(iter(prestop), "?") if isinstance(prestop, Mapping) else "?"
    shown = " ".join(command) if command else kind
    return "other", shown


def _over_pods(engine: EngineChoice, argv: Argv) -> tuple[str, str, bool] | None:
    """One engine over several Pods, in words: what it is, which Pods serve, and
    whether each Pod's API server serves its own ranks; None where it is not one."""
    nodes, ranks, here = count_of(argv, "--nnodes"), count_of(argv, *DP), count_of(argv, *DP_LOCAL)
    if engine == "sglang" and nodes is not None and nodes > 1:
        return f"an SGLang over {nodes} nodes (--nnodes)", "only rank 0 serves HTTP", False
    if engine != "vllm":
        return None
    if _switch(argv, "--headless"):
        return "a headless vLLM (--headless)", "its ranks serve no HTTP, the leader's do", False
    own = balancer(argv) != "internal"  # each Pod serves its own ranks
    rank = argv.value("--data-parallel-rank")
    if isinstance(rank, str) and ranks is not None and ranks > 1 and here is None:
        # vLLM's external balancing: each Pod one rank and its own API server.
        what = f"a vLLM data-parallel engine over Pods (rank {rank} of {ranks})"
    elif (ranks is not None and here is not None and ranks > here) or (
        (ranks is None or here is None) and _switch(argv, *DP_LOCAL, "-dph", *HYBRID)
    ):
        # Counts a script computes ($((LWS_GROUP_SIZE * DP_SIZE_LOCAL))) are not read:
        # its local size or hybrid balancing says the ranks span Pods all the same.
        shown = f"{here} of {ranks} ranks here" if here and ranks else "its ranks set in a script"
        expert = "- and expert" if _switch(argv, "--enable-expert-parallel", "-ep") else ""
        what = f"a vLLM data{expert}-parallel engine over Pods ({shown})"
    else:
        return None
    served = (
        "each Pod's API server serves its own ranks (a hybrid or external balancer)"
        if own
        else "only rank 0's Pod serves HTTP, and its /metrics counts every rank"
    )
    return what, served, own


def _spread(engine: EngineChoice, argv: Argv | None, leads: bool) -> str:
    """What one engine over several Pods means to the drain (empty: it is not one):
    which Pods serve, which wait on the leader (`leads`: its workers' hooks do)."""
    found = _over_pods(engine, argv) if argv is not None else None
    if found is None:
        return ""
    what, served, own = found
    if not leads:
        return (
            f"{what}: {served}, and one Pod's SIGTERM can stop the others' work; drain them "
            "together: point the other Pods' hooks at the one that serves (DRAINHOOK_HOST, "
            "--allow-remote, --exit-zero) as a LeaderWorkerSet's workers are"
        )
    return f"{what}: {served}; " + (
        "the workers' hooks wait on the leader, reading none of their own Pods' requests: "
        "drain such a group by hand"
        if own
        else "the leader's hook drains the group, and each worker's hook waits on it "
        "(DRAINHOOK_HOST=$(LWS_LEADER_ADDRESS)): no rank stops while the leader holds work"
    )


def caveats(
    container: Mapping[str, Node], engine: EngineChoice, argv: Argv | None, leads: bool
) -> list[str]:
    """What the manifest leaves the hook to assume, each with the fix: one engine over
    several Pods, a port it does not say, a shell that stays PID 1."""
    out = [text] if (text := _spread(engine, argv, leads)) else []
    port, unread = engine_port(argv, container)
    ports = listed(container.get("ports"))
    declared = [p.get("containerPort") for p in ports if isinstance(p, Mapping)]
    reads = (
        f"the hook reads {default_port(engine)}, {engine}'s default"
        + (f" (the container declares {', '.join(map(str, declared))})" if declared else "")
        + "; if the engine listens elsewhere, add --port N to the hook"
    )
    if unread:
        out.append(f"its --port is {unread}, which inject cannot read from the container: {reads}")
    elif port is None and container.get("command") and runs(container) == (None, ()):
        shown = next(iter(commands(container)), ["?"])[0]  # the entry script
        out.append(f"its command ({shown}) does not show the engine's port: {reads}")
    for started in commands(container) if script_of(container) else []:
        if started[:1] != ["exec"] and starts(started) is not None:
            out.append(
                "its shell starts the engine without `exec`: the shell stays PID 1 and SIGTERM "
                "stops there; write `exec` before the engine's command"
            )
    return out
