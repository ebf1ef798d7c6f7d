"""The docs say what the code does: the generated parts are current, every YAML
snippet is a valid Kubernetes fragment, every drainhook command line in them
parses with drainhook's own CLI, every contract section the code cites exists,
and the README stays a front door. Checked parts are found by their markers
(tests/support/docparts.py), never by a heading.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import signal
import subprocess
import sys
import types
import typing
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import click
import pytest
import yaml

from drainhook import exits
from drainhook.cli.main import all_commands, cli
from drainhook.hook.config import DEFAULT_GRACE
from drainhook.hook.timeline import TIMELINE_RULES, PlanWarning
from drainhook.inject.options import Options
from drainhook.planning import plan as planning
from drainhook.planning.render import render as render_plan
from tests.support.docparts import names, part
from tests.support.manifests import load_model, load_objects, parse_hook
from tests.support.process import ROOT, Hook

pytestmark = pytest.mark.usefixtures("no_drainhook_env")

README = ROOT / "README.md"
OPERATIONS = ROOT / "docs" / "operations.md"
CONTRACT = ROOT / "docs" / "contract.md"
REFERENCE = ROOT / "docs" / "reference.md"
TIMELINE = ROOT / "docs" / "timeline.svg"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 300


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
    assert "](docs/timeline.svg)" in README.read_text()


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
        svg = render(json.loads(render_plan(plan, "json")))
        root = ET.fromstring(svg)
        assert root.get("height") and float(root.get("height", "0")) > 0
        assert f"{plan.at.kill:g} s" in svg


def test_command_reference_is_current() -> None:
    """docs/reference.md is every command's --help as it is now; if not, rerun
    scripts/command-reference."""
    reference = script("command_reference")
    assert reference.current(REFERENCE.read_text()) == reference.render(), (
        "docs/reference.md: the command reference is stale: run scripts/command-reference"
    )
    assert REFERENCE.read_text() == reference.document()


def test_command_reference_covers_every_command() -> None:
    section = script("command_reference").current(REFERENCE.read_text())
    assert section is not None
    titles = re.findall(r"^### `(drainhook[^`]*)`", section, re.M)
    commands = [name for name, c in all_commands().items() if not c.hidden]
    assert titles == ["drainhook", *(f"drainhook {n}" for n in commands)]
    assert REFERENCE.read_text().rstrip().endswith("<!-- commands:end -->")
    assert "](docs/reference.md)" in README.read_text()


def test_the_kinds_table_drives_inject_help_and_docs() -> None:
    """inject's one table of kinds makes docs/inject.md's table and `inject --help`'s
    list: every row there, and nothing else."""
    from click.testing import CliRunner

    from drainhook.inject.kinds import KINDS, table

    text = (ROOT / "docs" / "inject.md").read_text()
    block = text.split("<!-- kinds: ")[1].split("-->\n", 1)[1].split("<!-- /kinds -->")[0]
    assert block == table()
    assert len(re.findall(r"^\| ", block, re.M)) == len(KINDS) + 1  # the header's and each row
    shown = " ".join(CliRunner().invoke(cli, ["inject", "--help"]).output.split())
    for kind in KINDS:
        assert kind.name in shown and kind.name in block
    wired = shown.split("Kinds it wires: ")[1].split(", and a List of them")[0].split(", ")
    assert wired == [k.name for k in KINDS if k.build is not None and k.refuse is None]


def test_every_plan_warning_is_documented() -> None:
    seen: set[str] = set()
    for role, flags in (
        ("unified", {"grace": 6.0, "settle": 4.0, "exit_reserve": 1.0}),
        ("unified", {"grace": 30.5}),
        ("prefill", {"grace": 4000.0}),
        ("prefill", {"engine": "vllm"}),
        ("unified", {"engine": "vllm", "settle": 3.0}),
        ("unified", {"grace": 8.0, "settle": 6.0}),
        ("unified", {"stall_after": 30.0}),
        ("unified", {"engine": "sglang"}),
        ("unified", {"interval": 0.05}),
    ):
        plan = planning.make_plan(planning.wait_config(**flags), role)
        seen |= {w.code for w in plan.warnings}
    several = planning.make_plan(planning.wait_config(engine="vllm"), api_servers=2)
    seen |= {w.code for w in several.warnings}
    expected = {
        "grace-range",
        "grace-fraction",
        "settle-past-deadline",
        "no-room",
        "settle-short",
        "exit-reserve-short",
        "interval-short",
        "sglang-exit",
        "sglang-pd-exit",
        "vllm-prefill-linger",
        "vllm-shutdown-timeout",
        "stall-after-deadline",
        "vllm-api-servers",
    }
    assert seen == expected
    text = part(OPERATIONS, "plan-warnings")
    for code in expected:
        assert f"`{code}`" in text, f"docs/operations.md does not explain {code}"
    assert expected == {w.code for _, w, _ in _firing()}  # every rule of the tables


def _firing() -> list[tuple[Callable[..., object], PlanWarning, bool]]:
    """Each rule, what it says on a plan it fires on, and whether `wait` logs it."""
    plans = [
        planning.make_plan(planning.wait_config(**flags), role)  # type: ignore[arg-type]
        for role, flags in (
            ("unified", {"grace": 6.0, "settle": 4.0, "exit_reserve": 1.0}),
            ("unified", {"grace": 30.5}),
            ("unified", {"grace": 8.0, "settle": 6.0}),
            ("prefill", {"engine": "vllm"}),
            ("unified", {"engine": "vllm", "settle": 3.0}),
            ("decode", {"engine": "sglang"}),
            ("unified", {"engine": "sglang"}),
            ("unified", {"stall_after": 30.0}),
            ("unified", {"interval": 0.05}),
        )
    ]
    plans.append(planning.make_plan(planning.wait_config(engine="vllm"), api_servers=2))
    logged = [(r, next(w for p in plans if (w := r(p.at))), True) for r in TIMELINE_RULES]
    advice = [(r, next(w for p in plans if (w := r(p))), False) for r in planning.ADVICE_RULES]
    return [*logged, *advice]


def test_which_warnings_wait_logs_is_documented() -> None:
    """The operations guide's table says, per warning, whether `wait` logs it: the
    TIMELINE_RULES, and no other."""
    rows = {
        m.group(1): m.group(2)
        for m in re.finditer(
            r"^\| `([a-z-]+)` \|(?:[^|]*\|){2} ([^|]*) \|", part(OPERATIONS, "plan-warnings"), re.M
        )
    }
    for _, warning, logged in _firing():
        assert rows[warning.code].strip() == ("logged" if logged else "—"), warning.code


# -- links ------------------------------------------------------------------------------


@pytest.mark.parametrize("doc", DOCS, ids=[p.name for p in DOCS])
def test_relative_links_resolve(doc: Path) -> None:
    """Every relative link names a file that exists, and an anchor names a heading of
    the file it points into (this one, or another Markdown file)."""
    text = doc.read_text()
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (doc.parent / path) if path else doc
        assert linked.exists(), f"{doc.name}: broken link {target}"
        if anchor and linked.suffix == ".md":
            assert anchor in _anchors(linked), f"{doc.name}: no heading for {target}"


def _anchors(doc: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file (code blocks skipped)."""
    text = re.sub(r"^```.*?^```", "", doc.read_text(), flags=re.S | re.M)
    return {_anchor(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


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
    if "spec" in data or "containers" in data:  # a PodSpec, or plan's fragment of one
        spec = load_model(data.get("spec", data), "V1PodSpec", where)
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
    assert len(blocks(README, "yaml")) >= 1  # the Pod lines, as plan prints them
    assert len(blocks(OPERATIONS, "yaml")) >= 3
    assert len(OPERATIONS.read_text().splitlines()) < 450  # a guide, not a second contract


def _command_lines() -> list[tuple[str, list[str]]]:
    """Every drainhook invocation in the docs' shell blocks, as argv after the binary."""
    found = []
    for doc in DOCS:
        for text in blocks(doc, "sh"):
            for line in text.splitlines():
                words = shlex.split(line, comments=True)
                at = [i for i, w in enumerate(words) if Path(w).name == "drainhook"]
                if at and not words[0].startswith("scripts/"):
                    command = words[at[0] :]  # to where the shell ends it: `>`, `|`, `&&`
                    ends = [i for i, w in enumerate(command) if w in (">", "|", "&&", ";")]
                    found.append((f"{doc.name}-{len(found)}", command[: (ends or [None])[0]]))
    return found


COMMANDS = _command_lines()


@pytest.mark.parametrize(("where", "words"), COMMANDS, ids=[w for w, _ in COMMANDS])
def test_shell_examples_parse(where: str, words: list[str]) -> None:
    name, _, _ = parse_hook(words)
    assert name in all_commands(), where


def test_docs_show_plan_and_probe_commands() -> None:
    names = {words[1] for _, words in COMMANDS}
    assert {"plan", "probe"} <= names


def test_plan_help_names_every_warning_from_its_rule() -> None:
    """`plan --help` is generated from RULES: each rule's docstring is `code: when`
    with the code it fires with, and the help lists every one."""
    text = " ".join(planning.help_text().split())
    for rule, fired, _ in _firing():
        doc = " ".join((rule.__doc__ or "").split())
        assert doc.split(":")[0] == fired.code, rule
        assert doc in text, fired.code


# -- the contract -------------------------------------------------------------------

# "CONTRACT §2a", "CONTRACT §1, §4", "CONTRACT §2 and §2b", across a line break too.
CITATION = re.compile(r"CONTRACT\s+(§\d+[a-z]?(?:(?:,\s*|\s+and\s+)§\d+[a-z]?)*)")
SOURCES = ["drainhook", "tests", "scripts", "benchmarks", "rehearsal"]


def _cited() -> dict[str, set[str]]:
    """Every contract section cited in the Python sources, with the files citing it."""
    cited: dict[str, set[str]] = {}
    for folder in SOURCES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for m in CITATION.finditer(path.read_text()):
                for section in re.findall(r"§(\d+[a-z]?)", m.group(1)):
                    cited.setdefault(section, set()).add(str(path.relative_to(ROOT)))
    return cited


def _sections() -> set[str]:
    """The sections docs/contract.md has: headings `## 2.`, `### 2a.`, …"""
    return set(re.findall(r"^#+ *(\d+[a-z]?)\.", CONTRACT.read_text(), re.M))


def test_every_contract_section_the_code_cites_exists() -> None:
    """Each "CONTRACT §n" in the code names a section of docs/contract.md: the spec
    the code refers to is in the repository, numbered as it is cited."""
    cited = _cited()
    assert {"1", "2", "2a", "2b", "3", "4", "5", "6", "7"} <= set(cited)  # the scan works
    missing = {s: sorted(files) for s, files in cited.items() if s not in _sections()}
    assert not missing, f"cited but not in docs/contract.md: {missing}"


def test_contract_stands_alone() -> None:
    """docs/contract.md is the project's own text: it points at nothing outside the
    repository's docs."""
    text = CONTRACT.read_text()
    # "shared/" covers the steering copy's relative path too (spelt apart here).
    assert "shared" + "/" not in text
    assert _sections() >= {"1", "2", "2a", "2b", "3", "4", "5", "6", "7"}


def test_contract_exit_codes_are_the_code_s() -> None:
    """The exit-code table of contract §5 (and its sentence on `probe`) is
    drainhook.exits, row for row."""
    expected = {
        **{name: [code] for name, code in exits.WAIT.items()},
        "interrupted": [exits.interrupted(signal.SIGTERM), exits.interrupted(signal.SIGINT)],
        "usage": [exits.USAGE],
        "internal": [exits.INTERNAL],
    }
    rows = {}
    for line in part(CONTRACT, "exits").splitlines()[2:]:
        outcome, code = (c.strip() for c in line.strip("|").split("|"))
        rows[outcome.split()[0]] = [int(c) for c in code.split(" / ")]
    assert rows == expected
    probe = re.search(r"`probe` exits ([^;]*);", CONTRACT.read_text())
    assert probe is not None
    said = dict(reversed(p.split()) for p in probe.group(1).replace("\n", " ").split(", "))
    assert {k: int(v) for k, v in said.items()} == {**exits.PROBE, "usage": exits.USAGE}


def test_contract_verdicts_are_the_code_s() -> None:
    """Contract §2's table has one row per verdict, the verdicts `probe` exits
    with (drainhook.exits is keyed by the verdict's name)."""
    rows = part(CONTRACT, "verdicts").splitlines()[2:]
    verdicts = [re.match(r"\| `([a-z]+)` \|", row) for row in rows]
    assert [m.group(1) for m in verdicts if m] == list(exits.PROBE)
    assert len(verdicts) == len(exits.PROBE)


# -- the README ---------------------------------------------------------------------


def test_readme_is_short() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) < README_MAX_LINES, (
        f"README.md has {len(lines)} lines: a front door holds under {README_MAX_LINES};"
        " the rest belongs in docs/"
    )


def test_readme_opens_with_what_to_add_to_a_pod_then_the_setup_commands() -> None:
    """The first screen is the operator's: what drainhook is, then the Pod lines,
    exactly what `drainhook plan --grace 30 --engine vllm --output yaml` prints, then
    where to get it; the two commands that set everything up follow, under
    "Develop", each a script in the repository."""
    text = README.read_text()
    assert text.startswith("# drainhook\n")
    heads = re.findall(r"^## (.+)$", text, re.M)
    assert heads[:2] == ["Get it", "Develop"]
    assert text.index("<!-- drainhook:doc:pod -->") < text.index("## Get it")
    assert len(text[: text.index("## Develop")].splitlines()) < 60  # the first screen
    printed = subprocess.run(
        [sys.executable, "-m", "drainhook", "plan", "--grace", "30", "--engine", "vllm",
         "--output", "yaml"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    assert part(README, "pod") == f"```yaml\n{printed}```"
    develop = text[text.index("## Develop") :]
    assert develop.split("\n", 2)[2].lstrip("\n").startswith("<!-- drainhook:doc:setup -->")
    block = part(README, "setup")
    assert block.startswith("```sh\n") and block.endswith("\n```")
    commands = [line.split("#")[0].split() for line in block.splitlines()[1:-1]]
    assert [c[0] for c in commands] == ["scripts/demo", "scripts/test"]
    for (script_path,) in commands:
        path = ROOT / script_path
        assert path.is_file() and path.stat().st_mode & 0o111, script_path


def test_scripts_the_docs_name_exist() -> None:
    """Every `scripts/...` command in the docs' shell blocks is a script here that
    runs."""
    named = {
        line.split()[0]
        for doc in DOCS
        for text in blocks(doc, "sh")
        for line in text.splitlines()
        if line.startswith("scripts/")
    }
    assert {"scripts/demo", "scripts/test"} <= named
    for script_path in sorted(named):
        path = ROOT / script_path
        assert path.is_file() and path.stat().st_mode & 0o111, script_path


@pytest.mark.parametrize("doc", DOCS, ids=[p.name for p in DOCS])
def test_doc_markers_are_well_formed(doc: Path) -> None:
    """Every marked part is opened and closed once, and parts do not nest."""
    names(doc)


def test_checked_parts_are_where_the_tests_look() -> None:
    assert {"pod", "setup"} <= set(names(README))
    assert {"verdicts", "gauges", "exits"} <= set(names(CONTRACT))
    assert {"plan-warnings", "observe-warnings"} <= set(names(OPERATIONS))


def test_the_binary_s_path_is_the_same_in_every_snippet() -> None:
    """The path `plan` writes is `inject --via image`'s default, and the README's,
    docs/packaging.md's and the Dockerfile's way to bake the hook into an engine
    image puts the launcher there."""
    assert planning.DEFAULT_BINARY == Options().binary == "/usr/local/bin/drainhook"
    link = f"RUN ln -s /opt/drainhook/drainhook {planning.DEFAULT_BINARY}"
    copy = "/drainhook/drainhook/ /opt/drainhook/"
    bake = part(README, "bake").splitlines()
    assert bake[0] == "```dockerfile" and bake[-2:] == [link, "```"] and copy in bake[2]
    for text in (
        (ROOT / "docs" / "packaging.md").read_text(),
        (ROOT / "Dockerfile").read_text(),
        (ROOT / "docs" / "inject.md").read_text(),
    ):
        assert copy in text and link.removeprefix("RUN ") in text
        assert '"/opt/drainhook/drainhook", "wait"' not in text  # no second path


def test_every_help_ends_with_examples_that_parse() -> None:
    """Each command's --help, and the group's, ends with examples; every example that
    runs drainhook is a command line its parser takes (flags that exist, values of
    their types), so an example cannot drift from the flags."""
    for name, command in {"": cli, **all_commands()}.items():
        epilog = command.epilog or ""
        assert epilog.startswith("Examples:\n"), name
        context = click.Context(command, info_name=f"drainhook {name}".strip())
        shown = context.get_help().rstrip().splitlines()
        examples = [line.strip() for line in epilog.split("\b\n", 1)[1].splitlines()]
        assert [line.strip() for line in shown[-len(examples) :]] == examples, name
        for line in examples:
            words = shlex.split(line, comments=True)
            words = words[: words.index(">")] if ">" in words else words
            at = [i for i, w in enumerate(words) if Path(w).name == "drainhook"]
            if not at:
                continue  # the completion line
            sub, *args = words[at[0] + 1 :]
            all_commands()[sub].make_context(sub, args)  # raises on a flag that is not there


def test_shell_completion_as_documented(hook: Hook) -> None:
    """The README's completion line: the script it sources, and what a tab then
    completes (a command, a flag), from the build users run."""
    assert 'eval "$(_DRAINHOOK_COMPLETE=bash_source drainhook)"' in README.read_text()
    script = hook(env={"_DRAINHOOK_COMPLETE": "bash_source"})
    assert (
        script.code == 0
        and "complete -o nosort -F _drainhook_completion drainhook" in script.stdout
    )
    for words, cword, want in (("drainhook pro", "1", "plain,probe"),
                               ("drainhook probe --po", "2", "plain,--port")):  # fmt: skip
        env = {"_DRAINHOOK_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": cword}
        done = hook(env=env)
        assert (done.code, done.stdout.split()) == (0, [want]), done.stderr


def test_the_readmes_command_table_has_every_exit_each_help_names() -> None:
    """Each command's rows in "Commands at a glance" name the exit codes its --help
    names (2, a usage error, is the table's sentence under it for every command)."""
    table = README.read_text().split("## Commands at a glance", 1)[1].split("\n\n", 2)[1]
    rows: dict[str, set[str]] = {}
    for row in table.splitlines()[2:]:
        command, _, codes = (cell.strip() for cell in row.strip("|").split("|"))
        name = command.strip("`").split()[1]
        rows.setdefault(name, set()).update(re.findall(r"\b\d+\b", codes))
    assert set(rows) == {n for n, c in all_commands().items() if not c.hidden}
    for name, codes in rows.items():
        text = " ".join(all_commands()[name].help.split())  # type: ignore[union-attr]
        said = text.split("Exit:", 1)[1].split(".", 1)[0]
        assert codes | {"2"} == set(re.findall(r"\b\d+\b", said)) | {"2"}, name
