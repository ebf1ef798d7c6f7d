"""drainhook.inject.splice on its own: whatever a change does to a document's value
(a scalar set, a key added or taken away, an item added, replaced or dropped, a
value replaced whole), the text it writes reads back as exactly that value, and
a second pass over it changes nothing. The documents are the repository's own
real-shaped manifests (comments, flow collections, block scalars, CRLF, both
sequence indentations); the changes are drawn by hypothesis, derandomized."""

from __future__ import annotations

import copy
import dataclasses
import random
import typing

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drainhook.inject import manifests, splice
from tests.support.injecting import MANIFESTS
from tests.support.process import ROOT

FILES = [
    *sorted(MANIFESTS.glob("*.yaml")),
    *sorted((MANIFESTS / "mixed").glob("*.yaml")),
    *sorted((ROOT / "examples" / "plain").glob("*.yaml")),
]
DOCS = [
    d
    for path in FILES
    for d in manifests.parse(path.name, path.read_bytes().decode())
    if isinstance(d.data, dict)
]
SETTINGS = settings(
    max_examples=500,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
NEW = ["x", "30", 45, True, None, "a b: c", "--flag", {"k": "v", "n": [1, "2"]}, [], {}, ["w"]]


def places(value: object) -> list[object]:
    """Every dict and list in a value."""
    out: list[object] = []
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, (dict, list)):
            out.append(v)
            todo.extend(v.values() if isinstance(v, dict) else v)
    return out


def change(value: object, rng: random.Random) -> None:
    """One change at a place drawn from the value."""
    target = rng.choice(places(value))
    new = copy.deepcopy(rng.choice(NEW))
    if isinstance(target, dict):
        keys = list(target)
        what = rng.choice(["set", "add", "insert", "drop"] if keys else ["add"])
        if what == "set":
            target[rng.choice(keys)] = new
        elif what == "add":
            target[f"new{rng.randrange(100)}"] = new
        elif what == "insert":  # before a key it holds, as inject's insert_before does
            manifests.insert_before(target, f"new{rng.randrange(100)}", new, [rng.choice(keys)])
        elif len(keys) > 1:
            del target[rng.choice(keys)]
    elif isinstance(target, list):
        what = rng.choice(["set", "append", "insert", "drop"] if target else ["append"])
        at = rng.randrange(len(target)) if target else 0
        if what == "set":
            target[at] = new
        elif what == "append":
            target.append(new)
        elif what == "insert":
            target.insert(at, new)
        elif len(target) > 1:
            del target[at]


def rendered(doc: manifests.Document, value: object) -> str:
    return splice.render(dataclasses.replace(doc, data=value))


@SETTINGS
@given(st.integers(0, len(DOCS) - 1), st.integers(0, 2**32), st.integers(1, 8))
def test_the_text_written_reads_back_as_the_changed_value(n: int, seed: int, k: int) -> None:
    doc = DOCS[n]
    rng = random.Random(seed)
    value = copy.deepcopy(doc.data)
    for _ in range(k):
        change(value, rng)
    text = rendered(doc, value)
    (back,) = manifests.parse("out", text)
    assert back.data == value, text
    if value == doc.data:
        assert text == doc.text
    # Written again from itself: nothing moves.
    assert rendered(back, copy.deepcopy(value)) == text


@pytest.mark.parametrize("doc", DOCS[:3], ids=lambda d: d.where)
def test_an_unchanged_value_is_the_text_byte_for_byte(doc: manifests.Document) -> None:
    assert rendered(doc, copy.deepcopy(doc.data)) == doc.text


def test_the_property_sees_a_wrong_splice(monkeypatch: pytest.MonkeyPatch) -> None:
    """A splice that forgets an added key fails the read-back."""
    doc = DOCS[0]
    value = copy.deepcopy(doc.data)
    typing.cast(dict[str, object], value)["added"] = "x"
    monkeypatch.setattr(splice.Splice, "_mapping", lambda self, node, new: True)
    (back,) = manifests.parse("out", rendered(doc, value))
    assert back.data != value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # libyaml's marks start after a byte-order mark: it is kept, and not counted
        ("\ufeffa: 1\nb: é😀\nc: x\n", "\ufeffa: 1\nb: B\nc: new\nz:\n  k: ü\n"),
        ("a: 'é😀'\nb: [x]  # why\n", "a: 'é😀'\nb: B  # why\nc: new\nz:\n  k: ü\n"),
        ("a: !!str 1\nb: |\n  x\n  y\nc: 3\n", "a: !!str 1\nb: B\nc: new\nz:\n  k: ü\n"),
        ("a: 1 # c\nb:\n  - x\n\n# tail\n", "a: 1 # c\nb: B\nc: new\nz:\n  k: ü\n\n# tail\n"),
    ],
    ids=["bom-and-astral", "flow-to-scalar", "block-scalar", "blank-and-comment-after"],
)
def test_marks_are_characters_and_what_follows_stays(text: str, expected: str) -> None:
    (doc,) = manifests.parse("t", text)
    value = {**typing.cast(dict[str, object], doc.data), "b": "B", "c": "new", "z": {"k": "ü"}}
    assert rendered(doc, value) == expected
