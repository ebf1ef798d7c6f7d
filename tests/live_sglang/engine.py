"""A live SGLang 0.5.23 (its CPU engine) as a process on 127.0.0.1, for the SGLang tier.

`LiveSglang` is `LiveVllm` (tests/live/engine.py: start, the token rate, kill,
the looks) with SGLang's own server: `python -m sglang.launch_server` with
SGLANG_USE_CPU_ENGINE=1, its pure-torch CPU paths (`--device cpu
--attention-backend torch_native --sampling-backend pytorch`), its metrics on
and `--sleep-on-idle` (without it the scheduler busy-polls one of the two
cores). The import-only `sgl_kernel` stand-in (standin/) is on its PYTHONPATH.
`rust=True` serves through SGLang's opt-in Rust HTTP server
(SGLANG_RUST_SERVER=1) instead of its Python (uvicorn) one.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import ClassVar

from tests.live.engine import ENV, MODEL_NAME, START_TIMEOUT, EngineFailed, LiveVllm

STANDIN = Path(__file__).resolve().parent / "standin"
KV_TOKENS = 8192  # --max-total-tokens: the KV pool, a bounded allocation


class LiveSglang(LiveVllm):
    """One SGLang server (its scheduler and detokenizer processes with it) until killed."""

    name = "SGLang"
    env: ClassVar[dict[str, str]] = {
        **{k: v for k, v in ENV.items() if not k.startswith("VLLM_")},
        "SGLANG_USE_CPU_ENGINE": "1",
        "PYTHONPATH": str(STANDIN),
    }

    def __init__(self, python: str, model: Path, *flags: str, log: Path, rust: bool = False):
        if rust:
            self.env = {**self.env, "SGLANG_RUST_SERVER": "1"}
            self.name = "SGLang (Rust server)"
        super().__init__(python, model, *flags, log=log)

    def serve(self, model: Path) -> list[str]:
        return [
            "-m", "sglang.launch_server", "--model-path", str(model),
            "--served-model-name", MODEL_NAME, "--device", "cpu",
            "--attention-backend", "torch_native", "--sampling-backend", "pytorch",
            "--disable-cuda-graph", "--dtype", "float32", "--enable-metrics",
            "--max-total-tokens", str(KV_TOKENS), "--sleep-on-idle",
        ]  # fmt: skip

    # When /metrics first answered 200 while the server started, and when it first
    # carried a scheduler series (monotonic; None: not seen before /health 200).
    metrics_at: float | None = None
    series_at: float | None = None

    def start(self) -> LiveSglang:
        """Watch /metrics as the server starts (the window with no scheduler series),
        then LiveVllm.start, then wait until the warm-up streams' server count has
        fallen (it stays up about 2 s after each stream's last byte)."""
        deadline = self.started_at + START_TIMEOUT
        while self.series_at is None and time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break  # LiveVllm.start says why
            status, body = self.get("/metrics", timeout=1.0)
            if status == 200:
                self.metrics_at = self.metrics_at or time.monotonic()
                if b"sglang:num_running_reqs{" in body:
                    self.series_at = time.monotonic()
            time.sleep(0.02)
        super().start()
        deadline = time.monotonic() + 15
        while self.counted() > 0:
            if time.monotonic() > deadline:
                raise EngineFailed(f"the warm-up requests still counted:\n{self.tail()}")
            time.sleep(0.1)
        return self

    def counted(self) -> float:
        """sglang:http_requests_active of /v1/completions (0 where it is absent)."""
        return sum(
            v for k, v in self.metrics().items()
            if k.startswith("sglang:http_requests_active{") and '"/v1/completions"' in k
        )  # fmt: skip

    def scheduler(self) -> int:
        """The pid of the scheduler process (its title is `sglang::scheduler`)."""
        return self.child(b"sglang::scheduler")
