"""A changed document written as its own text with the changes spliced in (CONTRACT
§4: the diff a reviewer reads holds the wiring and nothing else). The value
`inject` changed is compared with the nodes libyaml read, node by node: an equal
node keeps its text; a changed scalar is rewritten in its own quoting; a key or an
item added is written in the file's indentation beside its siblings; one taken
away goes with its lines, its comment lines staying. Linear in the document.
"""

from __future__ import annotations

import json
import re
from difflib import SequenceMatcher

import yaml

from drainhook.inject.manifests import Document, Indent, Node

# What a plain scalar resolves to by its first character (a number, a bool, null).
_IMPLICIT = yaml.resolver.Resolver.yaml_implicit_resolvers
# A word written plain: no blank, no indicator first, nothing a flow list splits on.
_PLAIN = re.compile(r"[\w./$(-][\w./$()=+@%:-]*")


def scalar(value: Node, quoted: bool = False, flow: bool = False) -> str:
    """A scalar as YAML: a string plain where it reads back as that string (and
    `quoted` does not ask for double quotes, as its siblings have), else quoted."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    text = str(value)
    plain = (
        not quoted
        and _PLAIN.fullmatch(text) is not None
        and text != "-"
        and not text.endswith(":")
        and not (flow and ":" in text)
        and not any(rx.match(text) for _, rx in _IMPLICIT.get(text[:1], ()))
    )
    return text if plain else json.dumps(text, ensure_ascii=False)


def _flow(value: Node, quoted: bool = False) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v, quoted) for v in value) + "]"
    if isinstance(value, dict):
        pairs = (f"{scalar(k, flow=True)}: {_flow(v, quoted)}" for k, v in value.items())
        return "{" + ", ".join(pairs) + "}"
    return scalar(value, quoted, flow=True)


def _inline(value: Node, quoted: bool = False) -> str:
    """A value on its key's or its dash's line: a scalar, or an empty collection."""
    return _flow(value, quoted) if isinstance(value, (dict, list)) else scalar(value, quoted)


def _block(value: Node) -> bool:
    return isinstance(value, (dict, list)) and len(value) > 0


def lines(value: Node, col: int, indent: Indent, quoted: bool = False) -> list[str]:
    """A mapping's pairs or a list's items in block style, each line indented: a
    mapping's keys at col, a list's dashes at col."""
    out: list[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            head = " " * col + scalar(k) + ":"
            if _block(v):
                deeper = col + (indent.mapping if isinstance(v, dict) else indent.offset)
                out += [head, *lines(v, deeper, indent)]
            else:
                out.append(f"{head} {_inline(v)}")
        return out
    assert isinstance(value, list)
    for item in value:
        if _block(item):
            inner = lines(item, col + 2, indent)
            out += [" " * col + "- " + inner[0][col + 2 :], *inner[1:]]
        else:
            out.append(" " * col + "- " + _inline(item, quoted))
    return out


class Splice:
    """The edits that turn a document's text into its changed value's, as
    (start, end, text) on the text, found by walking the nodes beside the value."""

    def __init__(self, body: str, doc: Document) -> None:
        self.body, self.values, self.indent = body, doc.values, doc.indent
        self.edits: list[tuple[int, int, str]] = []

    def text(self) -> str:
        out, at = [], 0
        for start, end, text in sorted(self.edits, key=lambda e: (e[0], e[1])):
            assert start >= at, "two edits overlap"
            out += [self.body[at:start], text]
            at = end
        return "".join([*out, self.body[at:]])

    # -- places in the text ------------------------------------------------------

    def _line_start(self, at: int) -> int:
        return self.body.rfind("\n", 0, at) + 1

    def _line_end(self, at: int) -> int:
        end = self.body.find("\n", at)
        return len(self.body) if end < 0 else end

    def _end(self, node: yaml.Node, key: yaml.Node | None = None) -> int:
        """Where a node's own text ends: its last scalar's or flow collection's end
        (a block collection's end mark is the next token's start, past comments)."""
        if isinstance(node, yaml.MappingNode) and node.value and not node.flow_style:
            return self._end(node.value[-1][1], node.value[-1][0])
        if isinstance(node, yaml.SequenceNode) and node.value and not node.flow_style:
            return self._end(node.value[-1])
        if isinstance(node, yaml.ScalarNode) and node.value == "" and not node.style:
            return key.end_mark.index if key is not None else node.start_mark.index
        end = node.end_mark.index
        while end > node.start_mark.index and self.body[end - 1] in " \t\n":
            end -= 1  # a block scalar's end mark is past its last line break
        return end

    def _dash(self, item: yaml.Node) -> int:
        """Where the `- ` of a block list's item is."""
        at = item.start_mark.index - 1
        while at > 0 and self.body[at] in " \t\n":
            at -= 1
        return at

    def _comments(self, start: int, end: int) -> list[str]:
        """The comment lines between start and end, as they are."""
        text = self.body[self._line_start(start) : end]
        return [ln for ln in text.split("\n")[1:] if ln.strip().startswith("#")]

    def _delete_lines(self, start: int, end: int) -> None:
        """Lines from start's to end's taken away, their comment lines kept."""
        stop = min(self._line_end(end) + 1, len(self.body))
        gone = self.body[start:stop].splitlines(keepends=True)
        self.edits.append((start, stop, "".join(ln for ln in gone if ln.strip().startswith("#"))))

    def _alone(self, node: yaml.Node) -> bool:
        """Whether a node is the first thing on its line."""
        at = node.start_mark.index
        return self.body[self._line_start(at) : at].strip() == ""

    # -- the walk ------------------------------------------------------------------

    def node(self, node: yaml.Node, new: Node, key: yaml.Node | None, dash: int | None) -> None:
        old = self.values[node]
        if old == new and type(old) is type(new):
            return
        block = not getattr(node, "flow_style", True)
        if isinstance(node, yaml.MappingNode) and isinstance(new, dict) and block:
            done = self._mapping(node, new)
        elif isinstance(node, yaml.SequenceNode) and isinstance(new, list):
            done = self._sequence(node, new) if block else self._flow_words(node, new)
        else:
            done = False
        if not done:
            self._replace(node, new, key, dash)

    def _mapping(self, node: yaml.MappingNode, new: dict[Node, Node]) -> bool:
        pairs = {self.values[k]: (k, v) for k, v in node.value}
        kept = [k for k, _ in node.value if self.values[k] in new]
        ours = set(kept)
        first = node.value[0][0]
        if not kept or (first not in kept and not self._alone(first)):
            return False  # written whole (a first key after its item's dash goes)
        for k, v in node.value:
            if k not in ours:
                self._delete_lines(self._line_start(k.start_mark.index), self._end(v, k))
            else:
                self.node(v, new[self.values[k]], k, None)
        run: list[Node] = []
        for name in new:
            if name not in pairs:
                run.append(name)
            elif run:
                k = pairs[name][0]
                col = k.start_mark.column
                text = lines({r: new[r] for r in run}, col, self.indent)
                self.edits.append((k.start_mark.index, k.start_mark.index, self._at(text, col)))
                run = []
        if run:
            last = kept[-1]
            col = last.start_mark.column
            text = lines({r: new[r] for r in run}, col, self.indent)
            self._after(self._end(pairs[self.values[last]][1], last), text)
        return True

    def _sequence(self, node: yaml.SequenceNode, new: list[Node]) -> bool:
        items = node.value
        old = [repr(self.values[i]) for i in items]
        ops = SequenceMatcher(None, old, [repr(v) for v in new], autojunk=False).get_opcodes()
        whole = [(i1, i2) == (0, len(items)) and j2 - j1 != i2 - i1 for _, i1, i2, j1, j2 in ops]
        if any(whole):
            return False  # nothing of it is kept: written whole
        dash = self._dash(items[0])
        col = dash - self._line_start(dash)
        quoted = all(isinstance(i, yaml.ScalarNode) and i.style == '"' for i in items)
        for op, i1, i2, j1, j2 in ops:
            if op == "equal":
                continue
            if op == "replace" and i2 - i1 == j2 - j1:
                for i, j in zip(range(i1, i2), range(j1, j2), strict=True):
                    self.node(items[i], new[j], None, col)
                continue
            for item in items[i1:i2]:
                start = self._dash(item)
                self._delete_lines(self._line_start(start), self._end(item))
            if j1 == j2:
                continue
            text = lines(new[j1:j2], col, self.indent, quoted)
            if i2 < len(items):
                at = self._dash(items[i2])
                self.edits.append((at, at, self._at(text, col)))
            else:
                self._after(self._end(items[i1 - 1]), text)
        return True

    def _flow_words(self, node: yaml.SequenceNode, new: list[Node]) -> bool:
        """A flow list of words changed word by word, or words added at its end;
        every word it had keeps its text."""
        items, old = node.value, [self.values[i] for i in node.value]
        if not items or any(_block(v) for v in new):
            return False
        if len(new) == len(items):
            for item, value in zip(items, new, strict=True):
                self.node(item, value, None, None)
            return True
        if len(new) < len(items) or new[: len(items)] != old:
            return False
        quoted = all(getattr(i, "style", None) == '"' for i in items)
        end = self._end(items[-1])
        added = "".join(", " + _flow(v, quoted) for v in new[len(items) :])
        self.edits.append((end, end, added))
        return True

    def _after(self, end: int, text: list[str]) -> None:
        """Lines written after the line `end` is on (at the next line's start: what
        is taken away before it ends there)."""
        at = self._line_end(end)
        if at == len(self.body):
            self.edits.append((at, at, "\n" + "\n".join(text)))
        else:
            self.edits.append((at + 1, at + 1, "\n".join(text) + "\n"))

    def _at(self, text: list[str], col: int) -> str:
        """Lines written where a sibling at col starts: the first at the sibling's
        place, the sibling on a line of its own after them."""
        return "\n".join([text[0][col:], *text[1:]]) + "\n" + " " * col

    def _replace(self, node: yaml.Node, new: Node, key: yaml.Node | None, dash: int | None) -> None:
        """A node written anew: in flow style where it was (a list of words stays
        one line) or where it is a scalar or empty, else in block style; the
        comment lines it held follow it."""
        start, end = node.start_mark.index, self._end(node, key)
        flow = isinstance(node, yaml.ScalarNode) or getattr(node, "flow_style", False)
        inline = not _block(new) or (flow and not any(_block(v) for v in _inner(new)))
        text = _one_line(node, new) if inline else ""
        if key is not None and (not inline or not flow or not str(node.value)):
            # After the key's colon: on its line, or the block below it.
            col = key.start_mark.column
            col += self.indent.mapping if isinstance(new, dict) else self.indent.offset
            start = self.body.index(":", key.end_mark.index) + 1
            end = max(start, end)
            text = " " + text if inline else "\n" + "\n".join(lines(new, col, self.indent))
        elif not inline:  # an item's, after its dash; or the document's own
            col = 0 if dash is None else dash + 2
            text = "\n".join(lines(new, col, self.indent))[col:]
            if dash is None and not self._alone(node):  # the document's, on its `---` line
                start, text = len(self.body[:start].rstrip(" \t")), "\n" + text
        kept = "".join("\n" + ln for ln in self._comments(start, end))
        self.edits.append((start, end, text + kept))


def _one_line(node: yaml.Node, new: Node) -> str:
    """A value written on one line, quoted as the node it replaces was."""
    if isinstance(node, yaml.ScalarNode) and node.style == "'":
        return "'" + str(new).replace("'", "''") + "'" if isinstance(new, str) else _flow(new)
    items = node.value if isinstance(node, yaml.SequenceNode) else [node]
    return _flow(new, bool(items) and all(getattr(i, "style", None) == '"' for i in items))


def _inner(value: Node) -> list[Node]:
    if isinstance(value, dict):
        return list(value.values())
    return list(value) if isinstance(value, list) else []


def render(doc: Document) -> str:
    """A changed document's text: its own, with only what changed rewritten (CRLF
    stays CRLF)."""
    body = doc.text.replace("\r\n", "\n")
    bom = "\ufeff" if body.startswith("\ufeff") else ""  # libyaml's marks start after it
    splice = Splice(body[len(bom) :], doc)
    if doc.node is not None:
        splice.node(doc.node, doc.data, None, None)
    text = bom + splice.text()
    return text.replace("\r\n", "\n").replace("\n", "\r\n") if "\r\n" in doc.text else text
