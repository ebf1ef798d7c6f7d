"""The suite's one tolerance rule, enforced: every upper bound on a measured time
goes through `late()` (tests/conftest.py).

An AST walk over every module under tests/ looks at the comparisons inside
`assert` statements. What counts:

- A *measured time* is an expression holding a call of `time.monotonic()`,
  `time.time()`, `time.perf_counter()` (or their `_ns` forms), or a lower-case
  name, attribute or string subscript key that names a time: `elapsed`, `wall`,
  `took`, `seconds`, `duration`, `latency`, `age`, `spent`, `waited`, `t`, `t0`,
  `t1`..., the instants `start`, `started`, `end`, `ended`, `sent`, `term`,
  `killed`, `closed`, `spawned`, `last`, `now`, `until`, or any name ending in
  `_s`, `_at`, `_elapsed`, `_start` or `_end` (`run.elapsed`,
  `summary["elapsed"]`, `row["held_s"]`, `ended.exit_s`). UPPER-CASE names are
  constants (`D`, `ASSERTED_EXIT_S`): bounds, never measurements. What a
  `late(...)` call holds is a bound, not a measurement.
- A *timing comparison* is one link of an assert's comparison (`a < b < c` has
  two) with `<`, `<=`, `>` or `>=` whose lesser side is a measured time: an
  upper bound on it. Its greater side must be a `late(...)` call, a name every
  assignment of which (in the function, else the module) is a `late(...)`
  call, or a bare measured time (`t < run.elapsed`, `time.monotonic() < end`,
  `start_time(pid)`: the order of two measurements, with no number between
  them; a test's own patience, how long it polls before it gives up, is one).
- Lower bounds are not tolerances and are not checked: a machine can delay an
  instant, never bring it forward, so "never before S" is asserted as the
  contract fixes it (less at most a clock tick where the clock is that coarse).
- A comparison on a fake clock or a simulated timeline is exact, not a
  tolerance: it says so with a comment `# exact: <why>` on one of its lines.

What it does not see (said so that nobody counts on it): a comparison outside an
`assert` (`ok = took < 1; assert ok`), and times under names outside the list.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

TIME_WORD = re.compile(
    r"(elapsed|wall|took|seconds|duration|latency|age|spent|waited|t|t\d+"
    r"|start|started|end|ended|sent|term|killed|closed|spawned|last|now|until)"
    r"|.+_(s|at|elapsed|start|end)"
)
CLOCKS = frozenset(
    {"monotonic", "monotonic_ns", "time", "time_ns", "perf_counter", "perf_counter_ns"}
)
UPPER = (ast.Lt, ast.LtE)
LOWER = (ast.Gt, ast.GtE)
EXACT = re.compile(r"#\s*exact:\s*\S")


@dataclass(frozen=True)
class Offence:
    path: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.text}"


def _is_late(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name | ast.Attribute)
        and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr) == "late"
    )


def _time_word(word: str) -> bool:
    return word == word.lower() and TIME_WORD.fullmatch(word) is not None


def _leaf(node: ast.AST) -> bool:
    """A measured time on its own: a time-named name, attribute or key, a clock call,
    or float()/int()/round() of one."""
    if isinstance(node, ast.Name):
        return _time_word(node.id)
    if isinstance(node, ast.Attribute):
        return _time_word(node.attr)
    if isinstance(node, ast.Subscript):
        key = node.slice
        return (
            isinstance(key, ast.Constant)
            and isinstance(key.value, str)
            and _time_word(str(key.value))
        )
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in CLOCKS:
            return isinstance(func.value, ast.Name) and func.value.id == "time"
        if isinstance(func, ast.Name) and func.id in ("float", "int", "round") and node.args:
            return _leaf(node.args[0])
    return False


def _measured(node: ast.AST) -> bool:
    """Whether a measured time occurs in node (not counting what late() is given)."""
    if _is_late(node):
        return False
    if _leaf(node):
        return True
    return any(_measured(child) for child in ast.iter_child_nodes(node))


class _Walk(ast.NodeVisitor):
    def __init__(self, path: str, lines: list[str]) -> None:
        self.path = path
        self.lines = lines
        self.offences: list[Offence] = []
        self.scopes: list[dict[str, bool]] = []

    @staticmethod
    def _late_names(body: ast.AST) -> dict[str, bool]:
        """name -> whether every assignment of it in this scope is a late(...) call."""
        names: dict[str, bool] = {}
        for node in ast.walk(body):
            targets: list[ast.expr] = []
            value: ast.AST | None = None
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign | ast.AugAssign):
                targets, value = [node.target], node.value
            for target in targets:
                if isinstance(target, ast.Name):
                    ok = value is not None and _is_late(value)
                    ok = ok and not isinstance(node, ast.AugAssign)
                    names[target.id] = names.get(target.id, True) and ok
        return names

    def visit_Module(self, node: ast.Module) -> None:
        self.scopes.append(self._late_names(node))
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.scopes.append(self._late_names(node))
        self.generic_visit(node)
        self.scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def _bound_ok(self, node: ast.AST) -> bool:
        if _is_late(node) or _leaf(node):
            return True
        if isinstance(node, ast.Call) and not any(
            isinstance(n, ast.Constant) and isinstance(n.value, int | float) for n in ast.walk(node)
        ):
            return True  # a measurement made by a call: start_time(pid), min(a_end, b_end)
        if isinstance(node, ast.Name):
            for scope in reversed(self.scopes):
                if node.id in scope:
                    return scope[node.id]
        return False

    def _exact(self, node: ast.stmt) -> bool:
        end = node.end_lineno or node.lineno
        return any(EXACT.search(line) for line in self.lines[node.lineno - 1 : end])

    def visit_Assert(self, node: ast.Assert) -> None:
        if self._exact(node):
            return
        for compare in ast.walk(node.test):
            if not isinstance(compare, ast.Compare):
                continue
            sides = [compare.left, *compare.comparators]
            for op, left, right in zip(compare.ops, sides, sides[1:], strict=False):
                if isinstance(op, UPPER):
                    lesser, greater = left, right
                elif isinstance(op, LOWER):
                    lesser, greater = right, left
                else:
                    continue
                if _measured(lesser) and not self._bound_ok(greater):
                    text = ast.get_source_segment("\n".join(self.lines), compare) or ""
                    self.offences.append(Offence(self.path, compare.lineno, text))


def offences(source: str, path: str = "<case>") -> list[Offence]:
    walk = _Walk(path, source.splitlines())
    walk.visit(ast.parse(source))
    return walk.offences


# ---- the rule's own cases: each must be caught, or must not ----------------------

CAUGHT = [
    "assert run.elapsed < 1.0",
    "assert float(summary['elapsed']) < 1.0",
    "assert run.elapsed < D",
    "assert 0.9 <= out['elapsed'] < 1.9",
    "assert 1.0 <= elapsed <= 1.1",
    "assert took < D + run.starved",
    "assert time.monotonic() - start < 60",
    "assert ended.exit_s < ASSERTED_EXIT_S + ended.exit_starved",
    "assert 2.0 > took",
    "assert row['held_s'] - row['sigterm_at_s'] < 30 * SCALE - 2.5",
    "assert summary['elapsed'] <= run.elapsed + TICK",
    "assert run.elapsed < late(D, SPAWN_LATE) + 0.5",
    "def f():\n    bound = D + 0.5\n    assert run.elapsed <= bound",
    "def f():\n    bound = late(D, HOOK_LATE)\n    bound += 1\n    assert run.elapsed <= bound",
    "assert all(r.took < 0.5 for r in reads)",
    "assert x and time.monotonic() - start < 0.5",
    "assert max(e for e in ends) - term < n",
    "assert now <= start_time(pid, 0.5)",
]
PASSED = [
    "assert run.elapsed < late(D, SPAWN_LATE, run.starved)",
    "assert SETTLE + WINDOW - TICK <= run.elapsed <= late(D, HOOK_LATE)",
    "def f():\n    bound = late(D, HOOK_LATE)\n    assert run.elapsed <= bound",
    "assert run.elapsed >= D",  # a lower bound: never before D
    "assert 0.35 <= out['elapsed']",
    "assert 0 < requests[0].t < run.elapsed",  # the order of two measurements
    "assert summary['elapsed'] <= run.elapsed",
    "assert result.elapsed <= deadline + 1e-9  # exact: a fake clock",
    "assert run.code == 0 and len(run.stderr) < 100",  # no time in it
    "assert run.elapsed == pytest.approx(1.0)",  # not an ordering
    "assert {'elapsed', 'reads'} <= summary.keys()",
    "assert HOOK_LATE < SPAWN_LATE",  # constants, no measurement
    "assert x and time.monotonic() < end",  # two instants: the test's own patience
    "assert now <= start_time(proc.pid) <= time.monotonic()",
    "assert min(r_end, w_end) >= killed",
    "ok = took < 1.0",  # outside an assert: not seen (see the module's docstring)
]


@pytest.mark.parametrize("case", CAUGHT)
def test_the_rule_catches(case: str) -> None:
    assert offences(textwrap.dedent(case)), case


@pytest.mark.parametrize("case", PASSED)
def test_the_rule_lets_pass(case: str) -> None:
    assert offences(textwrap.dedent(case)) == [], case


def test_every_timing_comparison_in_the_suite_goes_through_late() -> None:
    found: list[Offence] = []
    for path in sorted(TESTS.rglob("*.py")):
        found += offences(path.read_text(), str(path.relative_to(TESTS.parent)))
    assert not found, "upper bounds on time not through late():\n" + "\n".join(map(str, found))
