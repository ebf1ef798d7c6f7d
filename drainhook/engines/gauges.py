"""The engine table of CONTRACT §3, defined here and nowhere else: the scanner, `probe`,
`plan` and the contract's own gauge table read `ENGINES`."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from drainhook.engines.verdict import Series


@dataclass(frozen=True)
class LoadsField:
    """One counted number of a `/v1/loads` rank entry (`--source loads`): its path
    in the entry's JSON object, and the /metrics gauge it stands for."""

    path: tuple[str, ...]
    gauge: str
    required: bool = False

    @property
    def name(self) -> str:
        """The series name: the path, dotted (`disaggregation.prefill_inflight_queue_reqs`)."""
        return ".".join(self.path)


@dataclass(frozen=True)
class LatencyHistogram:
    """The engine's end-to-end request latency histogram (`plan --observe`): its
    family name, its default bucket bounds and the flag that changes them."""

    name: str
    bucket_flag: str
    default_bounds: tuple[float, ...]


@dataclass(frozen=True)
class ExternalWait:
    """Work reported as waiting outside the engine (CONTRACT §2b), which never counts
    toward a stall: a gauge (`label`: only its series with that value); `counted`: in
    the read's total (else a subset of a counted one); one `group` counts its largest sum."""

    name: str
    label: tuple[str, str] | None = None
    counted: bool = True
    group: str = ""

    @property
    def key(self) -> str:
        return self.group or self.name


@dataclass(frozen=True)
class ServerGauge:
    """The HTTP server's own count in /metrics (CONTRACT §2a, `server`): a gauge summed
    over its series but those whose `label` names one of the engine's own read-only
    endpoints (`not_work`); any other endpoint, an unknown one included, carries work."""

    name: str
    label: str
    not_work: frozenset[str]

    def carries_work(self, labels: Iterable[tuple[str, str]]) -> bool:
        """Whether a series of the gauge counts: its endpoint is not one of `not_work`."""
        return not any(k == self.label and v in self.not_work for k, v in labels)


# SGLang 0.5.23's own read-only routes (python/sglang/srt/entrypoints/http_server.py,
# v1_loads.py, elastic_ep.py; /metrics is a Mount in utils/common.py), with the
# /get_load of the versions before /v1/loads. The label is the route's path as
# FastAPI declares it (`_get_fastapi_request_path`): `/v1/models/{model:path}`.
SGLANG_NOT_WORK: frozenset[str] = frozenset({
    "/metrics", "/health", "/health_generate", "/ready", "/ping", "/v1/loads", "/get_load",
    "/model_info", "/get_model_info", "/server_info", "/get_server_info", "/v1/models",
    "/v1/models/{model:path}", "/", "/api/tags", "/list_external_corpora",
    "/get_hicache_l3_cache_layout", "/remote_instance_transfer_engine_info",
    "/get_remote_instance_transfer_engine_info", "/is_scaling_elastic_ep",
})  # fmt: skip


@dataclass(frozen=True)
class SideSource:
    """A path an engine serves beside /metrics that the read asks on the same
    listener (CONTRACT §2a): what it counts (`scheduler`: SGLang's /v1/loads stands
    in for the scheduler's gauges; `server`: vLLM's /load is the server's count),
    and the statuses that say this listener does not serve it to this hook (the
    signal is missing while it has never answered a count; after one, doubt)."""

    path: str
    counts: str
    not_served: dict[int, str]


def _guarded(engine: str, absent: str) -> dict[int, str]:
    key = f"{engine}'s --api-key guards it; give the key with --api-key-file"
    return {401: key, 403: key, 404: absent}


# SGLang's per-DP-rank load report (--source loads, auto; drainhook.engines.loads).
LOADS = SideSource("/v1/loads", "scheduler", _guarded("SGLang", "this SGLang has no /v1/loads"))
# vLLM's server count: `GET /load` -> {"server_load": N}, counted by
# `load_aware_call` with --enable-server-load-tracking (0 without it, in 0.32).
NO_LOAD = "a vLLM without the /load route: vLLM 0.9 or newer, with --enable-server-load-tracking"
SERVER_LOAD = SideSource("/load", "server", _guarded("vLLM", NO_LOAD + ", counts it"))


# An engine, and --engine: one of them or auto (the body shows which).
EngineName = Literal["vllm", "sglang"]
EngineChoice = Literal["auto", "vllm", "sglang"]


@dataclass(frozen=True)
class Engine:
    """One engine's counted gauges, by canonical name (with `:`)."""

    name: EngineName
    prefix: str
    default_port: int
    required: tuple[str, ...]
    latency: LatencyHistogram
    optional: tuple[str, ...] = ()
    loads_fields: tuple[LoadsField, ...] = ()  # empty: the engine serves no /v1/loads
    # CONTRACT §2b: the counters that move while the engine computes (names as
    # written), the work waiting outside it; the same for /v1/loads (entry paths).
    progress: tuple[str, ...] = ()
    external: tuple[ExternalWait, ...] = ()
    loads_progress: tuple[tuple[str | int, ...], ...] = ()
    loads_external: tuple[ExternalWait, ...] = ()
    # CONTRACT §2a: the HTTP server's own count in /metrics (None: it has none;
    # vLLM's is `GET /load`, its side source).
    server: ServerGauge | None = None
    side: SideSource | None = None  # read after /metrics with --source auto

    @property
    def counted(self) -> tuple[str, ...]:
        return self.required + self.optional


# vllm/v1/metrics/buckets.py REQUEST_LATENCY_BUCKETS (0.3 ... 7680 s, unchanged
# since V1's first release); `vllm serve --custom-histogram-buckets
# '{"request_latency": [...]}'` replaces them (vllm-project/vllm#48867).
_VLLM_LATENCY = LatencyHistogram(
    "vllm:e2e_request_latency_seconds",
    "vllm serve --custom-histogram-buckets '{\"request_latency\": [...]}'",
    (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
     40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0),
)  # fmt: skip
# sglang/srt/metrics/collector.py TokenizerMetricsCollector (0.1 ... 2400 s);
# one series per is_streaming value since 0.5; set by --bucket-e2e-request-latency.
_SGLANG_LATENCY = LatencyHistogram(
    "sglang:e2e_request_latency_seconds",
    "sglang.launch_server --bucket-e2e-request-latency ...",
    (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0,
     60.0, 80.0, 100.0, 200.0, 400.0, 600.0, 1200.0, 1800.0, 2400.0),
)  # fmt: skip

ENGINES: tuple[Engine, ...] = (
    # vLLM V1 (seen through 0.33): one series per DP engine (`engine` label);
    # `*_by_reason` is a subset of waiting and is not counted.
    Engine(
        name="vllm",
        prefix="vllm",
        default_port=8000,
        required=("vllm:num_requests_running", "vllm:num_requests_waiting"),
        latency=_VLLM_LATENCY,
        # vllm/v1/metrics/loggers.py (0.33): each moves while the engine computes;
        # a long lone prefill moves only the FLOPs one (docs/design.md, §2b).
        progress=(
            "vllm:generation_tokens_total",
            "vllm:iteration_tokens_total_count",
            "vllm:prompt_tokens_total",
            "vllm:estimated_flops_per_gpu_total",
        ),
        # Deferred waiting (remote KV, grammar compilation) is a subset of
        # waiting; the KV-fetch stages are a subset of deferred: one group.
        external=(
            ExternalWait(
                "vllm:num_requests_waiting_by_reason",
                ("reason", "deferred"),
                counted=False,
                group="deferred",
            ),
            ExternalWait("vllm:num_requests_kv_fetch_by_stage", counted=False, group="deferred"),
        ),
        side=SERVER_LOAD,
    ),
    # SGLang (seen through 0.5.23): the disaggregation queues hold requests the
    # running/queue gauges do not; `num_prefill_prealloc_queue_reqs` is the
    # pre-0.5 name of the bootstrap queue. Host-receive is a subset of
    # transfer, retracted/paused are per-interval event counts: not counted.
    Engine(
        name="sglang",
        prefix="sglang",
        default_port=30000,
        required=("sglang:num_running_reqs", "sglang:num_queue_reqs"),
        latency=_SGLANG_LATENCY,
        optional=(
            "sglang:num_grammar_queue_reqs",
            "sglang:num_prefill_bootstrap_queue_reqs",
            "sglang:num_prefill_prealloc_queue_reqs",
            "sglang:num_prefill_inflight_queue_reqs",
            "sglang:num_decode_prealloc_queue_reqs",
            "sglang:num_decode_transfer_queue_reqs",
        ),
        # GET /v1/loads (docs/engines.md has its shape and what each field holds):
        # num_waiting_reqs already holds the PD queues, which are not counted again.
        loads_fields=(
            LoadsField(("num_running_reqs",), "sglang:num_running_reqs", required=True),
            LoadsField(("num_waiting_reqs",), "sglang:num_queue_reqs", required=True),
            LoadsField(("queues", "grammar"), "sglang:num_grammar_queue_reqs"),
            LoadsField(
                ("disaggregation", "prefill_inflight_queue_reqs"),
                "sglang:num_prefill_inflight_queue_reqs",
            ),
        ),
        # sglang/srt/metrics/collector.py (0.5.23): each moves while the engine computes.
        progress=(
            "sglang:realtime_tokens_total",
            "sglang:cuda_graph_passes_total",
            "sglang:inter_token_latency_seconds_count",
        ),
        # Waiting on the grammar backend, the PD bootstrap, the peer's KV
        # (prefill inflight, decode prealloc and transfer): counted gauges.
        external=(
            ExternalWait("sglang:num_grammar_queue_reqs"),
            ExternalWait("sglang:num_prefill_bootstrap_queue_reqs"),
            ExternalWait("sglang:num_prefill_prealloc_queue_reqs"),
            ExternalWait("sglang:num_prefill_inflight_queue_reqs"),
            ExternalWait("sglang:num_decode_prealloc_queue_reqs"),
            ExternalWait("sglang:num_decode_transfer_queue_reqs"),
        ),
        # /v1/loads on main (LoadSnapshot): prefill tokens, decode moments 0 (steps)
        # and 5 (tokens); `timestamp` and `gen_throughput` are no progress.
        loads_progress=(
            ("total_prefill_uncached_tokens",),
            ("decode_moments", 0),
            ("decode_moments", 5),
        ),
        # Counted (grammar, prefill inflight) or inside num_waiting_reqs (the
        # bootstrap, decode prealloc and transfer queues): see docs/engines.md.
        loads_external=(
            ExternalWait("queues.grammar"),
            ExternalWait("disaggregation.prefill_inflight_queue_reqs"),
            ExternalWait(
                "disaggregation.prefill_bootstrap_queue_reqs", counted=False, group="bootstrap"
            ),
            ExternalWait(
                "disaggregation.prefill_prealloc_queue_reqs", counted=False, group="bootstrap"
            ),
            ExternalWait("disaggregation.decode_prealloc_queue_reqs", counted=False),
            ExternalWait("disaggregation.decode_transfer_queue_reqs", counted=False),
        ),
        # sglang/srt/observability/http_request_metrics.py: up when a request reaches
        # the HTTP middleware, down after its response's last byte (0.5.23).
        server=ServerGauge("sglang:http_requests_active", "endpoint", SGLANG_NOT_WORK),
        side=LOADS,
    ),
)


ENGINE_NAMES: tuple[str, ...] = tuple(e.name for e in ENGINES)

BY_NAME: dict[str, Engine] = {e.name: e for e in ENGINES}


def default_port(engine: EngineChoice) -> int:
    """The port an engine serves on by default; vLLM's for `auto` (the default engine)."""
    return (BY_NAME.get(engine) or BY_NAME["vllm"]).default_port


# Series label with this name and a non-empty value: SGLang's per-priority
# breakdown of the priority="" total (0.5.x, --enable-priority-scheduling).
PRIORITY_LABEL = "priority"
# Series that differ only in this label describe one batch
# (--enable-metrics-for-all-schedulers publishes it once per TP rank).
TP_RANK_LABEL = "tp_rank"


# A name's `:` after the engine prefix, as a body may write it: as is, or `_`
# (OpenMetrics escaping of `:`). The one rule for every scanner.
NAME_SEPARATORS = ":_"


def spellings(name: str) -> tuple[str, ...]:
    """A canonical `prefix:rest` name as a body may write it: itself, then `prefix_rest`."""
    prefix, colon, rest = name.partition(":")
    return (name, f"{prefix}_{rest}") if colon else (name,)


SeriesKey = tuple[str, tuple[tuple[str, str], ...]]


def series_key(name: str, labels: Iterable[tuple[str, str]]) -> SeriesKey:
    """What makes two series one: the name and the labels (any order), tp_rank
    aside. Series that differ only in tp_rank describe one batch (§3)."""
    return name, tuple(sorted(kv for kv in labels if kv[0] != TP_RANK_LABEL))


_KINDS: dict[str, tuple[Engine, str]] = {
    name: (engine, kind)
    for engine in ENGINES
    for kind, names in (
        ("external", tuple(w.name for w in engine.external if not w.counted)),
        ("progress", engine.progress),
        ("server", (engine.server.name,) if engine.server else ()),
        ("counted", engine.counted),
    )
    for name in names
}


def sample_kind(raw: str) -> tuple[Engine, str, str] | None:
    """(engine, canonical name, kind) of a sample name, kind being `counted`, `progress`,
    `external` (§2b) or `server` (§2a); None if the hook reads no such sample."""
    for engine in ENGINES:
        p = engine.prefix
        if len(raw) > len(p) and raw.startswith(p) and raw[len(p)] in NAME_SEPARATORS:
            canonical = f"{p}:{raw[len(p) + 1 :]}"
            hit = _KINDS.get(canonical)
            if hit is None or hit[0] is not engine:
                return None
            return engine, canonical, hit[1]
    return None


def external_work(
    engine: Engine,
    series: Sequence[Series],
    uncounted: dict[str, float],
    waits: Sequence[ExternalWait] | None = None,
) -> float:
    """How much of the counted work the engine reports as waiting outside itself:
    per group of `waits` (the engine's external table), the largest sum of its
    gauges, the counted ones summed from `series`, the others from `uncounted`."""
    groups: dict[str, float] = {}
    for wait in engine.external if waits is None else waits:
        if wait.counted:
            total = math.fsum(s.value for s in series if s.name == wait.name)
        else:
            total = uncounted.get(wait.name, 0.0)
        groups[wait.key] = max(groups.get(wait.key, 0.0), total)
    return math.fsum(groups.values())
