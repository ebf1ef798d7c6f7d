"""The docs say what the code does: the generated parts are current, every YAML
snippet is a valid Kubernetes fragment, and every drainhook command line in them
parses with drainhook's own CLI.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import sys
import types
import typing
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from drainhook.cli.main import cli
from drainhook.hook.config import DEFAULT_GRACE
from drainhook.hook.timeline import TIMELINE_RULES
from drainhook.planning import plan as planning
from tests.conftest import ROOT, Hook
from tests.test_examples import (
    _no_drainhook_env,  # noqa: F401 (autouse: no DRAINHOOK_* leaks in)
    load_model,
    load_objects,
    parse_hook,
)

README = ROOT / "README.md"
OPERATIONS = ROOT / "docs" / "operations.md"
TIMELINE = ROOT / "docs" / "timeline.svg"
DOCS = [README, OPERATIONS]


def script(name: str) -> types.ModuleType:
    """A generator in scripts/, loaded as a module."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def blocks(path: Path, language: str) -> list[str]:
    """The fenced code blocks of one language in a Markdown file."""
    return re.findall(rf"^```{language}\n(.*?)^```", path.read_text(), re.S | re.M)


# -- generated parts ----------------------------------------------------------------


def test_timeline_svg_is_current(hook: Hook) -> None:
    """docs/timeline.svg is what scripts/timeline-svg draws from today's
    `drainhook plan --output json`; if not, rerun scripts/timeline-svg."""
    run = hook("plan", "--output", "json")
    assert run.code == 0, run.stderr
    drawn = script("timeline_svg").render(json.loads(run.stdout))
    assert TIMELINE.read_text() == drawn, "docs/timeline.svg is stale: run scripts/timeline-svg"


def test_timeline_svg_shows_the_default_instants() -> None:
    root = ET.fromstring(TIMELINE.read_text())
    text = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    for label in ("S = 5 s", "6 s: an idle engine's hook returns", "D = G - R = 25 s", "G = 30 s"):
        assert label in text
    assert "timeline.svg" in OPERATIONS.read_text()


def test_timeline_svg_draws_other_plans() -> None:
    """The drawing holds for any plan `plan` prints, not only the default one."""
    render = script("timeline_svg").render
    for flags in (
        {"grace": 300.0},
        {"grace": 8.0, "settle": 6.0},
        {"grace": 20.0, "exit_reserve": 1.0},
        {"grace": 45.0, "max_wait": 30.0, "linger": 3.0},
    ):
        plan = planning.make_plan(planning.wait_config(**flags))
        svg = render(json.loads(planning.render(plan, "json")))
        root = ET.fromstring(svg)
        assert root.get("height") and float(root.get("height", "0")) > 0
        assert f"{plan.kill:g} s" in svg


def test_command_reference_is_current() -> None:
    """The README's command reference is every command's --help as it is now; if
    not, rerun scripts/command-reference."""
    reference = script("command_reference")
    assert reference.current(README.read_text()) == reference.render(), (
        "README.md: the command reference is stale: run scripts/command-reference"
    )


def test_command_reference_covers_every_command() -> None:
    section = script("command_reference").current(README.read_text())
    assert section is not None
    titles = re.findall(r"^### `(drainhook[^`]*)`", section, re.M)
    names = [name for name, c in cli.commands.items() if not c.hidden]
    assert titles == ["drainhook", *(f"drainhook {n}" for n in names)]
    assert README.read_text().rstrip().endswith("<!-- commands:end -->")


def test_every_plan_warning_is_documented() -> None:
    seen: set[str] = set()
    for role, flags in (
        ("unified", {"grace": 6.0, "settle": 4.0, "exit_reserve": 1.0}),
        ("unified", {"grace": 30.5}),
        ("prefill", {"grace": 4000.0}),
        ("prefill", {"engine": "vllm"}),
        ("unified", {"grace": 8.0, "settle": 6.0}),
        ("unified", {"stall_after": 30.0}),
    ):
        plan = planning.make_plan(planning.wait_config(**flags), role)
        seen |= {w.code for w in plan.warnings}
    expected = {
        "grace-range",
        "grace-fraction",
        "settle-past-deadline",
        "no-room",
        "settle-short",
        "exit-reserve-short",
        "sglang-pd-exit",
        "vllm-prefill-linger",
        "vllm-shutdown-timeout",
        "stall-after-deadline",
    }
    assert seen == expected
    text = OPERATIONS.read_text()
    for code in expected:
        assert f"`{code}`" in text, f"docs/operations.md does not explain {code}"
    assert expected == {rule(p).code for rule, p in _firing()}  # every rule of the table


def _firing() -> list[tuple[planning.Rule, planning.Plan]]:
    """One plan each rule fires on."""
    plans = [
        planning.make_plan(planning.wait_config(**flags), role)  # type: ignore[arg-type]
        for role, flags in (
            ("unified", {"grace": 6.0, "settle": 4.0, "exit_reserve": 1.0}),
            ("unified", {"grace": 30.5}),
            ("unified", {"grace": 8.0, "settle": 6.0}),
            ("prefill", {"engine": "vllm"}),
            ("decode", {"engine": "sglang"}),
            ("unified", {"stall_after": 30.0}),
        )
    ]
    return [(rule, next(p for p in plans if rule(p) is not None)) for rule in planning.RULES]


def test_which_warnings_wait_logs_is_documented() -> None:
    """The operations guide's table says, per warning, whether `wait` logs it: the
    TIMELINE_RULES, and no other."""
    rows = {
        m.group(1): m.group(2)
        for m in re.finditer(
            r"^\| `([a-z-]+)` \|(?:[^|]*\|){2} ([^|]*) \|", OPERATIONS.read_text(), re.M
        )
    }
    timeline = {rule(p).code for rule, p in _firing() if rule in TIMELINE_RULES}
    for code in (rule(p).code for rule, p in _firing()):
        assert rows[code].strip() == ("logged" if code in timeline else "—"), code


# -- links ------------------------------------------------------------------------------


@pytest.mark.parametrize("doc", DOCS, ids=[p.name for p in DOCS])
def test_relative_links_resolve(doc: Path) -> None:
    text = doc.read_text()
    anchors = {_anchor(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        if path:
            assert (doc.parent / path).exists(), f"{doc.name}: broken link {target}"
        elif anchor:
            assert anchor in anchors, f"{doc.name}: no heading for #{anchor}"


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


# -- snippets -------------------------------------------------------------------------


def _snippet_pods(doc: Path, text: str, n: int) -> list[tuple[str, typing.Any, typing.Any]]:
    """(where, pod spec or None, containers) of one YAML snippet, checked against the
    Kubernetes models: whole objects, a PodSpec (`spec:`), a Deployment-style
    `spec.template`, or a single container's fields."""
    where = f"{doc.name} yaml block {n}"
    data = yaml.safe_load(text)
    assert isinstance(data, dict), where
    if "apiVersion" in data:
        return [(p.where, p.spec, p.spec.containers) for p in load_objects(text, where)]
    if "spec" in data and "template" in data["spec"]:
        template = load_model(data["spec"]["template"], "V1PodTemplateSpec", where)
        spec = template.spec
        return [(where, spec, spec.containers)]
    if "spec" in data:
        spec = load_model(data["spec"], "V1PodSpec", where)
        return [(where, spec, spec.containers)]
    container = load_model({"name": "snippet", **data}, "V1Container", where)
    return [(where, None, [container])]


SNIPPETS = [(doc, text, n) for doc in DOCS for n, text in enumerate(blocks(doc, "yaml"))]


@pytest.mark.parametrize(
    ("doc", "text", "n"), SNIPPETS, ids=[f"{d.name}-{n}" for d, _, n in SNIPPETS]
)
def test_yaml_snippet_is_valid_and_its_hook_parses(doc: Path, text: str, n: int) -> None:
    for where, spec, containers in _snippet_pods(doc, text, n):
        for c in containers:
            if not (c.lifecycle and c.lifecycle.pre_stop and c.lifecycle.pre_stop._exec):
                continue
            name, params, _ = parse_hook(c.lifecycle.pre_stop._exec.command)
            assert name == "wait", where
            if spec is not None:
                grace = spec.termination_grace_period_seconds
                assert params["grace"] == (DEFAULT_GRACE if grace is None else grace), where


def test_docs_have_yaml_snippets() -> None:
    assert len(blocks(README, "yaml")) >= 2
    assert len(blocks(OPERATIONS, "yaml")) >= 3


def _command_lines() -> list[tuple[str, list[str]]]:
    """Every drainhook invocation in the docs' shell blocks, as argv after the binary."""
    found = []
    for doc in DOCS:
        for text in blocks(doc, "sh"):
            for line in text.splitlines():
                words = shlex.split(line, comments=True)
                at = [i for i, w in enumerate(words) if Path(w).name == "drainhook"]
                if at and not words[0].startswith("scripts/"):
                    found.append((f"{doc.name}-{len(found)}", words[at[0] :]))
    return found


COMMANDS = _command_lines()


@pytest.mark.parametrize(("where", "words"), COMMANDS, ids=[w for w, _ in COMMANDS])
def test_shell_examples_parse(where: str, words: list[str]) -> None:
    name, _, _ = parse_hook(words)
    assert name in cli.commands, where


def test_docs_show_plan_and_probe_commands() -> None:
    names = {words[1] for _, words in COMMANDS}
    assert {"plan", "probe"} <= names


def test_plan_help_names_every_warning_from_its_rule() -> None:
    """`plan --help` is generated from RULES: each rule's docstring is `code: when`
    with the code it fires with, and the help lists every one."""
    text = " ".join(planning.help_text().split())
    for rule, p in _firing():
        doc = " ".join((rule.__doc__ or "").split())
        fired = rule(p)
        assert fired is not None and doc.split(":")[0] == fired.code, rule
        assert doc in text, fired.code
