"""The simulated LLM engine: one model for `scripts/demo` and the rehearsal.

Beside the package, not in it (nor in the binary): `scripts/demo` and tooling (the
rehearsal, tests) import it.

- `model.py`: the engine's state: request accounting per DP rank, what its
  pages show, and what SIGTERM does (vLLM with and without
  `--shutdown-timeout`, vLLM with several API servers, SGLang).
- `pages.py`: the /metrics text (vLLM, SGLang) and SGLang's /v1/loads body.
- `server.py`: the HTTP front on loopback (streaming completions, the pages).
- `client.py`: one streaming completion and how it ended for the client.
- `demo.py`: `scripts/demo` .
"""

from sim.client import RequestOutcome, complete
from sim.demo import run_demo
from sim.model import Answer, EngineConfig, Fate, SimEngine
from sim.server import SimServer

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
