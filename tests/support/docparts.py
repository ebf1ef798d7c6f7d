"""The parts of the docs that tests check, found by explicit markers, never by a
heading: `<!-- drainhook:doc:NAME -->` opens a part and
`<!-- /drainhook:doc:NAME -->` closes it, each once in its file. A heading can
then be reworded, or the part moved to another section, without a test
noticing anything but the move of the file it is in.
"""

from __future__ import annotations

import re
from pathlib import Path

OPEN = "<!-- drainhook:doc:{} -->"
CLOSE = "<!-- /drainhook:doc:{} -->"
MARKER = re.compile(r"<!-- (/?)drainhook:doc:([a-z0-9-]+) -->")


def part(path: Path, name: str) -> str:
    """The text between the markers of `name` in `path` (the markers left out)."""
    text = path.read_text()
    begin, end = OPEN.format(name), CLOSE.format(name)
    assert text.count(begin) == 1, f"{path.name}: {begin} must appear once"
    assert text.count(end) == 1, f"{path.name}: {end} must appear once"
    inside = text.split(begin, 1)[1]
    assert end in inside, f"{path.name}: {end} comes before {begin}"
    return inside.split(end, 1)[0].strip("\n")


def names(path: Path) -> list[str]:
    """Every part `path` marks, in order; each must be opened, then closed, once,
    and parts do not nest."""
    found: list[str] = []
    inside: str | None = None
    for m in MARKER.finditer(path.read_text()):
        closing, name = m.group(1) == "/", m.group(2)
        if closing:
            assert inside == name, f"{path.name}: {m.group(0)} closes no open part"
            inside = None
        else:
            assert inside is None, f"{path.name}: {m.group(0)} opens inside {inside}"
            assert name not in found, f"{path.name}: part {name} marked twice"
            found.append(name)
            inside = name
    assert inside is None, f"{path.name}: part {inside} is never closed"
    return found
