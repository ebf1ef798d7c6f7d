"""The scenarios: an engine, the traffic it carries when the Pod is deleted, and a twist.

Traffic arrives at a steady rate from WARMUP seconds before the delete until the
router stops sending (`--router-lag`, ROUTER_LAG s by default, after it); each
request runs for a duration drawn, per request id, from the scenario's uniform
distribution. Every strategy of one scenario sees the same requests with the
same durations.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rehearsal.timeline import (
    DEADLINE,
    LONG_ROUTER_LAG,
    ROLLOUT_REPLICAS,
    ROUTER_LAG,
    SGLANG_IDLE_LAG,
    SGLANG_PD_EXIT,
    WARMUP,
)


@dataclass(frozen=True)
class Load:
    """Arrivals every 1/rate s over [-WARMUP, router lag]; durations uniform in [low, high]."""

    rate: float
    low: float
    high: float

    def arrivals(self, router_lag: float = ROUTER_LAG) -> list[float]:
        """Send times in real seconds from the delete, until the router stops sending."""
        step = 1.0 / self.rate
        count = round((WARMUP + router_lag) * self.rate) + 1
        return [-WARMUP + i * step for i in range(count)]

    @property
    def spec(self) -> str:
        return f"uniform:{self.low:g}:{self.high:g}"


@dataclass(frozen=True)
class EngineSpec:
    """How the simulated engine is started (real seconds; the runner scales them)."""

    kind: str = "vllm"  # vllm | sglang
    role: str = "unified"  # sglang: unified | prefill | decode
    dp: int = 2
    max_running: int = 4  # per DP engine
    route: str = "rr"  # rr, or the one DP rank every request goes to
    api_servers: int = 1  # vLLM API server processes on the one port
    shutdown_timeout: float = 0.0  # vLLM --shutdown-timeout (a recipe may set its own)
    idle_lag: float = 0.0  # SGLang: seconds the gauges keep showing work once idle
    exit_after_sigterm: float = 0.0  # SGLang PD: no exit sooner than this after SIGTERM
    metrics_hang: bool = False
    prefill: float = 0.0  # each request's prefill (no token before it)
    kv_wait: float = 0.0  # each request waits on a KV pull (deferred) this long first
    freeze_after: float | None = None  # the engine freezes this long after the first request
    render: str = ""  # each request's time in the server before the scheduler: uniform:LOW:HIGH
    render_serial: bool = False  # vLLM: one render at a time per API server (mm executor)
    step_gauges: bool = False  # vLLM: gauges set after each engine step
    load_tracking: bool = False  # vLLM --enable-server-load-tracking
    refresh_iterations: int = 0  # SGLang: gauges set at each prefill and every N decode steps

    def args(self) -> list[str]:
        out = [
            "--kind",
            self.kind,
            "--role",
            self.role,
            "--dp",
            str(self.dp),
            "--max-running",
            str(self.max_running),
            "--route",
            self.route,
            "--api-servers",
            str(self.api_servers),
            "--shutdown-timeout",
            f"{self.shutdown_timeout:g}",
            "--idle-lag",
            f"{self.idle_lag:g}",
            "--exit-after-sigterm",
            f"{self.exit_after_sigterm:g}",
        ]
        out += ["--prefill", f"{self.prefill:g}", "--kv-wait", f"{self.kv_wait:g}"]
        if self.freeze_after is not None:
            out += ["--freeze-after", f"{self.freeze_after:g}"]
        if self.render:
            out += ["--render", self.render]
        if self.render_serial:
            out.append("--render-serial")
        if self.step_gauges:
            out.append("--step-gauges")
        if self.load_tracking:
            out.append("--load-tracking")
        if self.refresh_iterations:
            out += ["--refresh-iterations", str(self.refresh_iterations)]
        return [*out, "--metrics-hang"] if self.metrics_hang else out


@dataclass(frozen=True)
class Scenario:
    key: str
    title: str
    what: str
    engine: EngineSpec = field(default_factory=EngineSpec)
    load: Load | None = None
    hook_port_moved: bool = False  # the hook reads a port where nothing listens
    router_lag: float | None = None  # the scenario's own router lag (None: the run's)
    replicas: int = 1  # more than one: a rollout, one replica at a time
    stall_after: float | None = None  # drainhook's --stall-after W in this scenario

    def lag(self, router_lag: float = ROUTER_LAG) -> float:
        """How long the router keeps sending after the delete, in this scenario."""
        return router_lag if self.router_lag is None else self.router_lag

    def ends_before_deadline(
        self, router_lag: float = ROUTER_LAG, deadline: float = DEADLINE
    ) -> bool:
        """Whether all the work ends before D (queueing aside): a hook that waits for it
        cuts nothing. A frozen engine's work never ends."""
        if self.engine.freeze_after is not None:
            return False
        return (self.lag(router_lag) + self.load.high if self.load else 0.0) < deadline


SHORT = Load(rate=6.0, low=0.2, high=2.0)
LONG = Load(rate=1.0, low=6.0, high=18.0)  # 7 streams, all ended by 20 s < D
OUTLIVE = Load(rate=1.0, low=20.0, high=40.0)
MEDIUM = Load(rate=1.0, low=2.0, high=10.0)  # 7 streams, the last ends at 10.7 s
LAGGING = Load(rate=2.0, low=0.5, high=4.0)  # 49 streams until 20 s, all ended by 24 s

SCENARIOS: tuple[Scenario, ...] = (
    Scenario("idle", "Idle", "vLLM, 2 DP engines, no traffic at all."),
    Scenario(
        "short",
        "Short requests",
        "vLLM, 6 req/s of 0.2-2 s streams (4 running per DP engine, the rest queue).",
        load=SHORT,
    ),
    Scenario(
        "long",
        "Long streams, end before D",
        "vLLM, 7 streams of 6-18 s, all ended by 20 s (D = 25 s).",
        load=LONG,
    ),
    Scenario(
        "outlive",
        "Streams outlive D",
        "vLLM, 7 streams of 20-40 s: some end after D, some after G.",
        load=OUTLIVE,
    ),
    Scenario(
        "hang",
        "/metrics hangs",
        "As `long`, but /metrics accepts the connection and never answers.",
        engine=EngineSpec(metrics_hang=True),
        load=LONG,
    ),
    Scenario(
        "moved",
        "Engine on another port",
        "As `long`, but the engine listens on another port than the hook reads.",
        load=LONG,
        hook_port_moved=True,
    ),
    Scenario(
        "dp-one-busy",
        "2 DP engines, one busy",
        'As `long`, every stream on DP engine 1 (engine="1"); engine 0 idle.',
        engine=EngineSpec(route="1", max_running=8),
        load=LONG,
    ),
    Scenario(
        "sglang-lag",
        "SGLang, lagging idle gauges",
        f"SGLang, `short` traffic; once idle, its gauges keep the last busy values "
        f"{SGLANG_IDLE_LAG:g} s.",
        engine=EngineSpec(kind="sglang", dp=1, max_running=8, idle_lag=SGLANG_IDLE_LAG),
        load=SHORT,
    ),
    Scenario(
        "sglang-pd",
        "SGLang prefill/decode exit",
        f"SGLang decode server, 7 streams of 2-10 s; it exits {SGLANG_PD_EXIT:g} s after SIGTERM.",
        engine=EngineSpec(
            kind="sglang", role="decode", dp=1, max_running=8, exit_after_sigterm=SGLANG_PD_EXIT
        ),
        load=MEDIUM,
    ),
    Scenario(
        "router-lag-20",
        "Router lag 20 s",
        f"vLLM, 2 req/s of 0.5-4 s streams until {LONG_ROUTER_LAG:g} s after the delete "
        "(a slow informer or gateway).",
        load=LAGGING,
        router_lag=LONG_ROUTER_LAG,
    ),
    Scenario(
        "dp-api-servers",
        "2 DP engines, 2 API servers",
        "As `long`, vLLM with 2 DP engines behind 2 API servers on one port: on SIGTERM each "
        "API server drops its engine connection (inferred from vLLM's code).",
        engine=EngineSpec(api_servers=2),
        load=LONG,
    ),
    Scenario(
        "rollout",
        "Rolling update, 8 replicas",
        f"vLLM, {ROLLOUT_REPLICAS} replicas replaced one at a time; each departing replica "
        "carries 1 req/s of 2-10 s streams until the router stops sending to it.",
        load=MEDIUM,
        replicas=ROLLOUT_REPLICAS,
    ),
)

# Stall detection (CONTRACT §2b): drainhook's recipes run with --stall-after
# STALL_AFTER here (under D = 25 s); a wedged engine, and the two healthy
# stretches of flat counters it must never be taken for.
STALL_AFTER = 10.0
ONE = Load(rate=0.05, low=20.0, high=20.0)  # one request, sent 4 s before the delete
STALL_SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "hung",
        "Engine wedged mid-stream",
        f"As `long`, but the engine freezes 3 s before the delete (a hung collective, a "
        f"SIGSTOPped EngineCore): /metrics answers with frozen series; drainhook with "
        f"--stall-after {STALL_AFTER:g}.",
        engine=EngineSpec(freeze_after=1.0),
        load=LONG,
        stall_after=STALL_AFTER,
    ),
    Scenario(
        "long-prefill",
        "A long prefill, nothing else decoding",
        f"vLLM, one request whose prefill takes 17 s (its first token 13 s after the delete), "
        f"then 3 s of tokens: counters flat 8 s of the hook's reads; --stall-after "
        f"{STALL_AFTER:g}.",
        engine=EngineSpec(prefill=17.0),
        load=ONE,
        stall_after=STALL_AFTER,
    ),
    Scenario(
        "kv-wait",
        "A KV pull, counters flat",
        f"vLLM, one request deferred on a KV pull for 21 s (to 17 s after the delete: counters "
        f"flat 12 s of the hook's reads), then 4 s of tokens; --stall-after {STALL_AFTER:g}.",
        engine=EngineSpec(kv_wait=21.0),
        load=Load(rate=0.05, low=4.0, high=4.0),
        stall_after=STALL_AFTER,
    ),
)
SCENARIOS += STALL_SCENARIOS

# Where the gauges are blind (CONTRACT §2a): requests the engine's HTTP server holds
# before its scheduler sees them. Multimodal traffic on vLLM (media fetch and
# processing, 1-5 s each, after the body is parsed, before the scheduler; the gauges
# set after each step; --enable-server-load-tracking off, vLLM's default), and
# SGLang's long prefills (a request being prefilled is in neither gauge, and its
# running count is refreshed only every 40 decode iterations).
MULTIMODAL = Load(rate=1.0, low=0.5, high=1.5)  # 7 requests, the last sent 2 s after the delete
PREFILLS = Load(rate=1.0, low=4.0, high=6.0)  # each: a 3 s prefill, then tokens
INVISIBLE_SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "invisible",
        "Multimodal, in the server before the scheduler",
        "vLLM, 1 req/s of 0.5-1.5 s streams (short answers: captions), each first 1-5 s of "
        "media processing in the API server, one at a time (its multimodal executor has one "
        "worker), where no gauge counts it or its queue; gauges set after each engine step.",
        engine=EngineSpec(render="uniform:1:5", render_serial=True, step_gauges=True),
        load=MULTIMODAL,
    ),
    Scenario(
        "invisible-sglang",
        "SGLang, long prefills",
        "SGLang, 1 req/s of 4-6 s requests, each a 3 s prefill in neither gauge, then "
        "tokens; its running count refreshed every 40 decode iterations.",
        engine=EngineSpec(kind="sglang", dp=1, max_running=8, prefill=3.0, refresh_iterations=40),
        load=PREFILLS,
    ),
)
SCENARIOS += INVISIBLE_SCENARIOS

BY_KEY = {s.key: s for s in SCENARIOS}
