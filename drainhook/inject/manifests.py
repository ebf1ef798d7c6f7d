"""YAML manifests for `drainhook inject`, read one document at a time by libyaml
(PyYAML's C parser): each document's value, and the node tree it came from with
every node's place in the text, which drainhook.inject.splice edits in place (a
document left as it is is written back byte for byte). Loaded only by `inject`.
"""

from __future__ import annotations

import itertools
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from drainhook.errors import UsageError

SUFFIXES = (".yaml", ".yml")
# A document starts at a line `---` (optionally followed by a comment or content)
# at column 0, its directives (`%YAML 1.2`) before it; `...` ends one. None can
# sit inside a block scalar of a top-level key, whose lines are indented.
_MARKER = re.compile(r"^(---|\.\.\.)(?:[ \t].*)?$")
_DIRECTIVE = re.compile(r"^%[A-Z]")

# A parsed YAML value: plain dicts, lists and scalars whose element types no
# annotation carries, so a manifest's values are objects until checked (isinstance).
Node = object


@dataclass(frozen=True)
class Indent:
    """A file's block indentation, from the parent key: a nested mapping's, and a
    block sequence's dashes' (offset)."""

    mapping: int = 2
    offset: int = 2


@dataclass
class Document:
    """One YAML document of an input: its own text, where it came from, and its
    value once parsed (None for an empty document)."""

    source: str  # the path as given, or "-" for stdin
    index: int  # its place in the source, from 0
    text: str  # exactly as read: its directives and `---` line, when it has them
    data: Node
    indent: Indent
    node: yaml.Node | None = None  # what libyaml composed, with each node's marks
    # Each node's value as read (never changed): what an edit is measured against.
    values: dict[yaml.Node, Node] = field(default_factory=dict)

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


def split(text: str) -> list[str]:
    """The documents of a YAML stream, in order, each opening with its directives
    and `---` line when it has them; a document holding only comments or nothing
    is kept (it is written back as it was)."""
    docs: list[list[str]] = [[]]
    directives: list[str] = []  # between documents: the next one's
    for line in text.splitlines(keepends=True):
        bare = line.rstrip("\r\n")
        if _DIRECTIVE.match(bare) and (directives or _contentless(docs[-1])):
            directives.append(line)
        elif _MARKER.match(bare) and not line.startswith("..."):
            docs.append([*directives, line])
            directives = []
        else:
            docs[-1] += [*directives, line]
            directives = []
            if line.startswith("..."):
                docs.append([])
    docs[-1] += directives
    # The empty remainder before the first `---` or after a closing `...` is none.
    return ["".join(d) for d in docs if d] or [""]


def _contentless(lines: list[str]) -> bool:
    """Whether a document's lines so far hold no content: comments and blanks only."""
    return all(not ln.strip() or ln.lstrip().startswith("#") for ln in lines)


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
    return Indent(m, offset)


# The scalars read as what they say; any other tag (a timestamp, `!!binary`, an
# application's own) is kept as its text, as Kubernetes' own decoding does.
_TYPED = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool")
_SAFE = yaml.constructor.SafeConstructor()
# libyaml's parser (PyYAML's wheels carry it); PyYAML's own where a build lacks it.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def construct(node: yaml.Node, memo: dict[yaml.Node, Node]) -> Node:
    """A node's value as plain dicts, lists and scalars; memo maps each node to its
    value (an alias is the same value twice, never a copy)."""
    if node in memo:
        return memo[node]
    if isinstance(node, yaml.ScalarNode):
        if node.tag in _TYPED:
            memo[node] = _SAFE.yaml_constructors[node.tag](_SAFE, node)
        else:
            memo[node] = None if node.tag == "tag:yaml.org,2002:null" else node.value
    elif isinstance(node, yaml.SequenceNode):
        items: list[Node] = []
        memo[node] = items
        items.extend(construct(item, memo) for item in node.value)
    else:
        pairs: dict[Node, Node] = {}
        memo[node] = pairs
        for k, v in node.value:
            key = construct(k, memo)
            if isinstance(key, (dict, list)):  # Helm's `{{ x }}` read as a flow map
                key = ("a mapping or list", k.start_mark.line + 1)  # never expanded
            if key in pairs:  # named, never its values (a Secret's)
                problem = f'duplicate key "{str(key)[:40]}"'
                raise yaml.constructor.ConstructorError(None, None, problem, k.start_mark)
            pairs[key] = construct(v, memo)
    return memo[node]


# A Go template action alone on its line (`{{- if .Values.x }}`, `{{ end }}`): what a
# chart's template holds and no YAML parser reads.
CHART_ACTION = re.compile(r"^[ \t]*(\{\{-?.*?-?\}\})[ \t]*$", re.M)


def parse(source: str, text: str) -> list[Document]:
    """Every document of one input, parsed; a YAML error is a usage error naming it."""
    indent = guess_indent(text)
    docs = []
    line = 0  # the line each document starts on, from 0
    for n, part in enumerate(split(text)):
        try:
            node = yaml.compose(part.replace("\r\n", "\n"), Loader=_LOADER)
            values: dict[yaml.Node, Node] = {}
            data = construct(node, values) if node is not None else None
        except yaml.MarkedYAMLError as exc:
            if (action := CHART_ACTION.search(part)) is not None:  # a Helm chart's template
                row = line + part.count("\n", 0, action.start()) + 1
                raise UsageError(
                    f"{source}#{n}: an unrendered chart template ({action.group(1)[:40]} at "
                    f"line {row}): render it first (helm template RELEASE CHART | drainhook "
                    "inject ...)"
                ) from None
            problem = str(exc.problem or exc.context)
            if "maximum nesting depth" in problem:
                problem = "nested too deep to read"
            mark = exc.problem_mark
            at = f" at line {line + mark.line + 1}" if mark is not None else ""
            raise UsageError(f"{source}#{n}: not YAML{at}: {problem}") from None
        except yaml.reader.ReaderError as exc:  # a control character: NUL, BEL, ESC
            row = line + part.replace("\r\n", "\n").count("\n", 0, exc.position) + 1
            raise UsageError(f"{source}#{n}: not YAML at line {row}: a control character") from None
        except RecursionError:
            raise UsageError(f"{source}#{n}: nested too deep to read") from None
        if node is not None:  # the value to change: built again, apart from the one read
            data = construct(node, {})
        docs.append(Document(source, n, part, data, indent, node, values))
        line += part.count("\n")
    return docs


def join(texts: Sequence[str]) -> str:
    """Documents of several inputs as one stream: a `---` between two where the
    second does not open with one already; before directives, a `...` where a
    document is open (YAML's rule)."""
    out: list[str] = []
    open_ = False  # whether a document is open: content, or a `---`, since the last `...`
    for text in texts:
        if out and not out[-1].endswith("\n"):
            out.append("\n")
        if _DIRECTIVE.match(text) and open_:
            out.append("...\n")
        elif out and not _DIRECTIVE.match(text) and not text.startswith("---"):
            out.append("---\n")
            open_ = True
        out.append(text)
        content = [ln for ln in text.splitlines() if not _contentless([ln])]
        open_ = not content[-1].startswith("...") if content else open_
    return "".join(out)


def insert_before(m: dict[str, Node], key: str, value: Node, before: Sequence[str]) -> None:
    """Set m[key]: in place when it is there, else before the first of `before`
    that m holds, else at the end."""
    at = next((b for b in before if b in m), None)
    if key in m or at is None:
        m[key] = value
        return
    pairs = list(m.items())
    m.clear()
    for k, v in pairs:
        if k == at:
            m[key] = value
        m[k] = v


def aliased(*values: Node) -> set[int]:
    """Which values (their indices) hold one mapping or list twice, or one that
    another of them holds (a YAML alias, `*name`, within a value or across a
    List's items): walked once each, never expanded (nine levels of ten aliases
    are 10^9 values)."""
    owner: dict[int, int] = {}
    found: set[int] = set()
    for index, value in enumerate(values):
        todo = [value]
        while todo:
            node = todo.pop()
            if isinstance(node, (Mapping, list)):
                if id(node) in owner:
                    found |= {index, owner[id(node)]}
                    continue
                owner[id(node)] = index
                todo.extend(node.values() if isinstance(node, Mapping) else node)
    return found


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
