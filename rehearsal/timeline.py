"""The rehearsal's clock: every duration in real seconds, shrunk by `--scale`.

All numbers here are what a Pod sees at `--scale 1`. A run at scale F
multiplies every one of them by F (the hooks' flags, the engine's delays, the
load's arrivals and durations, the kubelet's grace), so a cell at F = 0.25
is the same rollout played four times faster.
"""

from __future__ import annotations

from dataclasses import dataclass

GRACE = 30.0  # G: terminationGracePeriodSeconds when unset
SETTLE = 5.0  # S: drainhook's default settle
EXIT_RESERVE = 5.0  # R: drainhook's default exit reserve
INTERVAL = 1.0  # I: drainhook's default read interval
READ_TIMEOUT = 1.0  # drainhook's default read timeout
DEADLINE = GRACE - EXIT_RESERVE  # D

KILL_AFTER_TERM = 2.0  # the kubelet never sends SIGKILL sooner than 2 s after SIGTERM
ROUTER_LAG = 2.0  # the router sends new requests this long after the delete
WARMUP = 4.0  # traffic starts this long before the delete, so the engine is busy at t=0
TOKEN_TICK = 0.1  # one streamed event per tick
# vLLM 0.32's stop, measured live (CONTRACT §7): from SIGTERM (with
# --shutdown-timeout N, from the core's own exit VLLM_TEARDOWN after the drain,
# or from N if a request is left then) the engine core is gone, the listener
# closes, and the process exits once no request is in progress.
VLLM_CORE_KILL = 0.02
VLLM_LISTENER_CLOSE = 0.25
VLLM_EXIT = 0.4  # SIGTERM (or that origin) to exit with nothing in flight
# --shutdown-timeout: drained to the engine core's own exit. The machine's, not a
# constant: the listener closed 3.64-5.81 s after an idle SIGTERM on three machines
# (benchmarks/live.md), less VLLM_LISTENER_CLOSE. Each scenario's engine draws one
# value in it by the scenario's name (sim.model.teardown), the same for every recipe.
VLLM_TEARDOWN = (3.39, 5.56)


def span(low: float, high: float) -> str:
    """A range as the report writes it: `3.39-5.56`."""
    return f"{low:g}-{high:g}"


SGLANG_EXIT = 1.5  # SGLang's exit once its watchdog finds nothing left (1-2 s, live)
SGLANG_STREAM_TAIL = 2.0  # a stream stays in http_requests_active 2 s after its end (live)
SGLANG_NOTICE = 5.0  # SGLang's SIGTERM watchdog sleeps 5 s between looks at the flag
SGLANG_PD_EXIT = 20.0  # an SGLang prefill/decode server exits about 20 s after SIGTERM
SGLANG_IDLE_LAG = 30.0  # worst case of "SGLang's idle gauges lag up to 30 s"
SGLANG_LOG_INTERVAL = 1.0  # SGLang refreshes its gauges about once a second while busy

# The recipes platform teams deploy instead (2026): a preStop sleep, vLLM's own
# drain (`--shutdown-timeout`), and G to cover both.
RECIPE_SLEEP = 15.0  # KServe 0.19 (every vLLM preset) and the llm-d guides: preStop sleep 15
RECIPE_SHUTDOWN_TIMEOUT = 45.0  # KServe: G - 15; llm-d: 45
KSERVE_GRACE = 60.0
LLMD_GRACE = 75.0
PLAN_GRACE = 60.0  # drainhook+plan: `drainhook plan --grace 60 --engine vllm`
# drainhook-st: drainhook's defaults with vLLM's --shutdown-timeout R - 1, to measure
# what the flag costs and buys against drainhook alone at the same G.
MEASURED_SHUTDOWN_TIMEOUT = EXIT_RESERVE - 1.0
# The oracle: SIGTERM the moment the last request ended. Its G only bounds a cell
# (every scenario's work ends well before it).
ORACLE_GRACE = 120.0

LONG_ROUTER_LAG = 20.0  # router-lag-20: a slow informer or gateway keeps sending this long

# The rollout: replicas replaced one at a time on a GPU-bound cluster, a
# replacement starting only once its predecessor exited, then taking
# REPLICA_START to serve (accounted, not waited). FLEETS: the same model, not run.
ROLLOUT_REPLICAS = 8
REPLICA_START = 60.0
FLEETS = (64, 512)

# What a Pod's containers find in their environment (the hooks run as in a Pod).
POD_ENV = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}

DEFAULT_SCALE = 0.5


@dataclass(frozen=True)
class Scale:
    """`--scale F`: turns real seconds into the seconds a cell actually runs."""

    factor: float = DEFAULT_SCALE

    def __call__(self, seconds: float) -> float:
        return seconds * self.factor

    def real(self, measured: float) -> float:
        """A measured duration, back in real seconds."""
        return measured / self.factor

    def flag(self, seconds: float) -> str:
        """A scaled duration as a command-line value."""
        return f"{seconds * self.factor:.6g}"
