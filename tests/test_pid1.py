"""SIGTERM reaches the engine (issues 59, 63; CONTRACT §4): `probe`, and `wait` once at
its start, name a container whose engine the kubelet's SIGTERM does not reach. Each
case is a real shell, init or launcher as PID 1 of a PID namespace of the test's own
(`unshare -p`, as a container's), inside a network namespace of its own (a Pod's),
with a stand-in engine named `vllm` that holds the serving port's listener
somewhere under it, and the hook beside it: the engine's server is the process
that holds that listener, and SIGTERM reaches it only as PID 1, as the direct
child of an init that forwards signals, or in the process group such an init
signals whole."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from tests.support.podns import Pod
from tests.support.process import container

# A stand-in engine, `vllm serve m`: it listens on 8000 and sleeps 3 s.
ENGINE = """#!{python}
import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 8000)); s.listen(); time.sleep(3)
"""
# The hook, once the engine listens: its warning, or none.
HOOK = "until [ -e /proc/net/tcp ] && grep -q ':1F40 00000000:0000 0A' /proc/net/tcp; do :; done; "
HOOK += "$HOOK probe --port 8000 --read-timeout 0.2"
NAMED = "is killed at G with every request in flight"


def needs(program: str) -> str:
    path = shutil.which(program)
    if path is None:
        pytest.skip(f"no {program} here (scripts/ci-binary-deps installs it as root)")
    return path


def pid1(pod_command: Pod, entry: list[str], tmp_path: Path, argv: list[str]) -> str:
    """argv as PID 1 of a container in a Pod of its own; `$VLLM` is the stand-in
    engine, `$HOOK` the hook's argv. What the hook wrote."""
    vllm = tmp_path / "vllm"
    vllm.write_text(ENGINE.format(python=sys.executable))
    vllm.chmod(0o755)
    hook = " ".join(f"'{a}'" for a in entry)
    argv = [a.replace("$VLLM", f"{vllm}").replace("$HOOK", hook) for a in argv]
    hooked = HOOK.replace("$HOOK", hook)
    run = pod_command([], [*container(), *[a.replace("$PROBE", hooked) for a in argv]])
    assert run.code is not None, run.stderr
    said = run.stdout + run.stderr
    assert "verdict" in said, said  # the probe ran beside the engine
    return said


# Each: PID 1's command line (`$PROBE` the hook, run once the engine listens), and the
# start of what is named (None: nothing).
SHAPES = {
    "shell": (["sh", "-c", "$VLLM serve m & $PROBE; wait"], "PID 1 is sh, which drops SIGTERM"),
    "trap, foreground": (
        ["bash", "-c", "($PROBE) & trap 'kill -TERM $child' TERM; $VLLM serve m; wait"],
        "PID 1 is bash, which drops SIGTERM",
    ),
    "login -bash": (
        ["bash", "-c", 'exec -a -bash bash -c "$0"', "$VLLM serve m & $PROBE; wait"],
        "PID 1 is bash, which drops SIGTERM",
    ),
    "python launcher": (
        [
            sys.executable,
            "-c",
            "import subprocess, sys; subprocess.run(sys.argv[1:])",
            "sh",
            "-c",
            "$VLLM serve m & $PROBE; wait",
        ],
        f"PID 1 is {Path(sys.executable).name}, which is not the engine",
    ),
    "exec": (["sh", "-c", 'sh -c "$PROBE" & exec $VLLM serve m'], None),
}
INITS = {
    "tini, a shell between": (
        ["tini", "--", "sh", "-c", "$VLLM serve m & $PROBE; wait"],
        "PID 1 is tini, which forwards SIGTERM to its child alone, here sh",
    ),
    "tini, the engine its child": (
        ["tini", "--", "sh", "-c", 'sh -c "$PROBE" & exec $VLLM serve m'],
        None,
    ),
    "dumb-init, its group": (["dumb-init", "--", "sh", "-c", "$VLLM serve m & $PROBE; wait"], None),
    "dumb-init --single-child": (
        ["dumb-init", "--single-child", "--", "sh", "-c", "$VLLM serve m & $PROBE; wait"],
        "PID 1 is dumb-init, which forwards SIGTERM to its child alone, here sh",
    ),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_pid_1_that_is_not_the_engine_is_named(
    pod_command: Pod, entry: list[str], tmp_path: Path, shape: str
) -> None:
    """Before, a shell with a trap (run only once its foreground child exits), a
    login shell's `-bash` and a Python launcher went unnamed; `exec` still is."""
    argv, named = SHAPES[shape]
    said = pid1(pod_command, entry, tmp_path, argv)
    if named is None:
        assert NAMED not in said, said
    else:
        assert named in said and NAMED in said and said.count(NAMED) == 1, said
        assert "start the engine with `exec`" in said


@pytest.mark.parametrize("shape", list(INITS))
def test_an_init_names_what_it_does_not_signal(
    pod_command: Pod, entry: list[str], tmp_path: Path, shape: str
) -> None:
    """tini signals its child alone: a shell there drops SIGTERM (named; before, not);
    dumb-init signals its child's process group by default, the engine in it."""
    argv, named = INITS[shape]
    argv = [needs(argv[0]), *argv[1:]]
    said = pid1(pod_command, entry, tmp_path, argv)
    assert (NAMED in said) is (named is not None), said
    assert named is None or named in said, said


@pytest.mark.parametrize("command", ["probe", "wait"])
def test_wait_names_it_once_at_its_start(
    pod_command: Pod, entry: list[str], tmp_path: Path, command: str
) -> None:
    args = "--port 8000 --read-timeout 0.2"
    if command == "wait":
        args += " --settle 0 --grace 1.5 --exit-reserve 0.5 --termination-log ''"
    argv = ["sh", "-c", f"$VLLM serve m & $PROBE; $HOOK {command} {args}; wait"]
    said = pid1(pod_command, entry, tmp_path, argv)
    assert said.count(NAMED) == 2, said  # the first probe's, then this command's once
