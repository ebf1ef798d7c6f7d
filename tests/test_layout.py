"""The package's rooms and the rule between them (docs/development.md, "Layout").

The import graph is read from the source (every `import` and `from ... import`,
at module level or inside a function), not from a list of module names: a new
module falls under the rule of the room it is put in.

    drainhook/            errors, exits, numfmt, build_info: the shared vocabulary
      engines/            what a body means (the gauge table, the scanners, verdicts)
      reading/            where and how to read (targets, HTTP, rounds, /proc)
      hook/               the run (the loop, stall watch, signals, log, exit)
      planning/           advice: beside the hook, never under it (plan, --observe)
      inject/             the hook wired into manifests, reading the advice's rules
      cli/                the command line, which wires them all

A room imports only from the rooms below it; hook/, reading/ and engines/
import nothing from planning/, inject/ or cli/; planning/ nothing from inject/;
no module imports another's private name; no module imports itself however far
round (no circle). The simulated engine (sim/) and the rehearsal live beside the
package; the binary carries neither.
"""

from __future__ import annotations

import ast
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "drainhook"

# What each room may import, besides itself.
MAY_IMPORT: dict[str, frozenset[str]] = {
    "": frozenset(),
    "engines": frozenset({""}),
    "reading": frozenset({"", "engines"}),
    "hook": frozenset({"", "engines", "reading"}),
    "planning": frozenset({"", "engines", "reading", "hook"}),
    "inject": frozenset({"", "engines", "reading", "hook", "planning"}),
    "cli": frozenset({"", "engines", "reading", "hook", "planning", "inject"}),
}
# The entry point wires the command line, as cli/ does.
ROOM_OF_ENTRY = {"drainhook.__main__": "cli"}
THE_HOOKS_ROOMS = ("hook", "reading", "engines")


@dataclass(frozen=True)
class Edge:
    source: str  # module importing
    target: str  # module or package imported
    name: str | None  # the name taken from it (`from target import name`)
    line: int


def module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room(module: str, package: Path = PACKAGE) -> str:
    """The sub-package a module belongs to; "" for the package's top level."""
    if module in ROOM_OF_ENTRY:
        return ROOM_OF_ENTRY[module]
    parts = module.split(".")
    if len(parts) > 1 and (package / parts[1]).is_dir():
        return parts[1]
    return ""


def _is_module(dotted: str, package: Path) -> bool:
    path = package.parent / Path(*dotted.split("."))
    return path.with_suffix(".py").exists() or path.is_dir()


def edges(package: Path = PACKAGE) -> list[Edge]:
    found: list[Edge] = []
    for path in sorted(package.rglob("*.py")):
        source = module_name(path, package)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found += [
                    Edge(source, a.name, None, node.lineno)
                    for a in node.names
                    if a.name.split(".")[0] == "drainhook"
                ]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module.split(".")[0] != "drainhook":
                    continue
                for a in node.names:
                    # `from drainhook.hook import signals` takes a module.
                    as_module = f"{node.module}.{a.name}"
                    if _is_module(as_module, package):
                        found.append(Edge(source, as_module, None, node.lineno))
                    else:
                        found.append(Edge(source, node.module, a.name, node.lineno))
    return found


def breaches(found: list[Edge], package: Path = PACKAGE) -> list[str]:
    out = []
    for e in found:
        here, there = room(e.source, package), room(e.target, package)
        if there != here and there not in MAY_IMPORT[here]:
            out.append(f"{e.source}:{e.line} ({here or 'top'}/) imports {e.target} ({there}/)")
        if e.name is not None and e.name.startswith("_") and not e.name.startswith("__"):
            out.append(f"{e.source}:{e.line} imports the private name {e.name} of {e.target}")
    return out


def test_the_graph_is_read() -> None:
    """The walk finds the imports it judges (a rule over no edges passes anything)."""
    found = edges()
    rooms = {room(e.source) for e in found}
    assert set(MAY_IMPORT) <= rooms
    assert any(e.source == "drainhook.hook.run" and room(e.target) == "reading" for e in found)


def test_every_room_imports_only_what_lies_below_it() -> None:
    assert breaches(edges()) == []


def test_the_hooks_rooms_never_reach_the_advice_or_the_command_line() -> None:
    for e in edges():
        if room(e.source) in THE_HOOKS_ROOMS:
            assert room(e.target) not in ("planning", "inject", "cli"), e


def test_the_package_never_imports_the_simulator_or_the_rehearsal() -> None:
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            found = [n for n in names if n.split(".")[0] in ("sim", "rehearsal")]
            assert found == [], path


def circles(found: list[Edge]) -> list[list[str]]:
    """Every import circle, as the modules round it (a depth-first walk)."""
    graph: dict[str, set[str]] = {}
    for e in found:
        graph.setdefault(e.source, set()).add(e.target)
    out: list[list[str]] = []
    done: set[str] = set()

    def walk(module: str, path: list[str]) -> None:
        if module in path:
            out.append(path[path.index(module) :])
        elif module not in done:
            for target in sorted(graph.get(module, ())):
                walk(target, [*path, module])
            done.add(module)

    for module in sorted(graph):
        walk(module, [])
    return out


def test_no_module_imports_itself_round_a_circle() -> None:
    assert circles(edges()) == []


def test_the_circle_rule_sees_a_circle(tmp_path: Path) -> None:
    copy = tmp_path / "drainhook"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "hook" / "x.py").write_text("def f():\n    from drainhook.hook import run\n")
    with (copy / "hook" / "run.py").open("a") as run:
        run.write("from drainhook.hook import x\n")
    assert circles(edges(copy)) == [["drainhook.hook.run", "drainhook.hook.x"]]


@pytest.mark.parametrize(
    ("where", "code", "expected"),
    [
        ("hook/x.py", "from drainhook.planning import plan\n", "imports drainhook.planning.plan"),
        ("engines/x.py", "def f():\n    import drainhook.reading.read\n", "(reading/)"),
        ("reading/x.py", "from drainhook.engines.grammar import _P\n", "private name _P"),
        ("x.py", "from drainhook.hook.run import run_wait\n", "(top/) imports"),
    ],
)
def test_the_rule_catches_a_breach(tmp_path: Path, where: str, code: str, expected: str) -> None:
    """The same walk over a copy of the package with one bad import added fails."""
    copy = tmp_path / "drainhook"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / where).write_text(code)
    found = [e for e in edges(copy) if e.source.endswith(".x")]
    assert any(expected in b for b in breaches(found, copy)), found


# The house's budgets: lines of one function or method (docstring included), of
# one module, of the package (9,489 when it was set to the lean-house budget, 9,500;
# raised to 9,650 for inject's exactness, issue 53; to 9,700 for the third round of
# doubt, issue 57, at 9,689; 9,672 once the timeline's flags were one table, issue
# 58; to 9,750 for issue 59's first steps, at 9,748; to 9,810 for the lines a
# person watches a drain by (start line, time of day, time left, pulse, the ending
# in words), at 9,805; to 9,840 with inject's warning of an upstream image under
# --via image, at 9,834; to 9,860 with a usage error in one sentence, at 9,851; to
# 9,900 with the examples each --help ends with and probe's rows, at 9,899; to
# 9,960 with probe --watch, at 9,954; to 10,340 with the serving operators' kinds,
# the Pod's own address and a host Kubernetes left as written (issue 60), at 10,333;
# to 10,650 for the fourth round of doubt (issue 63: the accept queue and the tie
# after a whole exchange, netlink's framing shared with the kernel's addresses, every
# PID 1 that SIGTERM stops short of the engine, a terminal's writes), at 10,638;
# to 10,680 with a refused host's address family named and a node's hundreds of
# ports said in a handful (issue 66's item 7), at 10,671; to 10,980 with inject's
# one table of kinds (issue 64: its rows for four more kinds, RBG's patched roles,
# a routed kind's own servers named, five modules where two were), at 10,979; to
# 11,520 with `drainhook policy` (issue 65: the admission policy, 484 lines counted
# apart from inject's room, and its command), at 11,515; to 11,540 with plan's
# engine flags named in its text and YAML, and a G it names past every floor
# (issue 66's items 2 and 3), at 11,539; to 11,570 with inject saying what it did
# (issue 66's item 5: each pod spec summed up, each variable a worker gets), at 11,565;
# to 11,615 with a person's terminal (issue 66's item 4), at 11,612; to 11,665 with
# the tables and lists this session had packed under `# fmt: skip` written out as
# ruff writes them (not a budget met by packing), less --via's entries built once
# for inject and the policy, at 11,665:
# a line added must earn its place, or another go), of its advisory room,
# planning/ (issue 58's target: 1,500), of inject/ (its target: 1,950) and of
# cli/flags.py (its target: 300), each set to the honest sum as it stands
# (planning/ 1,531, then 1,536 with plan's --log-file, 1,561 naming the engine
# flags and every floor in one G, issue 66; inject/ 2,031 when it moved,
# 2,097 once it named what it used to rewrite and four more shapes, 2,123 with the
# warning of an upstream image under --via image, 2,452 with the operators' kinds,
# issue 60; 2,459 with that warning a refusal and a worker's own variables kept,
# issue 64's items 7 and 8, less the dead Argv.set; 2,729 with its one table of
# kinds, issue 64, against that issue's target of 2,400; 2,737 with the engines'
# modules one table the policy renders too; 2,763 saying what it did, issue 66;
# 2,814 with the kinds' table unpacked from `# fmt: skip`;
# flags.py 247); inject/policy.py, the
# admission policy beside inject, at most POLICY_LINES (issue 65: 484); no module
# over 500 (issue 64: plan.py 577 then, 461 once its evidence rules moved out);
# uses of `typing.Any`.
LONGEST = 60
LONGEST_MODULE = 500
PACKAGE_LINES = 11665
ROOM_LINES = {"planning": 1565, "inject": 2815}
POLICY = PACKAGE / "inject" / "policy.py"
POLICY_LINES = 485
FLAGS_LINES = 300
MOST_ANY = 10


def long_functions(package: Path = PACKAGE) -> list[str]:
    out = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > LONGEST:
                    out.append(f"{module_name(path, package)}.{node.name}: {lines} lines")
    return out


def test_no_function_in_the_package_is_longer_than_60_lines() -> None:
    assert long_functions() == []


def test_the_length_rule_sees_a_long_function(tmp_path: Path) -> None:
    copy = tmp_path / "drainhook"
    copy.mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(LONGEST))
    (copy / "x.py").write_text(f"def f():\n{body}")
    assert long_functions(copy) == [f"drainhook.x.f: {LONGEST + 1} lines"]


def test_the_package_keeps_its_size() -> None:
    """No module over 500 lines, the package at most PACKAGE_LINES, each room of
    ROOM_LINES and cli/flags.py at most their budgets, `Any` at most 10 times."""
    sizes = {p: len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert [str(p) for p, n in sizes.items() if n > LONGEST_MODULE] == []
    assert sum(sizes.values()) <= PACKAGE_LINES
    for name, budget in ROOM_LINES.items():
        room = [n for p, n in sizes.items() if p.parent.name == name and p != POLICY]
        assert sum(room) <= budget, name
    assert sizes[POLICY] <= POLICY_LINES
    assert sizes[PACKAGE / "cli" / "flags.py"] <= FLAGS_LINES
    uses = 0
    for path in sizes:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            is_any = isinstance(node, ast.Name) and node.id == "Any"
            is_any = is_any or (isinstance(node, ast.Attribute) and node.attr == "Any")
            uses += is_any
    assert uses <= MOST_ANY
