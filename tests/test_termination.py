"""Every drain leaves its outcome in the Pod's status (CONTRACT §5): `wait` writes one
line to the termination message file, at most 4096 bytes, and writing it never blocks
the exit, never fails the hook and never changes its exit code.

The default path, /dev/termination-log, is tried only in a mount namespace of the
test's own whose /dev is a fresh tmpfs (with or without the file): the machine's
/dev is never written.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from drainhook.engines.verdict import Reading, Verdict
from drainhook.failsafe import EXIT_ALLOWANCE, encode
from drainhook.failsafe import TERMINATION_MAX_BYTES as MAX_BYTES
from drainhook.hook import termination
from drainhook.hook.drain import Outcome, Result
from drainhook.hook.termination import DEFAULT_PATH, TerminationLog, choose, message
from tests.conftest import HOOK_LATE, SPAWN_LATE, late
from tests.support.logs import connections_fit, fields, hook_lines, timed_out
from tests.support.loopback import Loopback, hang, serve
from tests.support.process import Hook, Run, base_env

IDLE = b"vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n"
BUSY = b'vllm:num_requests_running{engine="0"} 2\nvllm:num_requests_waiting{engine="0"} 1\n'
FAST = ("--settle", "0.1", "--interval", "0.1", "--read-timeout", "0.3")
SHORT = ("--grace", "2.5", "--exit-reserve", "0.5")  # D = 2.0

# -- the line ------------------------------------------------------------------------


def reading(verdict: Verdict, in_flight: float | None, reason: str | None = None) -> Reading:
    return Reading(verdict, "vllm", in_flight, (), reason, 1.0)


@pytest.mark.parametrize(
    ("result", "line"),
    [
        (Result(Outcome.DRAINED, 8.04, 4, reading(Verdict.IDLE, 0)),
         "drained in 8.0 s after 4 reads; nothing in flight"),
        (Result(Outcome.DEADLINE, 25.0, 20, reading(Verdict.BUSY, 3)),
         "deadline at 25.0 s after 20 reads; 3 requests still in flight at SIGTERM; "
         "SIGTERM cuts them (most hang until the kill at G: docs/contract.md §7); "
         "raise G past the longest request (drainhook plan --observe measures it)"),
        (Result(Outcome.DEADLINE, 25.0, 20, reading(Verdict.BUSY, 1)),
         "deadline at 25.0 s after 20 reads; 1 request still in flight at SIGTERM; "
         "SIGTERM cuts them (most hang until the kill at G: docs/contract.md §7); "
         "raise G past the longest request (drainhook plan --observe measures it)"),
        (Result(Outcome.DEADLINE, 25.0, 20, Reading(Verdict.BUSY, "sglang", 2, (), None, 1.0)),
         "deadline at 25.0 s after 20 reads; 2 requests still in flight at SIGTERM; "
         "raise G past the longest request (drainhook plan --observe measures it)"),
        (Result(Outcome.DEADLINE, 25.0, 20, reading(Verdict.IDLE, 0)),
         "deadline at 25.0 s after 20 reads; nothing in flight at the last read"),
        (Result(Outcome.DEADLINE, 25.0, 19, reading(Verdict.UNKNOWN, None, "read timed out")),
         "deadline at 25.0 s after 19 reads; work in flight unknown "
         "(last read unknown: read timed out)"),
        (Result(Outcome.DEADLINE, 25.0, 0, None),
         "deadline at 25.0 s after 0 reads; no read before it, work in flight unknown"),
        (Result(Outcome.UNREACHABLE, 5.0, 1,
                reading(Verdict.UNREACHABLE, None, "cannot connect: connection refused")),
         "unreachable at 5.0 s after 1 read; no work could be measured: "
         "cannot connect: connection refused"),
        (Result(Outcome.INTERRUPTED, 12.34, 7, reading(Verdict.BUSY, 2), signal.SIGTERM),
         "interrupted by SIGTERM at 12.3 s after 7 reads; 2 requests at the last read"),
        (Result(Outcome.INTERRUPTED, 2.0, 0, None, signal.SIGINT),
         "interrupted by SIGINT at 2.0 s after 0 reads; no read before it, work in flight unknown"),
    ],
    ids=["drained", "deadline-busy", "deadline-one", "deadline-sglang", "deadline-idle",
         "deadline-unknown",
         "deadline-no-read", "unreachable", "interrupted", "interrupted-before-reads"],
)  # fmt: skip
def test_message_per_outcome(result: Result, line: str) -> None:
    assert message(result) == line


def test_encode_is_one_line_with_the_tools_name() -> None:
    assert (
        encode("drained in 1.0 s\nafter\r\n2 reads") == b"drainhook: drained in 1.0 s after 2 reads"
    )


def test_encode_cuts_at_4096_bytes_on_a_character_boundary() -> None:
    for filler in ("é", "€", "𝄞", "a"):  # 2, 3, 4 and 1 bytes each
        data = encode("unreachable: " + filler * 5000)
        assert len(data) <= MAX_BYTES
        assert len(data) > MAX_BYTES - 8
        text = data.decode("utf-8")  # no broken character at the cut
        assert text.endswith("...")
        assert text.startswith("drainhook: unreachable: " + filler)


def test_choose() -> None:
    assert choose(None, exists=lambda p: True) == TerminationLog(DEFAULT_PATH, create=False)
    assert choose(None, exists=lambda p: False) is None
    assert choose("", exists=lambda p: True) is None
    assert choose("/x/y", exists=lambda p: False) == TerminationLog(Path("/x/y"), create=True)


def test_write_replaces_what_was_there(tmp_path: Path) -> None:
    path = tmp_path / "tl"
    path.write_text("x" * 10000)
    said: list[str] = []
    termination.write(TerminationLog(path, create=False), "drained", said.append)
    assert path.read_bytes() == b"drainhook: drained"
    assert said == []


def test_write_to_a_missing_default_does_not_create_it(tmp_path: Path) -> None:
    path = tmp_path / "absent"
    said: list[str] = []
    termination.write(TerminationLog(path, create=False), "drained", said.append)
    assert not path.exists()
    assert len(said) == 1 and "No such file" in said[0]


# -- the hook, end to end -------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait(hook: Hook, url: str, *extra: str, env: dict[str, str] | None = None) -> Run:
    return hook("wait", "--url", url, *FAST, *extra, env=env, timeout=20)


def summary(run: Run) -> str:
    return run.summary


# The same sentence on stderr, with its time of day.
TIMED = re.compile(r"(drainhook: .*) \(\d\d:\d\d:\d\d\.\d{3}Z\)")
LINE = re.compile(r"drainhook: (\w+) (?:in|at|by \w+ at) (\d+\.\d) s after (\d+) reads?; (.*)")


def parse(path: Path) -> tuple[str, float, int, str]:
    text = path.read_text()
    assert "\n" not in text
    m = LINE.fullmatch(text)
    assert m, text
    return m.group(1), float(m.group(2)), int(m.group(3)), m.group(4)


def test_drained(hook: Hook, tmp_path: Path) -> None:
    path = tmp_path / "termination-log"
    with Loopback(serve(IDLE)) as srv:
        url = srv.url
        run = wait(hook, url, "--termination-log", str(path))
    assert run.code == 0, run.stderr
    outcome, elapsed, reads, work = parse(path)
    assert (outcome, reads, work) == ("drained", 2, "nothing in flight")
    assert elapsed == pytest.approx(float(summary(run).split("elapsed=")[1].split()[0]), abs=0.06)
    assert "warning" not in "".join(hook_lines(run.lines))
    # The same sentence on stderr, just before the summary (which stays the last line).
    assert run.lines[-1] == summary(run)
    assert TIMED.fullmatch(run.lines[-2]).group(1) == path.read_text()  # type: ignore[union-attr]


@pytest.mark.reads
def test_deadline_with_requests_in_flight(hook: Hook, tmp_path: Path) -> None:
    path = tmp_path / "tl"
    with Loopback(serve(BUSY)) as srv:
        url = srv.url
        run = wait(hook, url, *SHORT, "--termination-log", str(path))
        reads = srv.connections
    assert run.code == 3, run.stderr
    said = TIMED.fullmatch(run.lines[-2])  # said on stderr too, before the summary
    assert said is not None and said.group(1) == path.read_text()
    outcome, elapsed, n, work = parse(path)
    lines = [fields(line) for line in run.lines if " read=" in line]
    # A read that D cut short (one started less than --read-timeout before the loop's
    # end, EXIT_ALLOWANCE before D) says only that D came: the message keeps the read
    # before it. One that ran out of its own time (a starved process) is the last
    # word: the work is unknown.
    last = lines[-1]
    started = float(last["t"]) - float(last["read_ms"]) / 1000
    if timed_out(last) and started < 2.0 - EXIT_ALLOWANCE - 0.3:
        assert work.startswith("work in flight unknown (last read unknown: "), work
        assert "after_sigterm=" not in summary(run)
    else:
        # vLLM's requests left at SIGTERM hang until the kill at G: the line says so.
        assert work == "; ".join(
            ("3 requests still in flight at SIGTERM", termination.HANG_SAID, termination.RAISE_G)
        )
        assert fields(summary(run))["after_sigterm"] == termination.HANG_UNTIL_KILL
    assert outcome == "deadline"
    assert n == len(lines) >= 5
    assert connections_fit(reads, lines), run.stderr
    assert 2.0 <= elapsed <= late(2.0, HOOK_LATE, run.starved)  # D


@pytest.mark.parametrize(("body", "after"), [(BUSY, "hang-until-kill"), (IDLE, None)])
def test_the_json_summary_says_what_becomes_of_vllm_work_left_at_the_deadline(
    hook: Hook, body: bytes, after: str | None
) -> None:
    """A stable field, not prose: `after_sigterm` is `hang-until-kill` when the deadline
    came with vLLM requests in flight, null when it came with none (an idle engine whose
    second idle read never fit: --settle past D)."""
    extra = ("--settle", "2.2") if body == IDLE else ()
    with Loopback(serve(body)) as srv:
        run = wait(hook, srv.url, *SHORT, *extra, "--log-format", "json")
    assert run.code == 3, run.stderr
    (line,) = [json.loads(x) for x in run.lines if x.startswith('{"event": "summary"')]
    if line["reason"] is None and line["in_flight"]:
        assert line["after_sigterm"] == after and line["after_sigterm_why"]
        assert line["in_flight"] == 3 and isinstance(line["in_flight"], int)
    else:
        assert line["after_sigterm"] is None and line["after_sigterm_why"] is None


def test_deadline_with_reads_unknown(hook: Hook, tmp_path: Path) -> None:
    path = tmp_path / "tl"
    with Loopback(hang) as srv:
        run = wait(hook, srv.url, *SHORT, "--termination-log", str(path))
    assert run.code == 3, run.stderr
    outcome, _, _, work = parse(path)
    assert outcome == "deadline"
    # The last read is cut at D: its time runs out while it waits for the answer, or
    # (a starved process starting it just before D) already while it sends the request.
    assert work.startswith("work in flight unknown (last read unknown: "), work
    assert any(f"{phase} timed out" in work for phase in ("read", "write")), work


def test_deadline_before_any_read(hook: Hook, tmp_path: Path) -> None:
    path = tmp_path / "tl"
    run = hook("wait", "--url", f"http://127.0.0.1:{free_port()}/metrics", "--settle", "2",
               *SHORT, "--termination-log", str(path), timeout=20)  # fmt: skip
    assert run.code == 3, run.stderr
    assert parse(path)[2:] == (0, "no read before it, work in flight unknown")


def test_unreachable(hook: Hook, tmp_path: Path) -> None:
    path = tmp_path / "tl"
    run = wait(hook, f"http://127.0.0.1:{free_port()}/metrics", "--termination-log", str(path))
    assert run.code == 4, run.stderr
    outcome, _, reads, work = parse(path)
    assert (outcome, reads) == ("unreachable", 1)
    # Then the ports that listen in this namespace (this machine's: not asserted;
    # tests/test_discovery_cli.py names them in a namespace of its own).
    # Then why the engine is gone: the hook runs in a PID namespace of its own
    # (tests/conftest.py), so no process it sees holds this machine's listeners.
    assert work.startswith("no work could be measured: connection refused; the engine is gone: ")


def test_exit_zero_keeps_the_outcome_in_the_line(hook: Hook, tmp_path: Path) -> None:
    path = tmp_path / "tl"
    with Loopback(serve(BUSY)) as srv:
        run = wait(hook, srv.url, *SHORT, "--exit-zero", "--termination-log", str(path))
    assert run.code == 0, run.stderr
    assert parse(path)[0] == "deadline"


def test_interrupted_by_sigterm(entry: list[str], tmp_path: Path) -> None:
    path = tmp_path / "tl"
    with Loopback(serve(BUSY)) as srv:
        argv = [*entry, "wait", "--url", srv.url, *FAST, "--termination-log", str(path)]
        proc = subprocess.Popen(argv, env=base_env(), stdin=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip
        try:
            end = time.monotonic() + 15
            while srv.connections < 2:
                assert time.monotonic() < end and proc.poll() is None, "no reads"
                time.sleep(0.01)
            proc.send_signal(signal.SIGTERM)
            _, stderr = proc.communicate(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 143, stderr
    outcome, _, reads, work = parse(path)
    assert outcome == "interrupted" and reads >= 1
    assert path.read_text().startswith("drainhook: interrupted by SIGTERM at ")
    assert work == "3 requests at the last read"


def test_a_fifo_without_reader_does_not_block(hook: Hook, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with Loopback(serve(IDLE)) as srv:
        run = wait(hook, srv.url, "--termination-log", str(fifo))
    assert run.code == 0, run.stderr
    assert "outcome=drained" in summary(run)
    assert run.elapsed < late(0.2, SPAWN_LATE, run.starved)  # S + I: drained on time
    assert "cannot write --termination-log" in run.stderr
    assert "no process reads that FIFO" in run.stderr


@pytest.mark.parametrize(
    ("where", "why"),
    [("dir", "Is a directory"), ("/dev/full", "No space left on device"),
     ("missing/tl", "No such file or directory")],
    ids=["directory", "full-disk", "missing-directory"],
)  # fmt: skip
def test_a_path_that_cannot_be_written_never_changes_the_outcome(
    hook: Hook, tmp_path: Path, where: str, why: str
) -> None:
    path = Path(where) if where.startswith("/") else tmp_path / where
    if where == "dir":
        path.mkdir()
    with Loopback(serve(BUSY)) as srv:
        run = wait(hook, srv.url, *SHORT, "--termination-log", str(path))
    assert run.code == 3, run.stderr
    assert "outcome=deadline" in summary(run)
    assert f"cannot write --termination-log {path}: {why}; going on" in run.stderr
    assert run.lines[-1] == summary(run)  # the summary stays the last line


def test_the_failure_is_a_json_warning_with_log_format_json(hook: Hook, tmp_path: Path) -> None:
    with Loopback(serve(IDLE)) as srv:
        run = wait(hook, srv.url, "--log-format", "json", "--termination-log", str(tmp_path))
    assert run.code == 0
    assert any('"event": "warning"' in line and "--termination-log" in line for line in run.lines)


# -- the default path, in a /dev of the test's own --------------------------------------------

# Run argv with /dev a fresh tmpfs (the device nodes a process needs bound back in),
# /dev/termination-log made when $MAKE is 1, then copy it to $OUT after the hook ends.
PRIVATE_DEV = r"""
set -e
# --rbind: in a user namespace /dev's own mounts (pts, shm) go with it or not at all
old="$WORK/dev"; mkdir -p "$old"; mount --rbind /dev "$old"
mount -t tmpfs none /dev
for n in null zero random urandom full; do touch "/dev/$n"; mount --bind "$old/$n" "/dev/$n"; done
if [ "$MAKE" = 1 ]; then : > /dev/termination-log; fi
mkdir "$WORK/ro"; mount -t tmpfs -o ro none "$WORK/ro"
set +e
"$@"; code=$?
if [ -e /dev/termination-log ]; then cat /dev/termination-log > "$OUT"; fi
exit $code
"""


def mountns() -> list[str] | None:
    """A command prefix for a mount namespace of its own (as root, or in a user namespace)."""
    if shutil.which("unshare") is None:
        return None
    for prefix in (["unshare", "-m"], ["unshare", "-r", "-m"]):
        try:
            probe = [*prefix, "sh", "-c", "mount -t tmpfs none /mnt"]
            done = subprocess.run(probe, capture_output=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            return prefix
    return None


MOUNTNS = mountns()
needs_mountns = pytest.mark.skipif(
    MOUNTNS is None, reason="no mount namespace (`unshare -m`) can be made here"
)


def in_private_dev(
    entry: list[str],
    tmp_path: Path,
    url: str,
    *args: str,
    make: bool,
    env: dict[str, str] | None = None,
) -> tuple[subprocess.CompletedProcess[str], str | None]:
    assert MOUNTNS is not None
    out = tmp_path / "copied"
    work = tmp_path / "work"
    work.mkdir()
    full_env = base_env(
        {"WORK": str(work), "OUT": str(out), "MAKE": "1" if make else "0", **(env or {})}
    )
    argv = [*MOUNTNS, "sh", "-c", PRIVATE_DEV, "sh", *entry, "wait", "--url", url, *FAST, *args]
    run = subprocess.run(argv, env=full_env, capture_output=True, text=True, timeout=30)
    return run, out.read_text() if out.exists() else None


@needs_mountns
def test_default_path_is_written_when_it_exists(entry: list[str], tmp_path: Path) -> None:
    with Loopback(serve(IDLE)) as srv:
        run, text = in_private_dev(entry, tmp_path, srv.url, make=True)
    assert run.returncode == 0, run.stderr
    assert text is not None and text.startswith("drainhook: drained in ")
    assert text.endswith("after 2 reads; nothing in flight")


@needs_mountns
def test_default_path_is_not_made_when_missing(entry: list[str], tmp_path: Path) -> None:
    with Loopback(serve(IDLE)) as srv:
        run, text = in_private_dev(entry, tmp_path, srv.url, make=False)
    assert run.returncode == 0, run.stderr
    assert text is None  # /dev/termination-log still does not exist
    assert "termination-log" not in run.stderr


@needs_mountns
@pytest.mark.parametrize(
    ("args", "env"),
    [(("--termination-log", ""), None), ((), {"DRAINHOOK_TERMINATION_LOG": ""})],
    ids=["flag", "env"],
)
def test_empty_turns_it_off(
    entry: list[str], tmp_path: Path, args: tuple[str, ...], env: dict[str, str] | None
) -> None:
    with Loopback(serve(IDLE)) as srv:
        run, text = in_private_dev(entry, tmp_path, srv.url, *args, make=True, env=env)
    assert run.returncode == 0, run.stderr
    assert text == ""  # the file the kubelet made, left empty


@needs_mountns
def test_the_variable_names_the_path(entry: list[str], tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    with Loopback(serve(IDLE)) as srv:
        run, text = in_private_dev(entry, tmp_path, srv.url, make=True,
                                   env={"DRAINHOOK_TERMINATION_LOG": str(mine)})  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert text == ""
    assert mine.read_text().startswith("drainhook: drained in ")


@needs_mountns
def test_a_read_only_filesystem(entry: list[str], tmp_path: Path) -> None:
    path = tmp_path / "work" / "ro" / "tl"
    with Loopback(serve(BUSY)) as srv:
        run, _ = in_private_dev(entry, tmp_path, srv.url, *SHORT, "--termination-log", str(path),
                                make=False)  # fmt: skip
    assert run.returncode == 3, run.stderr
    assert "Read-only file system; going on" in run.stderr
    assert "outcome=deadline" in run.stderr.splitlines()[-1]
