"""The hook's import path holds only the hook: what `drainhook wait` loads, at
import and while it runs, includes none of the planning tools or the simulator
(nor httpx: a read drives httpcore directly).

Each case runs a fresh interpreter (a test process has imported everything) and
reads its sys.modules; the hook's own start imports drainhook.hook.run and
drainhook.cli.main up front (drainhook.__main__), so that is the closure checked.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.process import ROOT, base_env

# What `plan`, `plan --observe`, `inject` and `demo` need, and `wait` must never
# load: the advisory package and the simulator, whole (tests/test_layout.py keeps
# every module of hook/, reading/ and engines/ from importing them), and inject's
# YAML libraries.
NOT_THE_HOOK = ("drainhook.planning", "drainhook.inject", "sim", "yaml")

_MODULES = "import json, sys; print(json.dumps(sorted(sys.modules)))"


def modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running code."""
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\n{_MODULES}"],
        env=base_env(),
        cwd=ROOT,  # the simulated engine (sim/) sits beside the package
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def outside_the_hook(modules: set[str]) -> set[str]:
    return {m for m in modules for n in NOT_THE_HOOK if m == n or m.startswith(n + ".")}


def test_what_the_hook_imports_at_its_start_holds_no_planning_tool() -> None:
    # The same imports drainhook.__main__.main makes before it runs a command.
    loaded = modules_after(
        "import encodings.idna, drainhook.__main__, drainhook.hook.run, drainhook.cli.main"
    )
    assert "drainhook.hook.run" in loaded and "drainhook.hook.timeline" in loaded  # it did import
    assert outside_the_hook(loaded) == set()


def test_a_whole_wait_run_loads_no_planning_tool() -> None:
    """A run to its end (reads refused, then the deadline): the modules imported on
    the way (a read, a summary, the timeline's warnings) are the hook's too."""
    loaded = modules_after(
        "from drainhook.cli.main import run\n"
        "code = run(['wait', '--url', 'http://127.0.0.1:9/metrics', '--settle', '0',"
        " '--grace', '0.4', '--exit-reserve', '0.2', '--interval', '0.05',"
        " '--read-timeout', '0.05', '--termination-log', '', '--quiet'])\n"
        "assert code in (3, 4, 6), code"
    )
    assert "drainhook.hook.drain" in loaded and "drainhook.hook.log" in loaded
    assert outside_the_hook(loaded) == set()
    # A read is httpcore's pool and one table of its failures: httpx is not loaded.
    assert "httpcore" in loaded and "httpx" not in loaded


def test_the_check_sees_a_planning_tool_when_one_is_loaded() -> None:
    """The closure test can fail: `plan` loads drainhook.planning.plan and `plan --observe`
    drainhook.planning.observe and drainhook.planning.histogram."""
    loaded = modules_after(
        "from drainhook.cli.main import run\n"
        "import contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    run(['plan', '--observe', '--from-file', '/nonexistent'])\n"
    )
    assert {
        "drainhook.planning.plan",
        "drainhook.planning.observe",
        "drainhook.planning.histogram",
    } <= outside_the_hook(loaded)


def test_the_check_sees_inject_and_its_yaml_library_when_loaded() -> None:
    """`inject` loads its modules and PyYAML: the closure test would see them
    on the hook's path."""
    loaded = modules_after(
        "from drainhook.cli.main import run\n"
        "import contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    run(['inject', '/nonexistent'])\n"
    )
    found = outside_the_hook(loaded)
    assert {"drainhook.inject.run", "drainhook.inject.manifests", "yaml"} <= found


# The house's budget (issue 34): what `wait` loads of drainhook, at its start and
# through a whole drain of either engine, in lines; 5,010 since the gauge scanner's
# line loop became the one the histogram shares and the connection signal kept its
# memory of each connection (issues 57, 58: 5,009 for SGLang's drain); 5,075 with
# the `misconfigured` outcome, the G each "raise G" names and the check of a shell
# PID 1 (issue 59: 5,072); 5,130 with the start line, the time of day and the time
# left on every line, the 5 s pulse while work remains and the ending in words
# (issue 59: 5,129); 5,150 with a usage error in one sentence and a bare
# `drainhook`'s help (issue 59: 5,146); 5,175 with the examples each --help ends
# with and probe's rows named for what they count (issue 59: 5,172); 5,190 with
# probe's --watch and --interval in the CLI every command loads (issue 59: 5,187);
# 5,240 with the Pod's own address read as loopback and a `$(NAME)` host (issue 60:
# 5,237); 5,460 with the fourth round of doubt (issue 63: the accept queue and the
# tie after a whole exchange, netlink's framing, and every PID 1 that SIGTERM stops
# short of the engine, whose server the start finds by its listener: 5,458 for
# SGLang's drain; the kernel's addresses load only for a host that is not loopback);
# 5,470 with the one target a refusal's fix may name the address family of (5,465);
# 5,485 with one reader of a sample line's place and rest, the gauges' and the
# histogram's (issue 64: 5,482; the histogram's copy gone from plan's side);
# 5,535 with a person's terminal (issue 66's item 4: lines fit to it, the way out
# of a held usage error and the flag meant, the ending's time of day; 5,534).
WAIT_PATH_LINES = 5535


def lines_of(modules: set[str]) -> int:
    code = "\n".join(
        [
            "import importlib.util, sys",
            f"names = {sorted(m for m in modules if m.split('.')[0] == 'drainhook')!r}",
            "specs = [importlib.util.find_spec(n) for n in names]",
            "files = {s.origin for s in specs if s is not None and s.origin}",
            "print(sum(len(open(f).read().splitlines()) for f in files))",
        ]
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=base_env(), cwd=ROOT, capture_output=True, text=True,
        timeout=60, check=True,
    )  # fmt: skip
    return int(done.stdout)


def test_wait_loads_at_most_its_budget_at_its_start() -> None:
    loaded = modules_after(
        "import encodings.idna, drainhook.__main__, drainhook.hook.run, drainhook.cli.main"
    )
    assert 3000 < lines_of(loaded) <= WAIT_PATH_LINES


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_a_whole_drain_loads_at_most_the_budget(kind: str) -> None:
    """A drain of the simulated engine, each engine's side source read: the modules
    loaded on the way (the side scanner, the summary) count too."""
    loaded = modules_after(
        "import drainhook.__main__\n"
        "from drainhook.cli.main import run\n"
        "from sim import EngineConfig, SimEngine, SimServer\n"
        f"with SimServer(SimEngine(EngineConfig(kind={kind!r}))) as server:\n"
        "    code = run(['wait', '--url', server.url('/metrics'), '--settle', '0', '--grace',"
        " '8', '--exit-reserve', '2', '--interval', '0.2', '--quiet', '--termination-log', ''])\n"
        "assert code == 0, code"
    )
    side = "drainhook.engines.loads" if kind == "sglang" else "drainhook.engines.server_load"
    assert side in loaded  # its own side source was read
    assert 3000 < lines_of(loaded) <= WAIT_PATH_LINES
