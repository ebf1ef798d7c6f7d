"""The idle path end to end, as the kubelet would run it."""

from __future__ import annotations

from tests.conftest import Hook
from tests.loopback import Loopback, sample, serve


def test_idle_engine_drains_after_two_reads(hook: Hook) -> None:
    with Loopback(serve(sample("vllm-single-dp2-idle.txt"))) as srv:
        run = hook("wait", "--url", srv.url, "--settle", "0.2", "--interval", "0.1")
    assert run.code == 0, run.stderr
    assert "outcome=drained" in run.summary
    assert "reads=2" in run.summary
    assert srv.connections == 2
