"""drainhook's error family (drainhook.errors): each kind's exit code, and the
command line catching the base: a usage error exits 2, anything else that
escapes a command is a bug and exits 70, a code no outcome uses (CONTRACT §5)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from drainhook import exits, failsafe
from drainhook.cli import install
from drainhook.cli import main as cli
from drainhook.errors import DrainhookError, InstallError, Malformed, UsageError
from drainhook.hook import probe
from drainhook.hook import run as hook
from drainhook.hook.probe import PROBE_EXIT
from tests.support.logs import hook_lines, start_line
from tests.support.process import base_env

OUTCOME_CODES = {*exits.WAIT.values(), 130, 143, *PROBE_EXIT.values()}


def test_each_kind_knows_its_exit_code() -> None:
    assert (DrainhookError.exit_code, UsageError.exit_code, InstallError.exit_code) == (70, 2, 1)
    for kind in (UsageError, InstallError, Malformed):
        assert issubclass(kind, DrainhookError)
    assert Malformed("x").exit_code == exits.INTERNAL  # one that escapes a scanner is a bug
    assert exits.INTERNAL not in OUTCOME_CODES


def crash(*args: object, **kwargs: object) -> None:
    raise RuntimeError("a bug")


@pytest.mark.parametrize(
    ("argv", "where"),
    [
        (["probe"], "hook_reader"),
        (["probe", "--json"], "hook_reader"),
    ],
    ids=["probe", "probe-json"],
)
def test_an_internal_error_exits_70_in_one_line(
    argv: list[str], where: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # 70, not probe's 1 (busy) nor wait's 3 (deadline): a crash reads as a crash.
    monkeypatch.setattr(probe, where, crash)
    assert cli.run(argv) == 70
    out, err = capfd.readouterr()
    assert out == ""
    # (wait's short timeline is warned about first, before the drain: not the crash's)
    lines = [line for line in err.splitlines() if not line.startswith("drainhook warning=")]
    assert lines == ["drainhook: internal error: RuntimeError: a bug"]


def test_an_internal_error_in_wait_holds_to_d_then_exits_70(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """`wait` fails safe (CONTRACT §5): the same one line, then the hold to D = 1 s
    (the config's), then 70. tests/test_failsafe.py plants faults in real processes."""
    monkeypatch.setattr(hook, "drain", crash)
    monkeypatch.setattr(cli, "start_time", time.monotonic)  # t0: now, not this process's start
    argv = ["wait", "--settle", "0", "--grace", "2", "--exit-reserve", "1", "--termination-log", ""]
    start = time.monotonic()
    assert cli.run(argv) == 70
    assert time.monotonic() - start >= 1.0 - failsafe.EXIT_ALLOWANCE
    out, err = capfd.readouterr()
    said = err.splitlines()
    assert start_line(said[0]), said  # the drain had begun: its start line came first
    assert (out, hook_lines(said)) == ("", [
        "drainhook: internal error: RuntimeError: a bug; holding as a blind sleep until D = 1 s"
    ])  # fmt: skip


def test_an_internal_error_in_install_exits_70(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(install, "install", crash)
    assert cli.run(["install", str(tmp_path / "hook")]) == 70
    assert capfd.readouterr().err.splitlines() == ["drainhook: internal error: RuntimeError: a bug"]


@pytest.mark.parametrize(
    ("error", "code"),
    [(UsageError("bad flag"), 2), (DrainhookError("no kind of its own"), 70)],
    ids=["usage", "base"],
)
def test_the_command_line_catches_the_base(
    error: DrainhookError,
    code: int,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    def raising(*args: object, **kwargs: object) -> None:
        raise error

    monkeypatch.setattr(probe, "hook_reader", raising)
    assert cli.run(["probe"]) == code
    assert capfd.readouterr().err.splitlines() == [f"drainhook: {error}"]


def test_a_build_that_cannot_import_its_modules_exits_70() -> None:
    code = (
        "import sys; sys.modules['drainhook.hook.run'] = None\n"
        "from drainhook.__main__ import main\n"
        "sys.argv = ['drainhook', 'probe']\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=base_env(),
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    assert done.returncode == 70, done.stderr
    assert done.stderr.startswith("drainhook: cannot start: ModuleNotFoundError")
    assert len(done.stderr.splitlines()) == 1


def test_a_bare_drainhook_prints_its_help_formatted(capfd: pytest.CaptureFixture[str]) -> None:
    """Not click's help folded into one line: the help as `--help` writes it, on
    stderr, exit 2 (no command was run)."""
    assert cli.run([]) == exits.USAGE
    out, err = capfd.readouterr()
    lines = err.splitlines()
    assert out == "" and lines[0] == "Usage: drainhook [OPTIONS] COMMAND [ARGS]..."
    start = lines.index("Commands:") + 1
    listed = lines[start : lines.index("", start)]
    assert [line.split()[0] for line in listed if line.startswith("  ") and line[2] != " "] == [
        "inject", "install", "plan", "policy", "probe", "wait",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["probe", "--por", "8000"],
         "drainhook probe: no such option '--por'; did you mean '--port', '--source' or '--url'?"),
        (["probe", "--jsn"], "drainhook probe: no such option '--jsn'; did you mean '--json'?"),
        (["plan", "--grace"], "drainhook plan: option '--grace' requires an argument"),
        (["probe", "extra"], "drainhook probe: got unexpected extra argument (extra)"),
        (["nosuch"], "drainhook: no such command 'nosuch'"),
        (["probe", "--watch", "--interval", "banana"],
         "drainhook probe: invalid value for '--interval' (env var: 'DRAINHOOK_INTERVAL'): "
         "'banana' is not a duration (seconds, e.g. 30, 0.5, 250ms)"),
        (["probe", "--settle", "5"],
         "drainhook probe: no such option '--settle'; did you mean '--scheme'?"),
    ],
)  # fmt: skip
def test_a_usage_error_reads_as_one_sentence(
    argv: list[str], said: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """One line, the command named, no sentence after a full stop, the hints joined."""
    assert cli.run(argv) == exits.USAGE
    out, err = capfd.readouterr()
    assert (out, err) == ("", said + "\n")
