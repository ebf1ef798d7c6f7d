"""The conformance episodes (tests/support/conformance.py) against the simulated engine.

The rehearsal's engine process (`python -m rehearsal.engine --kind vllm|sglang`),
its timeline scaled by SCALE, plays each episode and is held to the table the
live engine was measured against (tests/live/ and tests/live_sglang/ run the
same episodes on the live vLLM and SGLang). Each case fails with the list of
what the simulated engine did differently from the live one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from rehearsal.timeline import TOKEN_TICK
from tests.conftest import SPAWN_LATE, late
from tests.support import conformance
from tests.support.process import ROOT, base_env

SCALE = 0.5  # the simulated engine's seconds per episode second


class SimEngine:
    """The rehearsal's simulated vLLM as a process on 127.0.0.1 (conformance.EngineUnderTest)."""

    scale = SCALE

    def __init__(self, shutdown_timeout: float, *flags: str, kind: str = "vllm") -> None:
        argv = [
            sys.executable,
            "-m",
            "rehearsal.engine",
            "--kind",
            kind,
            "--dp",
            "1",
            "--max-running",
            "4",
            "--durations",
            "tokens",
            "--scale",
            str(SCALE),
            "--shutdown-timeout",
            str(shutdown_timeout),
            *flags,
        ]
        self.proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=base_env({"PYTHONPATH": str(ROOT)}),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        ready = self.proc.stdout.readline().split()
        if not ready or ready[0] != "READY":
            self.kill()
            raise AssertionError(f"the simulated engine did not start: {ready}")
        self.port = int(ready[1])
        self.pid = self.proc.pid

    def tokens(self, seconds: float) -> int:
        return max(1, round(seconds / TOKEN_TICK))  # one event a tick, the tick scaled

    def body(self, tokens: int, user: str) -> dict[str, Any]:
        return {"max_tokens": tokens, "stream": True, "user": user}

    def sigterm(self) -> None:
        self.proc.terminate()

    def wait_exit(self, timeout: float) -> bool:
        try:
            self.proc.wait(timeout=max(0.0, timeout))
        except subprocess.TimeoutExpired:
            return False
        return True

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)
        self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


# The simulated engine models vLLM and SGLang's Python HTTP server, not SGLang's
# opt-in Rust server (its episode runs on the live engine only).
SIMULATED = [n for n, e in conformance.EPISODES.items() if e.engine in ("vllm", "sglang")]


@pytest.mark.parametrize("name", SIMULATED)
def test_simulated_engine_conforms_to_the_live_one(name: str) -> None:
    episode = conformance.EPISODES[name]
    engine = SimEngine(episode.shutdown_timeout, kind=episode.engine)
    try:
        seen = conformance.run(engine, episode)
    finally:
        engine.kill()
    assert conformance.mismatch(seen, episode) == [], conformance.summary(seen)


# What a client read -> the kind the table compares (times: engine seconds, kill at 10).
KILL = 10.0
READ = [
    (conformance.Ended(status=200, tokens=5, finish="length", done=True), "complete"),
    (conformance.Ended(status=200, tokens=5, finish="abort", done=True), "aborted"),
    (conformance.Ended(status=200, tokens=0, finish="abort", done=True), "empty"),
    # vLLM aborting a request that still waited: no chunk without a token, usage, [DONE].
    (conformance.Ended(status=200, tokens=0, finish=None, done=True), "empty"),
    (conformance.Ended(status=200, tokens=3, finish=None, done=True, error=True), "errored"),
    (conformance.Ended(status=200, tokens=0, finish=None, done=True, error=True), "errored"),
    # Closed without [DONE] before the kill, or [DONE] after tokens with no reason.
    (conformance.Ended(status=200, tokens=3, ended=2.0), "truncated"),
    (conformance.Ended(status=200, tokens=3, finish=None, done=True, ended=2.0), "truncated"),
    # Open at the kill: silent for STALL before it, or streaming up to it.
    (conformance.Ended(status=200, tokens=3, last_byte=KILL - 1.0, ended=KILL + 0.1), "stalled"),
    (conformance.Ended(status=200, tokens=3, last_byte=KILL - 0.1, ended=KILL + 0.1), "truncated"),
    (conformance.Ended(kind="refused:500", status=500), "refused:500"),
    (conformance.Ended(kind="refused:connection"), "refused:connection"),
]


@pytest.mark.parametrize(("read", "kind"), READ, ids=[kind for _, kind in READ])
def test_each_read_is_classified_as_the_table_names_it(read: conformance.Ended, kind: str) -> None:
    assert conformance.classify(read, KILL, 1.0) == kind


# The window episode (conformance.run_upload) on the simulated vLLM: one API server
# with and without server-load tracking, and two API servers with it.
UPLOADS = {
    "default": ((), False, 1),
    "load-tracking": (("--load-tracking",), True, 1),
    "api-servers-2": (("--load-tracking", "--api-servers", "2"), True, 2),
}


def play_upload(name: str) -> conformance.UploadSeen:
    flags = UPLOADS[name][0]
    engine = SimEngine(0.0, *flags)
    try:
        return conformance.run_upload(engine, [sys.executable, "-m", "drainhook"], base_env())
    finally:
        engine.kill()


@pytest.mark.parametrize("name", list(UPLOADS))
def test_simulated_vllm_shows_the_upload_window_as_the_live_one(name: str) -> None:
    """Mid-upload: gauges 0, /load 0, the connection with bytes in and none out; mid-
    stream: gauges 1, /load as tracking says; the request completes."""
    _, tracking, servers = UPLOADS[name]
    seen = play_upload(name)
    differences = conformance.upload_differences(seen, tracking, servers)
    assert differences == [], conformance.upload_numbers(seen)


@pytest.mark.parametrize("name", ["default", "api-servers-2"])
def test_the_hook_holds_an_upload_until_its_stream_ends(name: str) -> None:
    """The hook, started 0.2 s into a 4 s upload, returns drained only after the
    stream's last byte, within 2I + 0.3 s of it (I = 0.5 s, episode time): the
    connection signal sees what no gauge does (CONTRACT §2a)."""
    seen = play_upload(name)
    numbers = conformance.upload_numbers(seen)
    assert seen.hook_code == 0 and '"outcome": "drained"' in seen.hook_stderr, numbers
    assert seen.last_byte is not None and seen.hook_returned is not None
    release = seen.hook_returned - seen.last_byte
    assert 0 < release <= late(2 * 0.5 + 0.3, SPAWN_LATE, seen.starved), numbers
