"""`wait` fails safe (CONTRACT §5): a bug, a broken install and a usage error each
hold a busy engine to D like the blind sleep the hook replaces, say why in one
line, write the termination message and exit 70 (2 for a usage error); a signal
still ends the held hook at once; the other commands exit at once.

Each fault is planted in a real process (`python -c` patches one function, then
runs the entry point; the packaged build loses one of its own modules) against
a loopback engine that reads busy, on a timeline of D = 2 s. A hook that exits
on the fault, as before, ends at the first read (about S = 0.2 s): told apart
by the elapsed time and the exit code together.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from drainhook import exits, failsafe
from tests.conftest import SPAWN_LATE, late
from tests.support.loopback import Loopback, sample, serve
from tests.support.process import Hook, Run, base_env, measure

BUSY = sample("vllm-single-dp2.txt")  # in_flight 6
GRACE, RESERVE = 3.0, 1.0
D = GRACE - RESERVE
TICK = 1 / os.sysconf("SC_CLK_TCK")
TIMELINE = ("--settle", "0.2", "--interval", "0.2", "--grace", f"{GRACE:g}",
            "--exit-reserve", f"{RESERVE:g}")  # fmt: skip


def planted_argv(target: str, argv: list[str]) -> list[str]:
    """`planted`'s command line, to start it as a process of the test's own."""
    module, name = target.split(":")
    owner, _, attribute = name.rpartition(".")
    code = (
        "import importlib, sys\n"
        "def bug(*args, **kwargs):\n"
        "    raise RuntimeError('planted')\n"
        f"where = importlib.import_module({module!r})\n"
        f"owner = getattr(where, {owner!r}) if {owner!r} else where\n"
        f"setattr(owner, {attribute!r}, bug)\n"
        "from drainhook.__main__ import main\n"
        f"sys.argv = ['drainhook', *{argv!r}]\n"
        "main()\n"
    )
    return [sys.executable, "-c", code]


def planted(target: str, argv: list[str], tmp_path: Path) -> Run:
    """`python -m drainhook ARGV` with `target` (module:attribute) replaced by a
    function that raises: a bug in that part of the run."""
    return measure(planted_argv(target, argv), env=base_env(), cwd=tmp_path)


def assert_held(run: Run, code: int, first_line: str) -> list[str]:
    """Exit `code` after holding to D, the failure said in one line that starts so."""
    lines = [line for line in run.stderr.splitlines() if line.startswith("drainhook")]
    said = [line for line in lines if "holding as a blind sleep" in line]
    assert len(said) == 1, run.stderr
    assert said[0].startswith(first_line), said[0]
    assert said[0].endswith(f"; holding as a blind sleep until D = {D:g} s")
    assert "Traceback" not in run.stderr
    assert run.code == code, run.stderr
    # Held to D (from the process's start, so the spawn counts against it), not
    # released at the first read: a broken hook ends here at about 0.2-0.5 s. The
    # start is known to a clock tick (/proc/PID/stat): the hook may end one early.
    assert D - failsafe.EXIT_ALLOWANCE - TICK <= run.elapsed < late(D, SPAWN_LATE, run.starved)
    return lines


@pytest.mark.parametrize(
    ("target", "more"),
    [
        ("drainhook.reading.read:Reader.read", ()),  # a reader
        ("drainhook.hook.drain:Cadence.after", ()),  # the loop
        ("drainhook.hook.log:read_event", ()),  # a log line
        ("drainhook.hook.stall:StallWatch.observe", ("--stall-after", "0.5")),  # the stall watch
    ],
    ids=["reader", "loop", "log-line", "stall-watch"],
)
def test_a_planted_bug_holds_a_busy_engine_to_d(
    target: str, more: tuple[str, ...], tmp_path: Path
) -> None:
    message, log = tmp_path / "termination", tmp_path / "hook.log"
    with Loopback(serve(BUSY)) as srv:
        argv = ["wait", "--url", srv.url, *TIMELINE, *more, "--termination-log", str(message),
                "--log-file", str(log)]  # fmt: skip
        run = planted(target, argv, tmp_path)
    lines = assert_held(run, exits.INTERNAL, "drainhook: internal error: RuntimeError: planted")
    assert not [line for line in lines if "outcome=" in line]  # no summary: the run broke
    # The line reaches --log-file too (kubectl logs, with /proc/1/fd/1).
    assert log.read_text().splitlines()[-1] == lines[-1]
    text = message.read_text()
    assert text.startswith("drainhook: failed safe at ")
    assert text.endswith(f"(held to D = {D:g} s): internal error: RuntimeError: planted")


def test_a_bug_while_idle_holds_too(tmp_path: Path) -> None:
    """An idle engine would be released at S + I/4: the bug in the loop holds it
    to D all the same (the hook cannot know what it would have read)."""
    idle = b"vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n"
    with Loopback(serve(idle)) as srv:
        run = planted("drainhook.hook.drain:Cadence.after", ["wait", "--url", srv.url,
                      *TIMELINE], tmp_path)  # fmt: skip
    assert_held(run, exits.INTERNAL, "drainhook: internal error: RuntimeError: planted")


@pytest.mark.parametrize(
    ("args", "env", "first"),
    [
        (["--interval", "banana", *TIMELINE[4:]], {},
         "drainhook wait: invalid value for '--interval'"),
        (["--no-such-flag", *TIMELINE], {}, "drainhook wait: no such option '--no-such-flag'"),
        # D from the variables, read plainly, when the flags do not say it.
        (["--settle", "x"], {"DRAINHOOK_GRACE": "3", "DRAINHOOK_EXIT_RESERVE": "1s"},
         "drainhook wait: invalid value for '--settle'"),
        # A cap read plainly: D = min(G - R, max-wait) = min(29, 2).
        (["--port", "0", "--grace=31", "--exit-reserve", "2", "--max-wait", "2000ms"], {},
         "drainhook wait: invalid value for '--port'"),
    ],
    ids=["value", "flag", "from-variables", "max-wait"],
)  # fmt: skip
def test_a_usage_error_holds_to_d_and_exits_2(
    hook: Hook, args: list[str], env: dict[str, str], first: str, tmp_path: Path
) -> None:
    log = tmp_path / "hook.log"
    run = hook("wait", *args, f"--log-file={log}", env=env)
    lines = assert_held(run, exits.USAGE, first)
    assert log.read_text().splitlines() == lines[-1:]  # the --log-file read plainly


def test_a_broken_install_holds_to_d() -> None:
    """The Python install: one of the hook's own modules cannot be imported."""
    code = (
        "import sys; sys.modules['drainhook.hook.run'] = None\n"
        "from drainhook.__main__ import main\n"
        f"sys.argv = ['drainhook', 'wait', *{list(TIMELINE)!r}]\n"
        "main()\n"
    )
    run = measure([sys.executable, "-c", code], env=base_env())
    assert_held(run, exits.INTERNAL, "drainhook: cannot start: ModuleNotFoundError")
    # Another command exits at once.
    other = code.replace("'wait', *", "'probe', *[]+").replace(repr(list(TIMELINE)), "[]")
    probe = measure([sys.executable, "-c", other], env=base_env())
    assert probe.code == exits.INTERNAL and probe.elapsed < late(0.0, 2 * SPAWN_LATE)


def test_a_packaged_build_that_cannot_import_a_module_holds_to_d(tmp_path: Path) -> None:
    """The directory build with one of its own modules broken (`_ssl`, which the
    reads import): `wait` holds to D and says which; `probe` exits at once. A
    module file gone altogether is the launcher's to catch: the same hold."""
    binary = os.environ.get("DRAINHOOK_BINARY")
    if not binary:
        pytest.skip("no packaged build: DRAINHOOK_BINARY is unset (scripts/test sets it)")
    build = tmp_path / "drainhook"
    shutil.copytree(Path(binary).parent, build, symlinks=True)
    broken = list(build.rglob("_ssl.*.so"))
    assert broken, "the build has no _ssl module to break"
    for path in broken:
        path.write_bytes(b"not an ELF object: a layer that did not unpack whole\n")
    run = measure([str(build / "drainhook"), "wait", *TIMELINE], env=base_env())
    lines = assert_held(run, exits.INTERNAL, "drainhook: cannot start: ImportError")
    assert "_ssl" in lines[-1]
    probe = measure([str(build / "drainhook"), "probe"], env=base_env())
    assert probe.code == exits.INTERNAL, probe.stderr
    assert probe.elapsed < late(0.0, 2 * SPAWN_LATE, probe.starved)
    for path in broken:
        path.unlink()
    gone = measure([str(build / "drainhook"), "wait", *TIMELINE], env=base_env())
    assert_held(gone, exits.INTERNAL, "drainhook: incomplete bundle: missing ")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("failure", ["usage", "bug"])
def test_a_signal_ends_a_held_hook_at_once_and_says_so(
    entry: list[str], signum: int, failure: str, tmp_path: Path
) -> None:
    """A usage error (held before any config) or a bug in the run (held by run_wait):
    the signal ends the hold at once, and the termination message says so, as at any
    other end. Before, the process left with no termination message."""
    message = tmp_path / "termination"
    args = ["wait", "--grace", "60", "--settle", "0.2", "--termination-log", str(message)]
    with Loopback(serve(BUSY)) as srv:
        if failure == "usage":
            argv = [*entry, *args, "--interval", "banana"]
        else:
            argv = planted_argv("drainhook.hook.drain:Cadence.after", [*args, "--url", srv.url])
        proc = subprocess.Popen(
            argv, env=base_env(), stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        assert proc.stderr is not None
        line = ""
        while "holding" not in line and (line := proc.stderr.readline()):
            pass  # its read lines, then the failure's: the hook now holds
    try:
        assert "holding as a blind sleep until D = 55 s" in line, line
        sent = time.monotonic()
        proc.send_signal(signum)
        code = proc.wait(timeout=10)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    assert code == 128 + signum
    assert took < late(0.1, SPAWN_LATE)
    text = message.read_text()
    assert text.startswith("drainhook: interrupted at "), text
    assert " s while failed safe (D = 55 s): " in text


def test_other_commands_exit_at_once_on_a_usage_error(hook: Hook) -> None:
    run = hook("probe", "--settle", "1")
    assert run.code == exits.USAGE
    assert run.elapsed < late(0.0, 2 * SPAWN_LATE, run.starved)
    assert "holding" not in run.stderr


@pytest.mark.parametrize(
    ("argv", "environ", "deadline"),
    [
        ([], {}, 25.0),
        (["--grace", "60"], {}, 55.0),
        (["--grace=60", "--exit-reserve=10s"], {}, 50.0),
        (["--grace", "1m", "--max-wait", "500ms"], {}, 0.5),
        ([], {"DRAINHOOK_GRACE": "40", "DRAINHOOK_MAX_WAIT": "20"}, 20.0),
        (["--grace", "45"], {"DRAINHOOK_GRACE": "40"}, 40.0),  # the command line wins
        (["--grace", "banana"], {}, 25.0),  # unreadable: the default
        (["--grace"], {}, 25.0),  # no value
        (["--grace", "2", "--exit-reserve", "5"], {}, 0.0),  # never before t0
        (["--url", "--grace", "--grace", "8"], {}, 3.0),  # the last one
    ],
)
def test_the_plain_deadline(argv: list[str], environ: dict[str, str], deadline: float) -> None:
    assert failsafe.plain_deadline(argv, environ) == pytest.approx(deadline)


def test_the_plain_termination_path(tmp_path: Path) -> None:
    mine = str(tmp_path / "t")
    assert failsafe.plain_termination(["--termination-log", mine], {}) == (mine, True)
    assert failsafe.plain_termination([f"--termination-log={mine}"], {}) == (mine, True)
    assert failsafe.plain_termination([], {"DRAINHOOK_TERMINATION_LOG": mine}) == (mine, True)
    assert failsafe.plain_termination(["--termination-log", ""], {}) is None
    assert failsafe.plain_termination([], {"DRAINHOOK_TERMINATION_LOG": ""}) is None


def test_hold_waits_to_d_on_the_clock_it_is_given(tmp_path: Path) -> None:
    """Under a fake clock: the hold ends at t0 + D - the exit allowance, then the
    message is written; it never sleeps past that instant."""
    now = [100.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    path = tmp_path / "message"
    failsafe.hold("drainhook: internal error: X: y", t0=99.0, deadline=25.0,
                  termination=(path, True), clock=lambda: now[0], sleep=sleep)  # fmt: skip
    assert now[0] == pytest.approx(99.0 + 25.0 - failsafe.EXIT_ALLOWANCE)
    assert len(slept) == 1
    assert path.read_text() == (
        "drainhook: failed safe at 25.0 s (held to D = 25 s): internal error: X: y"
    )


def incomplete_build(tmp_path: Path) -> Path:
    """A copy of the packaged build with one bundled module gone: its launcher fails
    safe (packaging/launcher.c) before Python runs."""
    binary = os.environ.get("DRAINHOOK_BINARY")
    if not binary:
        pytest.skip("no packaged build: DRAINHOOK_BINARY is unset (scripts/test sets it)")
    build = tmp_path / "drainhook"
    shutil.copytree(Path(binary).parent, build, symlinks=True)
    for path in build.rglob("_ssl.*.so"):
        path.unlink()
    return build / "drainhook"


LAUNCHER_ROWS = [
    [],
    ["--grace", "60"],
    ["--grace=60", "--exit-reserve=10s"],
    ["--grace", "1m", "--max-wait", "500ms"],
    ["--grace", "banana"],
    ["--grace", "2", "--exit-reserve", "5"],
    ["--grace", "9999999999"],  # past what a sleep takes: held all the same
    ["--grace", "1e400"],  # not a finite number: the default
    ["--grace", "0x10"],  # not the flags' syntax: the default
    ["--grace", "+40"],
    ["--grace", "40."],
    ["--grace", " 0.75m "],
    ["--grace", "1e-400"],
    ["--grace", "4e1s", "--exit-reserve", ".5e1"],
    ["--grace", "40e"],
]


def test_the_launchers_deadline_agrees_with_the_hooks(tmp_path: Path) -> None:
    """D's rule is written twice, in Python (failsafe) and in the launcher's C: the
    launcher's line names the same D for every row (each killed once it has said it)."""
    launcher = incomplete_build(tmp_path)
    for row in LAUNCHER_ROWS:
        with subprocess.Popen(
            [str(launcher), "wait", *row], stderr=subprocess.PIPE, env=base_env(), text=True
        ) as proc:
            assert proc.stderr is not None
            line = proc.stderr.readline()
            proc.kill()
        said = float(line.rsplit("until D = ", 1)[1].split()[0])
        assert said == pytest.approx(failsafe.plain_deadline(row, {}), rel=1e-5), (row, line)


def test_the_launchers_line_never_waits_on_a_stderr_nobody_reads(tmp_path: Path) -> None:
    """The launcher's fail-safe line into a full pipe: lost, and the hold ends at D."""
    launcher = incomplete_build(tmp_path)
    r, w = os.pipe()
    filler = os.open(f"/proc/self/fd/{w}", os.O_WRONLY | os.O_NONBLOCK)
    with contextlib.suppress(BlockingIOError):
        while True:
            os.write(filler, b"x" * 65536)
    os.close(filler)
    start = time.monotonic()
    with subprocess.Popen([str(launcher), "wait", *TIMELINE], stderr=w, env=base_env()) as proc:
        os.close(w)
        try:
            code = proc.wait(timeout=D + 10)
        finally:
            proc.kill()
            os.close(r)
    took = time.monotonic() - start
    assert code == exits.INTERNAL
    assert D - failsafe.EXIT_ALLOWANCE - TICK <= took < late(D, SPAWN_LATE)
