"""SIGTERM reaches the engine (issue 59, CONTRACT §4): `probe`, and `wait` once at its
start, name a container whose PID 1 is a shell that started the engine as a child
without `exec`. Each case is a real shell as PID 1 in a PID namespace of the test's
own (`unshare -p`, as a container's), with a stand-in engine named `vllm` as its
child, and the hook beside it in that namespace; `exec` and an init that forwards
signals (tini's shape: no shell) are told apart from it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.process import base_env, container

ENGINE = "#!{python}\nimport time\ntime.sleep(4)\n"
WARNING = "which drops SIGTERM (it has no handler"


def engine_file(tmp_path: Path) -> Path:
    """A stand-in engine whose command is `vllm serve m` (it only sleeps 4 s)."""
    path = tmp_path / "vllm"
    path.write_text(ENGINE.format(python=sys.executable))
    path.chmod(0o755)
    return path


def in_container(script: str, entry: list[str]) -> subprocess.CompletedProcess[str]:
    """`sh -c script` as PID 1 of a new PID namespace; `$HOOK` is the hook's argv."""
    hook = " ".join(f"'{a}'" for a in entry)
    argv = [*container(), "sh", "-c", script.replace("$HOOK", hook)]
    return subprocess.run(argv, capture_output=True, text=True, env=base_env(), timeout=60)


@pytest.mark.parametrize("command", ["probe", "wait"])
def test_a_shell_pid_1_with_the_engine_as_its_child_is_named(
    entry: list[str], tmp_path: Path, command: str
) -> None:
    """Before: nothing said it, and the engine was killed at G whatever the hook did."""
    vllm = engine_file(tmp_path)
    args = "--port 9 --read-timeout 0.2"
    if command == "wait":
        args += " --settle 0 --grace 1 --exit-reserve 0.5 --termination-log ''"
    done = in_container(f"{vllm} serve m & sleep 0.3; $HOOK {command} {args}; kill %1", entry)
    said = done.stdout + done.stderr
    assert WARNING in said, said
    assert "PID 1 is sh" in said and "start the engine with `exec`" in said
    assert said.count(WARNING) == 1  # once, at the start


def test_an_engine_started_with_exec_or_under_a_forwarding_shell_is_not_named(
    entry: list[str], tmp_path: Path
) -> None:
    """`exec` makes the engine PID 1 itself; a shell that traps SIGTERM (and forwards
    it, as an init does) has a handler: neither is named."""
    vllm = engine_file(tmp_path)
    hook = " ".join(f"'{a}'" for a in entry)
    exec_engine = in_container(
        f"sh -c '{hook} probe --port 9 --read-timeout 0.2' & exec {vllm} serve m", entry
    )
    assert WARNING not in exec_engine.stdout + exec_engine.stderr
    assert "verdict" in exec_engine.stdout, exec_engine.stderr
    script = f"trap 'kill -TERM $!' TERM; {vllm} serve m & sleep 0.3; $HOOK probe --port 9"
    forwards = in_container(f"{script} --read-timeout 0.2; kill %1", entry)
    assert WARNING not in forwards.stdout + forwards.stderr
    assert "verdict" in forwards.stdout, forwards.stderr  # the probe did run there
