"""One group of pod specs wired (CONTRACT §4): each engine container's preStop, the
engine flags the hook reads through, the Pod's one grace, a worker's hook pointed at
its leader; every change said. The engine's argv: drainhook.inject.argv."""

from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import click

from drainhook.engines.gauges import EngineChoice, default_port
from drainhook.errors import DrainhookError
from drainhook.hook.config import DEFAULT_GRACE, DEFAULT_SETTLE
from drainhook.inject.argv import (
    Argv,
    Hook,
    api_servers,
    argv_of,
    caveats,
    engine_host,
    engine_port,
    numeric,
    parse_hook,
    prestop_of,
    role_of,
    serves_tls,
)
from drainhook.inject.containers import (
    commands,
    engine_image,
    flags_of,
    image_version,
    listed,
    recognise,
    runs,
    upstream_image,
)
from drainhook.inject.manifests import Node, insert_before
from drainhook.inject.options import Level, Options, Refused, version_in
from drainhook.inject.via import bring_binary, named_list
from drainhook.inject.workloads import KSERVE_MAIN, Group, Site, engine_containers, ray_worker
from drainhook.numfmt import number
from drainhook.planning.plan import (
    LOG_FILE,
    TIMELINE,
    Applied,
    EngineFlag,
    Role,
    apply_advice,
    engine_flags,
    make_plan,
    prestop_command,
    wait_config,
)

# The time to drain between S and D in the default timeline (G 30 - S 5 - R 5): what
# a pod spec keeps after a long sleep is kept as its settle.
DRAIN_WINDOW = DEFAULT_GRACE - DEFAULT_SETTLE - wait_config().exit_reserve
# A group's worker's hook waits on its leader (examples/lws-vllm.yaml): its deadline
# falls this long after the leader's kill, so a worker holding a stage of the model
# outlives whatever the leader still finishes.
WORKER_MARGIN = 5.0

Say = typing.Callable[[Level, str], None]  # one line on stderr about the document


@dataclass
class Wiring:
    """What inject does to one engine container, decided before anything is written."""

    container: dict[str, Node]
    engine: EngineChoice
    hook: Hook
    argv: Argv | None
    role: Role
    port: int | None  # the engine's --port, when it is not the engine's default
    prestop: str  # what was there: none, drainhook, sleep
    slept: Node = None
    worker: bool = False  # a LeaderWorkerSet worker's: it waits on its leader
    api_servers: int | None = None  # vLLM's API-server processes, from its flags
    https: bool = False  # the engine serves TLS: the hook reads it as its clients do
    host: str | None = None  # `$(VAR)`: the engine listens on the Pod's IP alone


# vLLM's entry points that serve no /metrics: a hook could never read them.
UNREADABLE = {
    "vllm.entrypoints.grpc_server": "gRPC server (vllm.entrypoints.grpc_server) serves no HTTP "
    "/metrics: no hook can read it",
    "vllm.entrypoints.api_server": "demo server (vllm.entrypoints.api_server) serves /health and "
    "/generate only, no /metrics: the hook would hold every drain to its deadline",
}


def _decide(
    site: Site, container: dict[str, Node], engine: EngineChoice, params: Sequence[click.Parameter]
) -> Wiring:
    name = container.get("name")
    kind, what = prestop_of(container)
    if kind == "other":
        raise Refused(
            f"container {name}: its preStop runs {what}: inject replaces only a sleep or "
            "its own hook"
        )
    hook = Hook({}, [])
    if kind == "drainhook" and isinstance(what, list):
        hook = parse_hook(what, f"container {name}", params)
    if kind == "sleep" and numeric(str(what)) and float(str(what)) > DEFAULT_SETTLE:
        # A sleep longer than the default settle is a measured propagation time (a
        # load balancer's): it stays, as the settle (CONTRACT §4).
        hook.timeline["settle"] = float(str(what))
    said = [w for c in commands(container) for w in c]
    for module, why in UNREADABLE.items():
        if module in said:
            raise Refused(f"container {name}: vLLM's {why}; run `vllm serve`, then inject")
    if engine == "vllm" and "--disable-log-stats" in said:
        raise Refused(
            f"container {name}: vLLM started with --disable-log-stats serves no scheduler "
            "gauges: the hook would hold every Pod to its deadline; remove the flag, then inject"
        )
    argv = argv_of(container)
    port, _ = engine_port(argv, container)
    port = port if port is not None and port != default_port(engine) else None
    return Wiring(
        container,
        engine,
        hook,
        argv,
        role_of(site, argv),
        port,
        kind,
        what if kind == "sleep" else None,
        api_servers=api_servers(engine, argv),
        https=serves_tls(container, argv),
        host=None if site.worker else engine_host(argv, container),
    )


def _config_for(w: Wiring, grace: float, binary: str) -> Applied:
    values = {k: v for k, v in w.hook.timeline.items() if k in TIMELINE}
    values["grace"] = grace
    # A worker's hook reads its leader's engine and recognises it (`auto`); its advice
    # is that engine's (w.engine, the leader's), never another engine's of the document.
    values["engine"] = w.hook.timeline.get("engine", "auto") if w.worker else w.engine
    try:
        config = wait_config(**values)
        return apply_advice(make_plan(config, w.role, binary, w.engine, api_servers=w.api_servers))
    except DrainhookError as exc:
        raise Refused(f"container {w.container.get('name')}: its hook's values: {exc}") from None


def _command(w: Wiring, applied: Applied, binary: str, worker: bool) -> list[str]:
    """The new preStop: plan's own rendering of the timeline, then the hook's other
    flags as they were, the engine's port, a worker's --exit-zero, and --log-file."""
    args = list(prestop_command(applied.plan.config, binary))
    given = {flag[0].partition("=")[0] for flag in w.hook.others}
    for flag in w.hook.others:
        args += flag
    if w.port is not None and not given & {"--port", "--url", "--annotations"}:
        args += ["--port", str(w.port)]
    if w.https and not given & {"--scheme", "--url", "--annotations"}:
        args += ["--scheme", "https"]  # a loopback listener: read without verification
    if worker and "--exit-zero" not in given:
        args.append("--exit-zero")
    if "--log-file" not in given:
        args += ["--log-file", LOG_FILE]
    return args


def _set_prestop(container: dict[str, Node], command: Sequence[str]) -> None:
    """The preStop set to the command: an exec hook's command replaced in place (its
    other keys go), anything else (the kubelet's sleep) replaced whole."""
    lifecycle = container.get("lifecycle")
    if not isinstance(lifecycle, dict):
        lifecycle = {}
        insert_before(container, "lifecycle", lifecycle, ("resources", "volumeMounts"))
    prestop = lifecycle.get("preStop")
    if isinstance(prestop, dict) and isinstance(prestop.get("exec"), dict):
        for key in [k for k in prestop if k != "exec"]:
            del prestop[key]
        prestop["exec"]["command"] = list(command)
    else:
        lifecycle["preStop"] = {"exec": {"command": list(command)}}


def _engine_flag_edit(w: Wiring, flag: EngineFlag) -> str | None:
    """What flag needs of this engine's command line (CONTRACT §4): `add` (absent, and
    the hook reads the engine or its server's count through it), `advise` (absent,
    other advice: named, never written), `keep` (a value the user wrote that the
    advice would change: named, never rewritten), or None (already so)."""
    have = w.argv.value(flag.flag) if w.argv is not None else None
    if have is None:
        return ("add" if flag.reads else "advise") if flag.add else None
    if flag.value is None or not isinstance(have, str) or have == flag.value:
        return None
    under = flag.ceiling and numeric(have) and float(have) <= float(flag.value)
    return None if under else "keep"


def _apply_engine_flags(w: Wiring, applied: Applied, say: Say, given: str | None) -> list[str]:
    """The engine flags the hook reads through, added where the engine's version is
    known to take them (CONTRACT §4: a flag an older engine rejects crash-loops the
    Pod): `given` (--engine-version), else the image's tag. Other advice, and a value
    the user wrote, are named on stderr with plan's advice, never written. The flags
    added."""
    name = w.container.get("name")
    version = version_in(given) if given is not None else image_version(w.container, w.engine)
    added: list[str] = []
    for flag in engine_flags(applied.plan):
        if (edit := _engine_flag_edit(w, flag)) is None:
            continue
        why_not = _not_written(w, flag, edit, version)
        if why_not is None and w.argv is not None:
            w.argv.seq.extend(flag.args)
            added.append(" ".join(flag.args))
            say("changed", f"container {name}: added {added[-1]} ({flag.why})")
        elif why_not is not None and flag.needed and why_not.startswith("needs"):
            raise Refused(f"container {name}: {why_not}")
        elif why_not is not None:
            say("warning", f"container {name}: {why_not}")
    return added


def _not_written(
    w: Wiring, flag: EngineFlag, edit: str, version: tuple[int, int] | None
) -> str | None:
    """Why a flag the advice names is not written, in words; None to write it."""
    wanted, engine = " ".join(flag.args), w.engine
    if edit == "keep":
        have = w.argv.value(flag.flag) if w.argv is not None else None
        advised = f"{flag.flag} {flag.value}"
        return f"{flag.flag} {have} kept as written; plan advises {advised} ({flag.why})"
    if edit == "advise":
        return f"plan advises {wanted} ({flag.why})"
    if flag.since is not None and version is None:
        return (
            f"{wanted} not written ({flag.why}): the image's tag names no {engine} version; "
            f"add it yourself if it is {engine} {flag.since} or newer, or give --engine-version"
        )
    since = tuple(int(x) for x in (flag.since or "0").split("."))
    if version is not None and version < since:
        shown = f"{version[0]}.{version[1]}"
        return f"{flag.flag} not written: the image's {engine} {shown} is older than {flag.since}"
    if w.argv is None:
        where = "it has no command or args here: give the engine"
        return f"needs {wanted} ({flag.why}); {where} `{wanted}`"
    if w.argv.index is not None:
        return (
            f"needs {wanted} ({flag.why}); its engine starts in a shell script, which inject "
            f"does not edit: write `{wanted}` on the engine's command there"
        )
    return None


@dataclass(frozen=True)
class Wired:
    """A leader's wiring, which its workers' hooks follow."""

    grace: float
    engine: EngineChoice
    port: int | None
    https: bool  # a worker's hook reads its leader as the leader is served
    summary: str = ""  # the pod spec's wiring in words, for the `injected` line


def wire_group(group: Group, options: Options, say: Say) -> list[str]:
    """Wire a group: its leader, then its workers, whose hooks read the leader's engine
    as it was wired. `pod spec: container` for each container wired."""
    names, lead = _wire_site(group.lead, options, say, None, bool(group.workers))
    for site in group.workers:
        names += _wire_site(site, options, say, lead, False)[0]
    return names


def _wire_site(
    site: Site, options: Options, say: Say, lead: Wired | None, leads: bool
) -> tuple[list[str], Wired | None]:
    """Wire every engine container of one pod spec: those wired, and what a worker
    follows. Every message names the pod spec, a refusal too."""

    def here(level: Level, text: str) -> None:
        say(level, f"{site.path}: {text}")

    if site.not_wired is not None:
        if engine_containers(site, options) or not site.spec:  # no spec: a reference to none
            here("skipped", site.not_wired)
        return [], None
    _name_others(site, options, here)
    try:
        chosen = engine_containers(site, options)
        wired = _wire(site, chosen, options, here, lead, leads) if chosen else None
    except Refused as exc:
        text, named = str(exc), f" ({site.named})" if site.named else ""
        raise Refused(
            text if text.startswith(site.path) else f"{site.path}{named}: {text}"
        ) from None
    names = ", ".join(str(c.get("name")) for c, _ in chosen)
    return [f"{site.path}: {names} ({wired.summary})"] if wired else [], wired


def _name_others(site: Site, options: Options, say: Say) -> None:
    """A container inject does not wire that may be an engine is named: one of an
    engine's image that runs something else, one whose args are an engine's flags."""
    for c in listed(site.spec.get("containers")) if options.container is None else []:
        if not isinstance(c, Mapping) or ray_worker(site, c):
            continue  # a Ray worker of its leader's vLLM is that engine's
        if recognise(c) is None and (plainly := flags_of(c)) is not None:
            say(
                "skipped",
                f"container {c.get('name')}: its args are {plainly}'s own flags on an image "
                f"named after no engine: wire it with --container {c.get('name')} --engine "
                f"{plainly}",
            )
        if (instead := runs(c)[1]) and engine_image(c):
            say(
                "skipped",
                f"container {c.get('name')} runs {', '.join(instead)}, not an engine: left as "
                "it is (if it starts one, name it: --container NAME --engine E)",
            )


def _given_grace(site: Site, options: Options, wirings: Sequence[Wiring]) -> float:
    """The pod spec's own G (its platform's default where unset), once nothing in it
    forbids wiring: the node's loopback, a grace no integer, an image without the hook."""
    if site.spec.get("hostNetwork") is True:
        raise Refused(
            "hostNetwork: the Pod's loopback is the node's, where the hook "
            "would read another Pod's engine"
        )
    raw = site.spec.get("terminationGracePeriodSeconds")
    if raw is not None and (isinstance(raw, bool) or not isinstance(raw, int)):
        # A string, a bool or a fraction is no integer the API takes: not overwritten.
        raise Refused(
            f"terminationGracePeriodSeconds is {str(raw)[:20]!r}, not a whole number of "
            "seconds: write the one you mean"
        )
    # A preStop that fails at once is worse than the sleep it replaces (CONTRACT §4).
    unheld = options.via == "image" and not options.binary_given
    for up in filter(None, (upstream_image(w.container) for w in wirings if unheld)):
        raise Refused(NOT_IN_UPSTREAM.format(up))
    return site.default_grace if raw is None else float(raw)


def _wire(
    site: Site,
    chosen: Sequence[tuple[dict[str, Node], EngineChoice]],
    options: Options,
    say: Say,
    lead: Wired | None,
    leads: bool,
) -> Wired:
    wirings = [_decide(site, c, engine, options.wait_params) for c, engine in chosen]
    for w in wirings:
        if lead is not None:  # a worker's hook reads its leader's engine
            w.engine, w.port, w.https, w.worker = lead.engine, lead.port, lead.https, True
            w.api_servers = None  # the leader's API servers, not its own
    given = _given_grace(site, options, wirings)
    grace, why, plans = _one_grace(wirings, given, lead, options.hook_binary)
    _write_grace(site, grace, given, why, say)
    added: list[str] = []
    for w, (early, applied) in zip(wirings, plans, strict=True):
        name = w.container.get("name")
        _say_changes(w, early, applied, say)
        if lead is None:
            for text in caveats(w.container, w.engine, w.argv, leads):
                say("warning", f"container {name}: {text}")
            added += _apply_engine_flags(w, applied, say, options.engine_version)
            if w.host is not None:  # after the variable it names: Kubernetes expands it
                _hook_env(w.container, "DRAINHOOK_HOST", w.host, say, BOUND)
        else:
            _hook_env(w.container, "DRAINHOOK_HOST", f"$({site.leader_address})", say, LEADER)
            _hook_env(w.container, "DRAINHOOK_ALLOW_REMOTE", "1", say, REMOTE)
            if "--exit-zero" not in {f[0].partition("=")[0] for f in w.hook.others}:
                say("changed", f"container {name}: --exit-zero ({EXIT_ZERO})")
        _set_prestop(w.container, _command(w, applied, options.hook_binary, lead is not None))
        bring_binary(site.spec, w.container, options)
    idle = plans[0][1].plan.at.idle_return
    summary = f"G {number(grace)}" if grace == given else f"G {number(given)} -> {number(grace)}"
    summary += f"; an idle Pod goes about {round(idle)} s after deletion"
    summary += f"; added {' '.join(added)}" if added else ""
    return Wired(grace, wirings[0].engine, wirings[0].port, wirings[0].https, summary)


# When an idle engine's hook returns on the default timeline, in whole seconds.
DEFAULT_IDLE = round(make_plan(wait_config()).at.idle_return)
# Why inject writes each of the hook's variables, and a worker's --exit-zero.
BOUND = "the engine listens on the Pod's IP alone: the hook reads it there"
LEADER = "a worker's hook waits on its leader's engine, at the address its platform sets"
REMOTE = "the leader is not this Pod's loopback"
EXIT_ZERO = (
    "a worker holds to its D once its leader has gone (CONTRACT §2): exit 0 keeps that "
    "out of FailedPreStopHook events; its summary still says why"
)


def _one_grace(
    wirings: Sequence[Wiring], given: float, lead: Wired | None, binary: str
) -> tuple[float, str, list[tuple[Applied, Applied]]]:
    """One grace for the Pod, the largest any advice asks for, and why; each hook's
    plans (its first, and the final one: a hook that asked for less is planned again
    with it and its advised R, so its floors are met)."""
    grace, why = _grace_floor(wirings, given, lead)
    first = [_config_for(w, grace, binary) for w in wirings]
    grace = max([grace, *(a.plan.config.grace for a in first)])
    if any(a.plan.config.grace == grace != given for a in first) and not why:
        why = "; ".join(ch.because[-1] for a in first for ch in a.changes if ch.field == "grace")
    plans = []
    for w, a in zip(wirings, first, strict=True):
        final = a
        if a.plan.config.grace != grace:
            w.hook.timeline["exit_reserve"] = a.plan.config.exit_reserve
            final = _config_for(w, grace, binary)
        plans.append((a, final))
    return grace, why, plans


def _hook_env(container: dict[str, Node], name: str, value: str, say: Say, why: str) -> None:
    """The hook's variable, said with why; one the container sets is the user's: kept,
    and named."""
    env = named_list(container, "env", ("lifecycle", "resources"))
    theirs = [e for e in env if isinstance(e, Mapping) and e.get("name") == name]
    if not theirs:
        env.append({"name": name, "value": value})
        say("changed", f"container {container.get('name')}: env {name}={value} ({why})")
    elif theirs[0] != {"name": name, "value": value}:
        why = f"{name} kept as the container sets it, not {value}: the hook reads the one kept"
        say("warning", f"container {container.get('name')}: {why}")


# A preStop whose binary the image does not hold fails at once, and the kubelet then
# sends SIGTERM at once: worse than the sleep it replaced (CONTRACT §4).
NOT_IN_UPSTREAM = (
    "--via image, but {} is an engine's own image, which holds no drainhook: its preStop "
    "would fail at once, SIGTERM at once; use --via image-volume --image REF (Kubernetes "
    ">= 1.35) or --via init --image REF, or an image FROM it that holds it at --binary PATH"
)


def _write_grace(site: Site, grace: float, given: float, why: str, say: Say) -> None:
    """terminationGracePeriodSeconds set to the one grace of the Pod, and said."""
    if "terminationGracePeriodSeconds" not in site.spec:
        left = "KServe's preset" if site.main == KSERVE_MAIN else "Kubernetes' default"
        say(
            "changed",
            f"terminationGracePeriodSeconds written: {number(grace)} "
            f"({why or left + ', written so that --grace visibly equals it'})",
        )
    elif grace != given:
        say("changed", f"terminationGracePeriodSeconds {number(given)} -> {number(grace)} ({why})")
    insert_before(site.spec, "terminationGracePeriodSeconds", int(grace), list(site.spec)[:1])


def _say_changes(w: Wiring, early: Applied, applied: Applied, say: Say) -> None:
    """The lines of one container's wiring: the advice's changes and warnings, the
    sleep it replaced."""
    name = w.container.get("name")
    for ch in early.changes:
        if ch.field != "grace":
            say("changed", f"container {name}: {ch.text()}")
    for warning in applied.plan.warnings:
        if warning.code != "vllm-shutdown-timeout":  # inject follows that advice itself
            say("warning", f"container {name}: {warning.code}: {warning.message}")
    if w.prestop == "sleep":
        kept = w.hook.timeline.get("settle")
        idle = round(applied.plan.at.idle_return)
        text = f"container {name}: preStop sleep {w.slept} (a blind wait) by drainhook wait"
        if kept:
            text += f", its {number(kept)}s kept as the settle (a router's measured propagation)"
            text += f": an idle Pod now goes about {idle} s after deletion, not {DEFAULT_IDLE}"
            text += " (lower --settle where routers drop a Pod sooner)"
        else:
            text += f": an idle Pod now goes about {idle} s after deletion, a busy one when done"
        say("replaced", text)


def _grace_floor(wirings: Sequence[Wiring], grace: float, lead: Wired | None) -> tuple[float, str]:
    """G, raised where the Pod needs more, and why: a sleep kept as the settle leaves
    the default timeline's time to drain after it (and R after that); a LeaderWorkerSet
    worker's deadline falls after its leader's kill."""
    why = ""
    for w in wirings:
        reserve = float(w.hook.timeline.get("exit_reserve", wait_config().exit_reserve))
        floors = []
        if w.prestop == "sleep" and (settle := w.hook.timeline.get("settle")) is not None:
            because = f"the replaced sleep's {number(settle)}s kept as the settle, then "
            because += f"{number(DRAIN_WINDOW)}s to drain and the exit reserve"
            floors.append((settle + DRAIN_WINDOW + reserve, because))
        if lead is not None:
            because = f"a worker's deadline falls {number(WORKER_MARGIN)}s after its leader's "
            because += "kill: the leader's grace + that + the worker's --exit-reserve"
            floors.append((lead.grace + WORKER_MARGIN + reserve, because))
        for floor, because in floors:
            if grace < floor:
                grace, why = floor, because
    return grace, why
