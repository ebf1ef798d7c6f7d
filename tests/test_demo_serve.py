"""`scripts/demo --serve`: the simulated engine served until interrupted and driven by
hand, read by the real `probe` and `plan --observe` over loopback: requests that
run and wait, a frozen engine, the latency histogram they leave."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.process import ROOT, base_env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def drainhook(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "drainhook", *args],
        capture_output=True, text=True, env=base_env(), cwd=ROOT, timeout=30,
    )  # fmt: skip


def probe(url: str) -> dict[str, Any]:
    done = drainhook("probe", "--url", url, "--json")
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def until(check: Callable[[], bool], within: float = 20.0) -> None:
    end = time.monotonic() + within
    while not check():
        assert time.monotonic() < end, "the condition never came"
        time.sleep(0.1)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str, Path]]:
    port, control = free_port(), tmp_path / "control"
    proc = subprocess.Popen(
        [sys.executable, "-m", "sim", "--serve", "--port", str(port), "--control", str(control)],
        stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=base_env(), cwd=ROOT,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        assert first.startswith(f"demo: a simulated vLLM at http://127.0.0.1:{port}/metrics")
        yield proc, f"http://127.0.0.1:{port}/metrics", control
    finally:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stderr is not None:
            proc.stderr.close()


def test_run_requests_then_observe_them(served: tuple[subprocess.Popen[str], str, Path]) -> None:
    proc, url, control = served
    assert probe(url)["verdict"] == "idle"
    control.write_text("run 6 1.5\n")  # four run, two wait
    until(lambda: probe(url)["in_flight"] == 6)
    busy = probe(url)
    counts = {s["name"]: 0.0 for s in busy["series"]}
    for s in busy["series"]:
        counts[s["name"]] += s["value"]
    assert counts == {"vllm:num_requests_running": 4.0, "vllm:num_requests_waiting": 2.0}
    until(lambda: probe(url)["verdict"] == "idle")
    observed = json.loads(drainhook("plan", "--observe", "--url", url, "--output", "json").stdout)
    assert observed["observed"]["requests"] == 6
    assert observed["recommended_grace"] is not None
    wrong = drainhook("probe", "--port", str(int(url.split(":")[2].split("/")[0]) + 1))
    assert wrong.returncode == 3 and "point --port" in wrong.stdout  # said, with the fix
    with control.open("a") as more:
        more.write("quit\n")
    assert proc.wait(timeout=10) == 0


def test_a_frozen_engine_keeps_its_work_and_stops_its_counters(
    served: tuple[subprocess.Popen[str], str, Path],
) -> None:
    proc, url, control = served
    control.write_text("run 2 20\n")
    until(lambda: probe(url)["in_flight"] == 2)
    with control.open("a") as more:
        more.write("freeze\n")
    time.sleep(0.3)  # tokens would move in this time: 6 at 50 ms each, per stream
    first = probe(url)["progress"]
    time.sleep(0.5)
    later = probe(url)
    assert later["progress"] == first and later["in_flight"] == 2
    proc.send_signal(signal.SIGINT)  # Ctrl-C: stopped, exit 0
    assert proc.wait(timeout=10) == 0
