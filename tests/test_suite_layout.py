"""Where the suite's shared code lives (tests/support/__init__.py): no test module
imports another, and tests/conftest.py holds only fixtures, pytest's hooks and
the one timing tolerance, which is all the tests take from it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
# What a module may import from tests/conftest.py: the tolerance rule.
TOLERANCE = frozenset({"late", "READ_LATE", "HOOK_LATE", "SPAWN_LATE", "WAKE_LATE", "POD_LATE"})


def imported(tree: ast.AST) -> list[tuple[str, str | None, int]]:
    """(module, name or None, line) for every import in the tree."""
    found: list[tuple[str, str | None, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, None, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                found.append((node.module, alias.name, node.lineno))
                found.append((f"{node.module}.{alias.name}", None, node.lineno))
    return found


def is_test_module(module: str) -> bool:
    return module.split(".")[-1].startswith("test_") and module.startswith("tests.")


def breaches(source: str) -> list[str]:
    """What a module under tests/ imports that it must not."""
    found = []
    for module, name, line in imported(ast.parse(source)):
        if is_test_module(module):
            found.append(f"line {line}: imports the test module {module}")
        elif module == "tests.conftest" and name is not None and name not in TOLERANCE:
            found.append(f"line {line}: takes {name} from conftest (tests/support/ holds it)")
    return found


def conftest_extras(source: str) -> list[str]:
    """Public names conftest defines that are neither a fixture, a pytest hook, nor
    the tolerance rule."""
    extra = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            fixture = any("fixture" in ast.unparse(d) for d in node.decorator_list)
            if not (fixture or node.name.startswith("pytest_") or node.name in TOLERANCE):
                extra.append(node.name)
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            extra.append(node.name)
    return extra


@pytest.mark.parametrize(
    ("source", "caught"),
    [
        ("from tests.test_examples import load_model", True),
        ("from tests import test_examples", True),
        ("import tests.test_rehearsal", True),
        ("from tests.conftest import base_env", True),
        ("from tests.conftest import SPAWN_LATE, late", False),
        ("from tests.support.manifests import load_model", False),
        ("from tests.support import conformance", False),
    ],
)
def test_the_import_rule_catches_what_it_should(source: str, caught: bool) -> None:
    assert bool(breaches(source)) is caught


def test_the_conftest_rule_catches_a_helper() -> None:
    helper = "def fields(line):\n    return {}\n"
    fixture = "import pytest\n@pytest.fixture\ndef hook():\n    pass\n"
    assert conftest_extras(helper) == ["fields"]
    assert conftest_extras(fixture + "def pytest_configure(config):\n    pass\n") == []


def test_no_module_of_the_suite_imports_a_test_module_or_conftest_helpers() -> None:
    found = [
        f"{path.relative_to(TESTS.parent)} {why}"
        for path in sorted(TESTS.rglob("*.py"))
        for why in breaches(path.read_text())
    ]
    assert not found, "\n".join(found)


def test_conftest_holds_only_fixtures_hooks_and_the_tolerance() -> None:
    assert conftest_extras((TESTS / "conftest.py").read_text()) == []
