"""The hook at a terminal (CONTRACT §5), on a pseudo-terminal: a person who runs
`wait` by hand reads lines that fit 120 columns, `left=` in tenths and the time
of day without the date, while a file keeps the full record; a usage error still
holds like the sleep, and says the way out and the flag meant."""

from __future__ import annotations

import os
import re
import select
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import SPAWN_LATE, late
from tests.support.logs import fields
from tests.support.loopback import Loopback, sample, sequence, serve
from tests.support.process import base_env

IDLE = sample("vllm-single-dp2-idle.txt")
BUSY = sample("vllm-single-dp2.txt")
TIMELINE = ("--settle", "0.2", "--interval", "0.1", "--read-timeout", "0.3")
DEADLINE = ("--grace", "2.5", "--exit-reserve", "0.5")  # D = 2 s


@pytest.fixture
def tty() -> Iterator[tuple[int, int]]:
    master, slave = os.openpty()
    try:
        yield master, slave
    finally:
        os.close(master)
        os.close(slave)


def shown(master: int) -> list[str]:
    """What the terminal shows, line by line (a tty ends each with CR LF)."""
    out = b""
    while select.select([master], [], [], 0.2)[0]:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    return out.decode().replace("\r\n", "\n").splitlines()


def run_on(tty: tuple[int, int], argv: list[str]) -> tuple[int, float]:
    start = time.monotonic()
    proc = subprocess.run(argv, stdout=tty[1], stderr=tty[1], env=base_env(), timeout=20)
    return proc.returncode, time.monotonic() - start


def test_at_a_terminal_the_lines_fit_and_the_file_keeps_the_record(
    entry: list[str], tty: tuple[int, int], tmp_path: Path
) -> None:
    log = tmp_path / "hook.log"
    with Loopback(sequence(*[serve(BUSY)] * 3, serve(IDLE))) as srv:
        long = srv.url + "?" + "x" * 150  # a target longer than a terminal's line
        argv = [*entry, "wait", "--url", long, *TIMELINE, *DEADLINE, "--log-reads", "all"]
        code, _ = run_on(tty, [*argv, "--log-file", str(log), "--termination-log", ""])
    assert code == 0
    seen = shown(tty[0])
    reads = [ln for ln in seen if " read=" in ln]
    assert len(reads) >= 4 and all(len(ln) <= 120 for ln in seen), seen
    assert any(ln.endswith("…") for ln in seen)  # the start line, cut
    for line in reads:
        assert re.fullmatch(r"\d\d:\d\d:\d\d\.\d{3}", fields(line)["at"]), line
        assert re.fullmatch(r"\d+(\.\d)?", fields(line)["left"]), line
    kept = [ln for ln in log.read_text().splitlines() if " read=" in ln]
    assert len(kept) == len(reads)
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+Z", fields(ln)["at"]) for ln in kept)
    assert any(len(fields(ln)["left"].split(".")[-1]) == 3 for ln in kept)  # ms, in the file
    start = next(ln for ln in log.read_text().splitlines() if ln.startswith("drainhook start="))
    assert long in start  # the whole target in the file
    ending = next(ln for ln in seen if ln.startswith("drainhook: drained in "))
    assert re.search(r" \(\d\d:\d\d:\d\d\.\d{3}Z\)$", ending)  # its time of day


def test_a_usage_error_at_a_terminal_holds_and_says_the_way_out_and_the_flag_meant(
    entry: list[str], tty: tuple[int, int]
) -> None:
    code, took = run_on(tty, [*entry, "wait", "--json", *DEADLINE, "--termination-log", ""])
    (line,) = [ln for ln in shown(tty[0]) if ln.startswith("drainhook")]
    assert code == 2 and 1.9 <= took <= late(2.0, SPAWN_LATE), (code, took)
    assert line == (
        "drainhook wait: no such option '--json'; did you mean --log-format json?; "
        "holding as a blind sleep until D = 2 s; Ctrl-C stops it"
    )
    piped = subprocess.run(
        [*entry, "wait", "--json", *DEADLINE, "--termination-log", ""],
        capture_output=True, text=True, env=base_env(), timeout=20,
    )  # fmt: skip
    assert piped.returncode == 2 and "Ctrl-C" not in piped.stderr  # no terminal, no person
    assert "did you mean --log-format json?" in piped.stderr
