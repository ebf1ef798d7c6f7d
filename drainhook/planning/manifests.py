"""YAML manifests for `drainhook inject`, parsed one document at a time with
ruamel.yaml's round trip (comments, key order, quoting and block styles kept): a
document left as it is is written back byte for byte. Loaded only by `inject`.
"""

from __future__ import annotations

import io
import itertools
import re
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from pathlib import Path

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError

from drainhook.errors import UsageError

SUFFIXES = (".yaml", ".yml")
# A document starts at a line `---` (optionally followed by a comment or content)
# at column 0; `...` ends one. Neither can sit inside a block scalar of a
# top-level key, whose lines are indented.
_MARKER = re.compile(r"^(---|\.\.\.)(?:[ \t].*)?$")

# A parsed YAML value: ruamel's round-trip maps, sequences and scalars carry no
# element types, so a manifest's values are objects until checked (isinstance).
Node = object


@dataclass(frozen=True)
class Indent:
    """A file's block indentation, as ruamel.yaml's `indent()` takes it."""

    mapping: int = 2
    sequence: int = 4
    offset: int = 2


@dataclass
class Document:
    """One YAML document of an input: its own text, where it came from, and its
    value once parsed (None for an empty document)."""

    source: str  # the path as given, or "-" for stdin
    index: int  # its place in the source, from 0
    text: str  # exactly as read: the `---` line that opens it, when there is one
    marker: str  # that line ('' for a first document without one)
    data: Node
    indent: Indent

    @property
    def where(self) -> str:
        return f"{self.source}#{self.index}"


def inputs(paths: Sequence[str]) -> Iterator[tuple[str, str]]:
    """(name, text) of each input: files as given, the YAML files of a directory
    (recursively, sorted), `-` or nothing for stdin."""
    for given in paths or ["-"]:
        if given == "-":  # read as bytes: text mode would turn CRLF into LF
            yield "-", _decoded(sys.stdin.buffer.read(), "stdin")
            continue
        path = Path(given)
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.suffix in SUFFIXES and p.is_file())
            for file in files:
                yield str(file), _read(file)
        else:
            yield given, _read(path)


def _read(path: Path) -> str:
    try:
        return _decoded(path.read_bytes(), str(path))
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None


def _decoded(data: bytes, name: str) -> str:
    """The text as it is, its line endings included (CRLF is written back as CRLF)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"cannot read {name}: {exc}") from None


def split(text: str) -> list[tuple[str, str]]:
    """The documents of a YAML stream as (marker line, body), in order; a document
    holding only comments or nothing is kept (it is written back as it was)."""
    docs: list[tuple[str, list[str]]] = [("", [])]
    for line in text.splitlines(keepends=True):
        if _MARKER.match(line.rstrip("\r\n")):
            if line.startswith("..."):
                docs[-1][1].append(line)
                docs.append(("", []))
            else:
                docs.append((line, []))
        else:
            docs[-1][1].append(line)
    out = [(marker, "".join(body)) for marker, body in docs]
    # The empty remainder before the first `---` or after a closing `...` is none.
    return [d for d in out if d[0] or d[1]] or [("", "")]


def guess_indent(text: str) -> Indent:
    """The indentation of a file's block mappings and sequences, from the first
    nested mapping and the first block sequence; the defaults where it shows none."""
    mapping = sequence_offset = None
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    for above, below in itertools.pairwise(lines):
        if not above.rstrip().endswith(":") or above.lstrip().startswith("- "):
            continue
        top = len(above) - len(above.lstrip())
        deeper = len(below) - len(below.lstrip())
        if below.lstrip().startswith("- "):
            if sequence_offset is None and deeper >= top:
                sequence_offset = deeper - top
        elif mapping is None and deeper > top:
            mapping = deeper - top
        if mapping is not None and sequence_offset is not None:
            break
    m = mapping or 2
    offset = 2 if sequence_offset is None else sequence_offset
    return Indent(m, offset + 2, offset)


def _yaml(indent: Indent) -> YAML:
    y = YAML(typ="rt")
    y.preserve_quotes = True
    y.width = 4096  # never fold a long line the input did not fold
    y.indent(mapping=indent.mapping, sequence=indent.sequence, offset=indent.offset)
    return y


def parse(source: str, text: str) -> list[Document]:
    """Every document of one input, parsed; a YAML error is a usage error naming it."""
    indent = guess_indent(text)
    docs = []
    line = 0  # the line each document's body starts on, from 0
    for n, (marker, body) in enumerate(split(text)):
        line += marker.count("\n")
        try:
            data = _yaml(indent).load(body)
        except YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            # ruamel names a duplicate key's two values: a Secret's are never echoed.
            problem = problem.split(" with value ")[0]
            mark = getattr(exc, "problem_mark", None)
            at = f" at line {line + mark.line + 1}" if mark is not None else ""
            raise UsageError(f"{source}#{n}: not YAML{at}: {problem}") from None
        except RecursionError:
            raise UsageError(f"{source}#{n}: nested too deep to read") from None
        docs.append(Document(source, n, marker + body, marker, data, indent))
        line += body.count("\n")
    return docs


def serialised(doc: Document) -> list[str]:
    """The document's value as ruamel.yaml writes it, line by line (taken before a
    change, `dump` applies what the change does to it)."""
    out = io.StringIO()
    _yaml(doc.indent).dump(doc.data, out)
    return out.getvalue().splitlines(keepends=True)


def dump(doc: Document, before: list[str]) -> str:
    """A changed document's text: its own lines, only those the change touches
    rewritten (CRLF stays CRLF). The round trip re-flows lines nobody changed, so
    only the difference between `before` and the document serialised now is applied
    to the original (`_patched`), a List item by item: linear in the input."""
    body = doc.text[len(doc.marker) :].replace("\r\n", "\n")
    after = serialised(doc)
    lines = body.splitlines(keepends=True)
    pieces = zip(*(itertools.pairwise(c) for c in _item_cuts(doc, before, after)), strict=True)
    text = doc.marker + "".join(
        _patched("".join(lines[o1:o2]), before[b1:b2], after[a1:a2])
        for (o1, o2), (b1, b2), (a1, a2) in pieces
    )
    return text.replace("\r\n", "\n").replace("\n", "\r\n") if "\r\n" in doc.text else text


def _item_cuts(doc: Document, before: list[str], after: list[str]) -> list[list[int]]:
    """Where each item of a List starts in the original, `before` and `after` (the
    ends added); the whole document, one piece, when the three do not show the same
    items (or it is no List)."""
    whole = [[0, sys.maxsize], [0, len(before)], [0, len(after)]]
    data = doc.data
    if not isinstance(data, CommentedMap) or data.get("kind") != "List":
        return whole
    items = data.get("items")
    if not isinstance(items, CommentedSeq) or not items:
        return whole
    original = [items.lc.item(i)[0] for i in range(len(items))]
    dash = " " * doc.indent.offset + "- "
    cuts = [[0, *original, sys.maxsize]]
    for lines in (before, after):
        cuts.append([0, *(n for n, ln in enumerate(lines) if ln.startswith(dash)), len(lines)])
    ok = all(len(c) == len(items) + 2 for c in cuts) and original == sorted(set(original))
    return cuts if ok else whole


def _patched(original: str, before: list[str], after: list[str]) -> str:
    """`original` with the changes from `before` to `after` (two serialisations)
    applied at the original's lines that `before` stands for; a change among lines
    the round trip joins or splits takes the fewest of them, as serialised."""
    lines = original.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"  # as serialised: the last line ends
    # A line of `before` -> its line in the original (the same, or re-padded in place).
    at: dict[int, int] = {}
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, before, lines, autojunk=False).get_opcodes():
        if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
            at.update((i1 + k, j1 + k) for k in range(i2 - i1))
    ops = SequenceMatcher(None, before, after, autojunk=False).get_opcodes()
    raw = [op[1:] for op in ops if op[0] != "equal"]
    hunks: list[list[int]] = []  # [i1, i2, j1, j2]: before[i1:i2] becomes after[j1:j2]
    for n, (i1, i2, j1, j2) in enumerate(raw):
        # Widened over unchanged lines the original does not have; two that meet: one.
        floor = hunks[-1][1] if hunks else 0
        while i1 > floor and i1 - 1 not in at:
            i1, j1 = i1 - 1, j1 - 1
        ceiling = raw[n + 1][0] if n + 1 < len(raw) else len(before)
        while i2 < ceiling and i2 not in at:
            i2, j2 = i2 + 1, j2 + 1
        if hunks and i1 <= hunks[-1][1]:
            hunks[-1][1], hunks[-1][3] = i2, j2
        else:
            hunks.append([i1, i2, j1, j2])
    out, done = [], 0
    for i1, i2, j1, j2 in hunks:
        start = at[i1 - 1] + 1 if i1 > 0 else 0
        end = at[i2] if i2 < len(before) else len(lines)
        # What is written is indented as its siblings are in the original.
        moved = [
            (k, _indent(before[k]), _indent(lines[at[k]]) - _indent(before[k]))
            for k in sorted(at)
            if before[k].strip()
        ]
        above = [(i, d) for k, i, d in moved if k < i1]
        below = [(i, d) for k, i, d in moved if k >= i2]
        out += lines[done:start] + _shifted(after[j1:j2], above, below)
        done = end
    return "".join(out + lines[done:])


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _shifted(
    new: list[str], above: list[tuple[int, int]], below: list[tuple[int, int]]
) -> list[str]:
    """New lines moved as the original moved their siblings: the nearest before them
    in their parent, else the first after them, else as their parent moved."""
    out = []
    for line in new:
        indent = _indent(line)
        shift = 0
        if line.strip():
            shift = _sibling_shift(indent, reversed(above), below)
            above.append((indent, shift))
        out.append(" " * (indent + shift) + line[indent:] if shift else line)
    return out


def _sibling_shift(
    indent: int, above: Iterable[tuple[int, int]], below: Iterable[tuple[int, int]]
) -> int:
    parent = 0
    for i, shift in above:
        if i <= indent:
            if i == indent:
                return shift
            parent = shift
            break
    for i, shift in below:
        if i <= indent:
            return shift if i == indent else parent
    return parent


def join(texts: Sequence[str]) -> str:
    """Documents of several inputs as one stream: a `---` between two where the
    second does not open with one already."""
    out: list[str] = []
    for text in texts:
        if out:
            if not out[-1].endswith("\n"):
                out.append("\n")
            if not text.startswith("---"):
                out.append("---\n")
        out.append(text)
    return "".join(out)


# -- building values that serialise as the rest of a manifest ----------------------


def mapping(*pairs: tuple[str, Node]) -> CommentedMap:
    m = CommentedMap()
    for k, v in pairs:
        m[k] = v
    return m


def sequence(items: Sequence[Node]) -> CommentedSeq:
    s = CommentedSeq()
    s.extend(items)
    return s


def insert_before(m: CommentedMap, key: str, value: Node, before: Sequence[str]) -> None:
    """Set m[key]: in place when it is there, else before the first of `before`
    that m holds, else at the end."""
    if key in m:
        m[key] = value
        return
    keys = list(m)
    for b in before:
        if b in keys:
            m.insert(keys.index(b), key, value)
            return
    m[key] = value


def aliased(value: Node) -> bool:
    """Whether a parsed value holds one mapping or list twice (a YAML alias, `*name`):
    walked once each, never expanded (nine levels of ten aliases are 10^9 values)."""
    seen: set[int] = set()
    todo = [value]
    while todo:
        node = todo.pop()
        if isinstance(node, (Mapping, list)):
            if id(node) in seen:
                return True
            seen.add(id(node))
            todo.extend(node.values() if isinstance(node, Mapping) else node)
    return False


def plain_data(value: Node) -> Node:
    """A parsed value as plain dicts, lists and scalars (order-blind mappings)."""
    if isinstance(value, Mapping):
        return {str(k): plain_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_data(v) for v in value]
    if isinstance(value, str):
        return str(value)
    return value
