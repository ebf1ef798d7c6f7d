"""`drainhook inject`: the hook wired into a user's own manifests (CONTRACT §4), as
a text transform: YAML documents in, every document out, in order, each engine
container given the preStop `plan` would write and the engine flags its advice
names; a document it cannot wire is written unchanged, with why on stderr.
Which kinds: drainhook.inject.kinds; one group's wiring: drainhook.inject.wire.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from drainhook import exits
from drainhook.inject import manifests, splice
from drainhook.inject.kinds import groups, unwired, wired_kind
from drainhook.inject.manifests import Document, Node, templated
from drainhook.inject.options import Level, Message, Options, Refused
from drainhook.inject.wire import wire_group
from drainhook.inject.workloads import engine_containers


@dataclass
class Outcome:
    """One document's output: its text, whether inject changed or refused it, and
    what it says of it on stderr."""

    text: str
    changed: bool
    refused: bool
    messages: list[Message]


def _described(where: str, data: Node) -> str:
    if isinstance(data, Mapping):
        meta = data.get("metadata")
        name = meta.get("name") if isinstance(meta, Mapping) else None
        return f"{where} {data.get('kind', '?')}/{name or '?'}"
    return where


def inject_document(doc: Document, options: Options) -> Outcome:
    """One document, wired: its new text, or its own text when nothing changes.
    A List's items are wired, and named, one by one."""
    data = doc.data
    kind = (data.get("apiVersion"), data.get("kind")) if isinstance(data, Mapping) else None
    items = data.get("items") if kind == ("v1", "List") and isinstance(data, Mapping) else None
    if isinstance(items, list) and isinstance(data, Mapping):
        units = list(enumerate(items))
        # An item is read alone unless an alias ties it to itself, to another item
        # or to the List around them (its index past the items).
        held = manifests.aliased(*items, {k: v for k, v in data.items() if k != "items"})
    else:
        units, held = [(-1, data)], {-1} if manifests.aliased(data) else set()
    messages: list[Message] = []
    refused = changed = False
    for i, unit in units:  # a List's items (what kubectl get -o yaml prints) one by one
        where = _described(f"{doc.where}[{i}]" if i >= 0 else doc.where, unit)
        if i in held:
            ours = wired_kind(unit)  # else named, not read
            text = "YAML aliases to a mapping or a list: inject does not expand them; "
            text += "inject what a renderer that does writes (`kubectl kustomize DIR`, "
            text += "`yq 'explode(.)'`)"
            messages.append(Message(where, "refused" if ours else "skipped", text))
            refused = refused or ours
            continue
        wired, said, no = _wired(where, unit, options)
        messages, refused = messages + said, refused or no
        if wired is not None:
            changed = True
            if i >= 0 and isinstance(items, list):
                items[i] = wired
            else:
                doc = dataclasses.replace(doc, data=wired)
    if not changed:
        return Outcome(doc.text, False, refused, messages)
    return Outcome(splice.render(doc), True, refused, messages)


def _wired(where: str, data: Node, options: Options) -> tuple[Node, list[Message], bool]:
    """One workload: its wired value (None: leave it as it is), the lines said of it,
    and whether it was refused."""
    messages: list[Message] = []

    def say(level: Level, text: str) -> None:
        messages.append(Message(where, level, text))

    work = copy.deepcopy(data)
    try:
        found = groups(work, options)
        sites = [s for g in found for s in (g.lead, *g.workers)]
        if any(engine_containers(s, options) for s in sites):
            _unrendered(data)
            for site in sites:  # an operator's router, gateway: named
                if site.named and site.spec and not engine_containers(site, options):
                    text = f"{site.named} holds no engine container (a router, a gateway)"
                    say("skipped", f"{site.path}: {text}: left as it is")
        injected = [n for g in found for n in wire_group(g, options, say)]
    except Refused as exc:
        return None, [Message(where, "refused", str(exc))], True
    if not found and isinstance(data, Mapping) and (line := unwired(data)) is not None:
        return None, [Message(where, "skipped", line)], False
    if not injected or work == data:
        return None, messages, False
    return work, [Message(where, "injected", "; ".join(injected)), *messages], False


def _unrendered(data: Node) -> None:
    """A workload to wire that holds template expressions is refused (CONTRACT §4)."""
    if held := list(templated(data)):
        shown = "; ".join(held[:3]) + ("; ..." if len(held) > 3 else "")
        raise Refused(
            f"unrendered: template expressions ({shown}); run inject on what the "
            "template renders (helm template, kustomize build, envsubst)"
        )


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


def run_inject(paths: Sequence[str], options: Options) -> Injected:
    """`drainhook inject`: read and wire; what to write, and the exit code."""
    options.check()
    return inject_texts(list(manifests.inputs(paths)), options)
