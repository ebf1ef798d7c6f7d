"""The simulated LLM engine: one model for `drainhook demo` and the rehearsal.

Not on the hook's import path: only `drainhook demo` and tooling (the
rehearsal, tests) import it.

- `model.py`: the engine's state: request accounting per DP rank, what its
  pages show, and what SIGTERM does (vLLM with and without
  `--shutdown-timeout`, vLLM with several API servers, SGLang).
- `pages.py`: the /metrics text (vLLM, SGLang) and SGLang's /v1/loads body.
- `server.py`: the HTTP front on loopback (streaming completions, the pages).
- `client.py`: one streaming completion and how it ended for the client.
- `demo.py`: `drainhook demo`.
"""

from drainhook.sim.client import RequestOutcome, complete
from drainhook.sim.demo import run_demo
from drainhook.sim.model import Answer, EngineConfig, Fate, SimEngine
from drainhook.sim.server import SimServer

__all__ = [
    "Answer",
    "EngineConfig",
    "Fate",
    "RequestOutcome",
    "SimEngine",
    "SimServer",
    "complete",
    "run_demo",
]
