"""Doubt holds (CONTRACT §2a, §5), through the real CLI: a side signal in doubt,
vLLM without scheduler gauges, a stderr nobody reads, a G that overflows a
sleep, SIGHUP, a symbolic link at the termination path, a probe whose output
cannot be written, values that are not a host or a port. Each case asserts the
exit code, the time it took and the line that says why, and each is told apart
from what the hook did before: released the engine early, or ran past D."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.conftest import SPAWN_LATE, late
from tests.support.logs import fields
from tests.support.loopback import Behaviour, Loopback, read_request, response_bytes, sample
from tests.support.process import Hook

VLLM_IDLE = sample("vllm-single-dp2-idle.txt")
VLLM_BUSY = sample("vllm-single-dp2.txt")
SGLANG_IDLE = sample("sglang-mp-dp2-idle.txt")
# G 3, R 1: D = 2 s; the first read at S = 0.5 s, one every 0.25 s.
TIMELINE = ("--grace", "3", "--exit-reserve", "1", "--settle", "0.5", "--interval", "0.25")
D = 2.0


def summary_of(stderr: str) -> dict[str, str]:
    return fields([line for line in stderr.splitlines() if "outcome=" in line][-1])


def answers(paths: dict[str, bytes | int]) -> Behaviour:
    """Each path's body (200), or its status (an int, no body); 404 elsewhere."""

    def behaviour(conn: socket.socket) -> None:
        parts = read_request(conn).split(b" ", 2)
        got = paths.get(parts[1].decode("latin-1"), 404) if len(parts) == 3 else 404
        if isinstance(got, int):
            conn.sendall(response_bytes(b"", got, "X"))
        else:
            conn.sendall(response_bytes(got))

    return behaviour


@pytest.mark.parametrize(
    ("paths", "why"),
    [
        ({"/metrics": VLLM_IDLE, "/load": 503}, "/load gave no count (HTTP 503): doubt"),
        ({"/metrics": VLLM_IDLE, "/load": 429}, "/load gave no count (HTTP 429): doubt"),
        (
            {"/metrics": VLLM_IDLE, "/load": b'{"server_load": 0, "server_load": 3}'},
            "/load: server_load given 2 times: doubt",
        ),
        ({"/metrics": SGLANG_IDLE, "/v1/loads": 500}, "/v1/loads gave no count (HTTP 500): doubt"),
        (
            {"/metrics": SGLANG_IDLE, "/v1/loads": b'{"loads": []}'},
            "/v1/loads gave no count (loads list is empty): doubt",
        ),
    ],
    ids=["load-503", "load-429", "load-twice", "loads-500", "loads-empty"],
)
def test_a_side_signal_in_doubt_holds_an_idle_scheduler_to_d(
    hook: Hook, paths: dict[str, bytes | int], why: str
) -> None:
    """Before: the signal was `missing` and the gauges alone released at S + I/4."""
    with Loopback(answers(paths), own_load=False) as srv:
        run = hook("wait", "--url", srv.url, *TIMELINE, "--termination-log", "")
    end = summary_of(run.stderr)
    assert (run.code, end["outcome"], end["reason"]) == (3, "deadline", why), run.stderr
    assert D - 0.05 <= float(end["elapsed"]) <= late(D, SPAWN_LATE, run.starved)


def test_a_missing_side_signal_still_releases_an_idle_engine(hook: Hook) -> None:
    """A vLLM without /load (404) is `missing`, not doubt: drained at S + I/4 or so."""
    with Loopback(answers({"/metrics": VLLM_IDLE}), own_load=False) as srv:
        run = hook("wait", "--url", srv.url, *TIMELINE, "--termination-log", "")
    end = summary_of(run.stderr)
    assert (run.code, end["outcome"]) == (0, "drained"), run.stderr
    assert float(end["elapsed"]) <= late(0.5 + 0.25, SPAWN_LATE, run.starved)


def test_vllm_without_scheduler_gauges_is_named_and_held(hook: Hook, tmp_path: Path) -> None:
    """`--disable-log-stats`: /metrics has no vllm: gauges, /load answers. Held to D,
    named in the read line, the summary and the termination message."""
    body = b'# TYPE http_requests_total counter\nhttp_requests_total{handler="/v1/completions"} 3\n'
    out = tmp_path / "termination"
    with Loopback(
        answers({"/metrics": body, "/load": b'{"server_load": 0}'}), own_load=False
    ) as srv:
        run = hook("wait", "--url", srv.url, *TIMELINE, "--termination-log", str(out))
    end = summary_of(run.stderr)
    assert (run.code, end["outcome"]) == (3, "deadline"), run.stderr
    assert "--disable-log-stats" in end["reason"]
    assert "--disable-log-stats" in out.read_text()
