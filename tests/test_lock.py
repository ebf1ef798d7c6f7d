"""The locks scripts/_venv installs (requirements/*.txt, made by scripts/lock) pin
every dependency pyproject.toml names, at a version its specifier allows: a
dependency added to or tightened in pyproject.toml without `scripts/lock`
fails here, not on a fresh machine."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
LOCKS = {"test.txt": ("test", "build"), "build.txt": ("build",)}

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")


def pins(text: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^\s;]+)", line)
        assert match, f"not a pin: {line!r}"
        found[canonicalize_name(match[1])] = match[2]
    return found


def wanted(extras: tuple[str, ...]) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = list(project["dependencies"])
    for extra in extras:
        names += project["optional-dependencies"][extra]
    return [Requirement(name) for name in names]


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_the_lock_pins_what_pyproject_asks_for(lock: str) -> None:
    pinned = pins((ROOT / "requirements" / lock).read_text())
    assert "drainhook" not in pinned
    for requirement in wanted(LOCKS[lock]):
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{lock} does not pin {requirement} (run scripts/lock)"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"{lock} pins {name}=={pinned[name]}, outside {requirement} (run scripts/lock)"
        )


def test_a_line_that_is_not_a_pin_is_refused() -> None:
    assert pins("# a comment\nclick==8.5.1\n") == {"click": "8.5.1"}
    with pytest.raises(AssertionError):
        pins("click>=8\n")
