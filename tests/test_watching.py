"""A drain as people see it (issue 59, CONTRACT §5): `wait` and `probe` with a
pseudo-terminal for their output, in a container whose PID 1 is a shell that started
the engine as its child, with `--log-file /proc/1/fd/1`, so that PID 1's stdout (a
file here, the container's log there) holds the lines `kubectl logs` shows. Each
case is a Pod of its own: a network namespace with the engine's listener, and the
hook's container in a PID namespace of its own."""

from __future__ import annotations

import os
import re
import select
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from drainhook.hook.probe import watch_reads
from drainhook.hook.signals import Interrupted
from drainhook.reading.config import ReadConfig
from drainhook.reading.target import parse_url
from tests.conftest import POD_LATE, late
from tests.support.logs import fields
from tests.support.loopback import Loopback, sample, sequence, serve
from tests.support.podns import Pod, engine
from tests.support.process import container

# A stand-in engine, `vllm serve m`, started by PID 1's shell without `exec`; it
# listens on 8001 of the hook's container when asked (a wrong --port's engine).
ENGINE = """#!{python}
import socket, sys, time
if sys.argv[-1] == "8001":
    s = socket.socket(); s.bind(("127.0.0.1", 8001)); s.listen()
time.sleep(30)
"""
# (The hook's redirection in a subshell: dash redirects a command's descriptors in the
# shell itself around its vfork, and PID 1's stdout would be the terminal meanwhile.)
PID1 = (
    'exec >"$LOG"; "$VLLM" serve m $PORT & (exec "$@" >"$TTY" 2>&1); code=$?; kill %1; exit $code'
)


@pytest.fixture
def tty() -> Iterator[tuple[int, str]]:
    """A pseudo-terminal: its master side, and the path of the side the hook writes to."""
    master, slave = os.openpty()
    try:
        yield master, os.ttyname(slave)
    finally:
        os.close(master)
        os.close(slave)


def drained(master: int) -> list[str]:
    """What the terminal shows, line by line (a tty ends each with CR LF)."""
    out = b""
    while select.select([master], [], [], 0)[0] and (chunk := os.read(master, 65536)):
        out += chunk
    return out.decode().replace("\r\n", "\n").splitlines()


def fit(seen: list[str], logged: list[str]) -> bool:
    """The terminal's lines are the log's, as a terminal shows them (CONTRACT §5):
    the time of day without the date, `left=` in tenths, cut to 120 columns."""

    def terminal(line: str) -> str:
        line = re.sub(r" at=\d{4}-\d\d-\d\dT([\d:.]+)Z", r" at=\1", line)
        line = re.sub(r" left=([\d.]+)", lambda m: f" left={round(float(m[1]), 1):g}", line)
        return line if len(line) <= 120 else line[:119] + "…"

    plain = [ln if ln.startswith("drainhook: ") else terminal(ln) for ln in logged]
    return len(seen) == len(logged) and seen == plain


def in_pod(
    pod_command: Pod,
    tmp_path: Path,
    entry: list[str],
    tty: str,
    args: list[str],
    port: str = "",
    samples: tuple[str, ...] = ("vllm-single-dp2.txt",),
) -> tuple[int, list[str]]:
    """The hook with args in the shell's container beside an engine on 8000 (busy, or
    these bodies read after read); its exit code and PID 1's stdout, the container's
    log."""
    vllm = tmp_path / "vllm"
    vllm.write_text(ENGINE.format(python=sys.executable))
    vllm.chmod(0o755)
    log = tmp_path / "container.log"
    env = {"LOG": str(log), "VLLM": str(vllm), "TTY": tty, "PORT": port}
    argv = [*container(), "sh", "-c", PID1, "sh", *entry, *args]
    run = pod_command([engine("engine", 8000, *samples)], argv, env=env, timeout=40)
    return run.code, log.read_text().splitlines()


def test_a_busy_drain_seen_at_a_terminal_and_in_the_container_log(
    pod_command: Pod, tmp_path: Path, entry: list[str], tty: tuple[int, str]
) -> None:
    """No --grace (G = 30 s, the default: marked), D = 6 s by --max-wait, 6 requests
    in flight throughout: the start line, the shell PID 1 named once, the first read
    with the time left, a pulse 5 s later, the ending in words, the summary."""
    master, path = tty
    args = ["wait", "--settle", "0.2", "--interval", "0.5", "--max-wait", "6",
            "--log-file", "/proc/1/fd/1", "--termination-log", ""]  # fmt: skip
    code, logged = in_pod(pod_command, tmp_path, entry, path, args)
    seen = drained(master)
    assert code == 3, seen
    assert fit(seen, logged)  # the terminal shows the container log's lines, fit to it
    shown = logged
    start = fields(shown[0])
    assert shown[0].startswith("drainhook start=0 at=")
    assert (start["grace"], start["grace_from"], start["deadline"]) == ("30", "default", "6")
    (pid1,) = [line for line in shown if "code=shell-pid1" in line]
    assert "PID 1 is sh, which drops SIGTERM" in pid1
    reads = [fields(line) for line in shown if " read=" in line]
    first, pulse = reads[0], reads[-1]
    assert (first["verdict"], first["in_flight"]) == ("busy", "6")
    assert float(first["left"]) == pytest.approx(6 - float(first["t"]), abs=0.002)
    assert "reads" in pulse and float(pulse["t"]) - float(first["t"]) >= 5
    assert float(pulse["left"]) < 1 and len(reads) == 2  # nothing changed: one pulse
    assert shown[-2].startswith("drainhook: deadline at 6.0 s after ")
    assert "; 6 requests still in flight at SIGTERM; SIGTERM cuts them" in shown[-2]
    assert re.search(r"raise G past the longest request \(drainhook plan --observe "
                     r"measures it\) \(\d\d:\d\d:\d\d\.\d{3}Z\)$", shown[-2])  # fmt: skip
    summary = fields(shown[-1])
    assert (summary["outcome"], summary["exit"], summary["in_flight"]) == ("deadline", "3", "6")


def test_a_wrong_port_is_misconfigured_at_a_terminal_and_in_the_container_log(
    pod_command: Pod, tmp_path: Path, entry: list[str], tty: tuple[int, str]
) -> None:
    """The engine listens on 8001 of the hook's container, the hook reads port 9
    (another container's engine listens on 8000, which is not the hook's): held to
    D = 2 s, then `misconfigured`, exit 6, its cause said once."""
    master, path = tty
    args = ["wait", "--port", "9", "--settle", "0.2", "--interval", "0.25", "--grace", "3",
            "--exit-reserve", "1", "--log-file", "/proc/1/fd/1",
            "--termination-log", ""]  # fmt: skip
    code, logged = in_pod(pod_command, tmp_path, entry, path, args, port="8001")
    seen = drained(master)
    assert code == 6, seen
    assert fit(seen, logged)
    shown = logged
    reads = [fields(line) for line in shown if " read=" in line]
    assert len(reads) == 1 and reads[0]["reason"].startswith("misconfigured: connection refused")
    assert shown[-2].startswith("drainhook: misconfigured: held to D at 2.0 s after ")
    summary = fields(shown[-1])
    assert (summary["outcome"], summary["exit"]) == ("misconfigured", "6")
    assert "8001 by pid" in summary["reason"]


def test_probe_at_a_terminal_names_the_shell_pid_1(
    pod_command: Pod, tmp_path: Path, entry: list[str], tty: tuple[int, str]
) -> None:
    """`probe` by hand in the engine's container: its read, busy (exit 1), and the
    warning that SIGTERM would stop at the shell; nothing in the container's log."""
    master, path = tty
    code, logged = in_pod(pod_command, tmp_path, entry, path, ["probe", "--port", "8000"])
    shown = drained(master)
    assert code == 1, shown
    rows = dict(line.split(None, 1) for line in shown if line and not line.startswith("PID"))
    assert (rows["verdict"], rows["in_flight"]) == ("busy", "6"), shown
    assert any("PID 1 is sh, which drops SIGTERM" in line for line in shown), shown
    assert logged == []


def test_probe_watch_at_a_terminal_writes_a_line_per_change_until_interrupted(
    pod_command: Pod, tmp_path: Path, entry: list[str], tty: tuple[int, str]
) -> None:
    """`probe --watch` every 0.25 s, busy twice then idle, until SIGINT at 3 s: the shell
    PID 1 named once, a read line for the first read and one for the change to idle
    (not one per read), then the interruption, exit 130; nothing in the log."""
    master, path = tty
    watch = ["timeout", "--preserve-status", "-s", "INT", "3", *entry]
    args = ["probe", "--port", "8000", "--watch", "--interval", "0.25"]
    samples = ("vllm-single-dp2.txt", "vllm-single-dp2.txt", "vllm-single-dp2-idle.txt")
    code, logged = in_pod(pod_command, tmp_path, watch, path, args, samples=samples)
    shown = drained(master)
    assert code == 130, shown
    assert "PID 1 is sh, which drops SIGTERM" in shown[0] and shown[0].count("drainhook ") == 1
    reads = [fields(line) for line in shown if " read=" in line]
    assert [(r["read"], r["verdict"], r["in_flight"]) for r in reads] == [
        ("1", "busy", "6"), ("3", "idle", "0"),
    ], shown  # fmt: skip
    assert float(reads[1]["t"]) == pytest.approx(0.5, abs=0.2)
    assert all(" at=" in line for line in shown[:-1])
    assert shown[-1] == "drainhook: interrupted by SIGINT" and logged == []


@pytest.fixture
def no_pid1(monkeypatch: pytest.MonkeyPatch) -> None:
    """In this process, PID 1 is whatever runs the tests: not the engine's."""
    monkeypatch.setattr("drainhook.hook.probe.unsignalled", lambda _target: None)


@pytest.mark.usefixtures("no_pid1")
def test_probe_watch_reads_every_interval_and_writes_only_changes() -> None:
    """Driven by a fake clock on a real loopback engine: busy, busy, idle, idle, busy.
    Lines at reads 1, 3 and 5 with their t, the sleeps keep the interval from each
    read's start, and a closed output ends the watch with the last read's code."""
    busy, idle = sample("vllm-single-dp2.txt"), sample("vllm-single-dp2-idle.txt")
    bodies = (busy, busy, idle, idle, busy, idle)
    now, sleeps, lines = [100.0], list[float](), list[str]()

    def sleep(s: float) -> None:
        sleeps.append(s)
        now[0] += s
        if len(sleeps) == 5:
            raise Interrupted(2)

    def clock() -> float:  # 0.05 s passes between two looks: a read takes 0.05 s
        now[0] += 0.05
        return now[0]

    with Loopback(sequence(*(serve(b) for b in bodies))) as srv:
        reach = ReadConfig(target=parse_url(srv.url), connections=False)
        with pytest.raises(Interrupted):
            watch_reads(reach, False, 1.0, lines.append, clock, sleep, lambda: 0.0)
    reads = [fields(line) for line in lines]
    assert [(r["read"], r["verdict"]) for r in reads] == [("1", "busy"), ("3", "idle"),
                                                          ("5", "busy")]  # fmt: skip
    assert [float(r["t"]) for r in reads] == pytest.approx([0.05, 2.15, 4.25])
    assert sleeps == pytest.approx([0.95] * 5)
    assert all(r["at"] == "1970-01-01T00:00:00.000Z" for r in reads)

    def closed(line: str) -> None:
        raise BrokenPipeError

    with Loopback(serve(idle)) as srv:
        reach = ReadConfig(target=parse_url(srv.url), connections=False)
        assert watch_reads(reach, True, 1.0, closed, sleep=sleep) == 0


def test_probe_watch_ends_when_its_reader_goes_away_while_nothing_changes(
    pod_command: Pod, entry: list[str]
) -> None:
    """`probe --watch | head -1` on an idle engine: head reads the first line and
    exits; nothing changes after it, so nothing is written that could fail, and
    the watch still ends within one interval (2 s) of its reader going away. Before,
    it ran on until `timeout` killed it at 20 s."""
    watch = [*entry, "probe", "--port", "8000", "--watch", "--interval", "2"]
    argv = ["sh", "-c", 'timeout 20 "$@" | head -1; echo "$?"', "sh", *watch]
    run = pod_command([engine("engine", 8000, "vllm-single-dp2-idle.txt")], argv, timeout=40)
    first, code = run.stdout.splitlines()  # (a warning of PID 1 may come first)
    assert first.startswith("drainhook ") and code == "0", run.stdout
    assert run.elapsed < late(2.0 + 2.0, POD_LATE), run.elapsed


@pytest.mark.usefixtures("no_pid1")
def test_probe_watch_asks_whether_its_reader_is_gone_after_a_quiet_read() -> None:
    """Driven by a fake clock: idle, idle, idle; the reader goes away after the first
    line. The watch asks after each read that wrote nothing, and ends on the first
    such read with its code (0, idle), without sleeping again."""
    idle = sample("vllm-single-dp2-idle.txt")
    lines, sleeps, asked = list[str](), list[float](), list[int]()

    def gone() -> bool:
        asked.append(len(lines))
        return True

    with Loopback(sequence(*(serve(idle) for _ in range(3)))) as srv:
        reach = ReadConfig(target=parse_url(srv.url), connections=False)
        code = watch_reads(reach, False, 1.0, lines.append, sleep=sleeps.append, gone=gone)
    assert (code, len(lines), asked, len(sleeps)) == (0, 1, [1], 1)


@pytest.mark.usefixtures("no_pid1")
def test_probe_watch_warns_once_of_an_interval_under_100_ms() -> None:
    """Every 50 ms: one warning naming the 20 reads a second, then the read lines."""
    idle = sample("vllm-single-dp2-idle.txt")
    lines = list[str]()
    with Loopback(sequence(*(serve(idle) for _ in range(2)))) as srv:
        reach = ReadConfig(target=parse_url(srv.url), connections=False)
        watch_reads(reach, False, 0.05, lines.append, sleep=lambda _s: None, gone=lambda: True)
    assert len(lines) == 2 and "read=" in lines[1], lines
    assert "interval I = 0.05 s is under 0.1 s: the engine is read 20 times a second" in lines[0]
