"""What the simulated engine's read-only pages show, from its per-DP-rank counts.

Pure functions of `[(running, waiting), ...]` (one pair per DP rank):

- `vllm_metrics`: vLLM V1's `/metrics` (one series per DP engine, `engine`
  label; the counted gauges, the waiting-by-reason breakdown and KV-cache use).
- `sglang_metrics`: SGLang's `/metrics` (one series per `dp_rank`; the
  counted queues of a unified, prefill or decode server).
- `http_requests_active`: SGLang's own count of its HTTP server's requests;
  `vllm_load`: vLLM's `GET /load` body (front.py has what they count).
- `sglang_loads`: SGLang's `GET /v1/loads` body (docs/engines.md has the
  shape, drainhook/engines/loads.py the fields it counts).

With `shown` (one `Shown` per rank), the /metrics pages also carry the
deferred waiting and the progress counters (CONTRACT §2b): vLLM's generated
tokens, steps and prompt tokens (one series per engine from the start, as
its logger writes them), SGLang's realtime tokens (`mode="decode"`, written
from its first increment on, as a labelled counter is).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Counts = Sequence[tuple[int, int]]


@dataclass(frozen=True)
class Shown:
    """One DP rank as /metrics shows it: its gauges, the deferred of its waiting,
    its progress counters."""

    running: int
    waiting: int
    deferred: int = 0
    tokens: int = 0  # vllm:generation_tokens_total
    steps: int = 0  # vllm:iteration_tokens_total_count
    prompt: int = 0  # vllm:prompt_tokens_total


# vLLM's buckets of vllm:e2e_request_latency_seconds (its metrics.py, 0.32).
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
               60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip


def e2e_histogram(latencies: Sequence[float], model: str) -> list[str]:
    """vllm:e2e_request_latency_seconds of the requests finished so far (one engine's
    series): what `drainhook plan --observe` reads."""
    name, labels = "vllm:e2e_request_latency_seconds", f'engine="0",model_name="{model}"'
    lines = [f"# HELP {name} Histogram of e2e request latency in seconds.",
             f"# TYPE {name} histogram"]  # fmt: skip
    for bound in (*E2E_BUCKETS, float("inf")):
        le = "+Inf" if bound == float("inf") else str(bound)
        count = sum(1 for x in latencies if x <= bound)
        lines.append(f'{name}_bucket{{{labels},le="{le}"}} {float(count)}')
    lines.append(f"{name}_sum{{{labels}}} {float(sum(latencies))}")
    lines.append(f"{name}_count{{{labels}}} {float(len(latencies))}")
    return lines


def vllm_metrics(
    counts: Counts, model: str, shown: Sequence[Shown] = (), latencies: Sequence[float] = ()
) -> str:
    """vLLM V1 with len(counts) DP engines; with `latencies`, the e2e histogram."""
    lines: list[str] = []
    families = (
        ("vllm:num_requests_running", "Number of requests in model execution batches.", 0),
        ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", 1),
    )
    for name, text, index in families:
        lines += [f"# HELP {name} {text}", f"# TYPE {name} gauge"]
        for rank, pair in enumerate(counts):
            lines.append(f'{name}{{engine="{rank}",model_name="{model}"}} {float(pair[index])}')
    name = "vllm:num_requests_waiting_by_reason"
    lines += [f"# HELP {name} Number of waiting requests by reason.", f"# TYPE {name} gauge"]
    for rank, (_, waiting) in enumerate(counts):
        deferred = shown[rank].deferred if shown else 0
        for reason, value in (("capacity", waiting - deferred), ("deferred", deferred)):
            labels = f'engine="{rank}",model_name="{model}",reason="{reason}"'
            lines.append(f"{name}{{{labels}}} {float(value)}")
    name = "vllm:kv_cache_usage_perc"
    lines += [f"# HELP {name} KV-cache usage. 1 means 100 percent usage.", f"# TYPE {name} gauge"]
    for rank, (running, _) in enumerate(counts):
        usage = min(1.0, running * 0.1)
        lines.append(f'{name}{{engine="{rank}",model_name="{model}"}} {usage}')
    counters = (
        ("vllm:prompt_tokens", "counter", "Number of prefill tokens processed.", "prompt"),
        ("vllm:generation_tokens", "counter", "Number of generation tokens processed.", "tokens"),
        ("vllm:iteration_tokens_total", "histogram", "Histogram of tokens per step.", "steps"),
    )
    for family, kind, text, attr in counters if shown else ():
        # As prometheus_client writes text 0.0.4: a counter's family with `_total`.
        head = f"{family}_total" if kind == "counter" else family
        sample = head if kind == "counter" else f"{family}_count"
        lines += [f"# HELP {head} {text}", f"# TYPE {head} {kind}"]
        for rank, s in enumerate(shown):
            labels = f'engine="{rank}",model_name="{model}"'
            lines.append(f"{sample}{{{labels}}} {float(getattr(s, attr))}")
    lines += e2e_histogram(latencies, model) if latencies else []
    return "\n".join(lines) + "\n"


def sglang_metrics(
    counts: Counts,
    role: str,
    model: str,
    shown: Sequence[Shown] = (),
    active: Mapping[tuple[str, str], int] | None = None,
) -> str:
    """SGLang with len(counts) DP ranks; role is unified, prefill or decode. With
    `active` ((endpoint, method) -> requests), `sglang:http_requests_active` too."""
    running = [c[0] for c in counts]
    waiting = [c[1] for c in counts]
    zeros = [0] * len(counts)
    families = [
        ("sglang:num_running_reqs", "The number of running requests.", running),
        ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", waiting),
        ("sglang:num_grammar_queue_reqs", "The number of requests in the grammar queue.", zeros),
    ]
    if role == "prefill":
        families += [
            ("sglang:num_prefill_bootstrap_queue_reqs", "Prefill bootstrap queue.", zeros),
            ("sglang:num_prefill_inflight_queue_reqs", "Prefill inflight queue.", zeros),
        ]
    if role == "decode":
        families += [
            ("sglang:num_decode_prealloc_queue_reqs", "Decode prealloc queue.", zeros),
            ("sglang:num_decode_transfer_queue_reqs", "Decode transfer queue.", zeros),
        ]
    lines: list[str] = []
    for name, text, values in families:
        lines += [f"# HELP {name} {text}", f"# TYPE {name} gauge"]
        for rank, value in enumerate(values):
            labels = (
                f'dp_rank="{rank}",engine_type="{role}",model_name="{model}",'
                'moe_ep_rank="0",pp_rank="0",tp_rank="0"'
            )
            lines.append(f"{name}{{{labels}}} {float(value)}")
    name = "sglang:realtime_tokens_total"
    written = [(rank, s.tokens) for rank, s in enumerate(shown) if s.tokens]
    if written:
        lines += [f"# HELP {name} Total number of tokens processed.", f"# TYPE {name} counter"]
    for rank, tokens in written:
        labels = f'dp_rank="{rank}",engine_type="{role}",mode="decode",model_name="{model}"'
        lines.append(f"{name}{{{labels}}} {float(tokens)}")
    if active is not None:
        lines += http_requests_active(active)
    return "\n".join(lines) + "\n"


def http_requests_active(active: Mapping[tuple[str, str], int]) -> list[str]:
    """SGLang 0.5.23's gauge of its HTTP server's requests, as prometheus_client writes it
    (a series per (endpoint, method) once used; none before)."""
    name = "sglang:http_requests_active"
    lines = [f"# HELP {name} Number of currently active HTTP requests", f"# TYPE {name} gauge"]
    for (endpoint, method), value in sorted(active.items()):
        lines.append(f'{name}{{endpoint="{endpoint}",method="{method}"}} {float(value)}')
    return lines


def vllm_load(server_load: int) -> str:
    """vLLM's `GET /load` body."""
    return json.dumps({"server_load": server_load})


def sglang_loads(counts: Counts, role: str) -> str:
    """The JSON body of `GET /v1/loads`, as SGLang PR #16976 first shaped it."""
    mode = "null" if role == "unified" else role
    loads = []
    for rank, (running, waiting) in enumerate(counts):
        loads.append(
            {
                "dp_rank": rank,
                "num_running_reqs": running,
                "num_waiting_reqs": waiting,
                "num_used_tokens": running * 512,
                "max_total_num_tokens": 500000,
                "token_usage": round(running * 512 / 500000, 4),
                "max_running_requests": 4096,
                "disaggregation": {
                    "mode": mode,
                    "prefill_prealloc_queue_reqs": 0,
                    "prefill_inflight_queue_reqs": 0,
                    "decode_prealloc_queue_reqs": 0,
                    "decode_transfer_queue_reqs": 0,
                    "decode_retracted_queue_reqs": 0,
                },
                "queues": {"waiting": waiting, "grammar": 0, "paused": 0, "retracted": 0},
                "num_total_reqs": running + waiting,
            }
        )
    total_running = sum(c[0] for c in counts)
    total_waiting = sum(c[1] for c in counts)
    body = {
        "timestamp": "1970-01-01T00:00:00+00:00",
        "version": "0.5.x",
        "dp_rank_count": len(counts),
        "loads": loads,
        "aggregate": {
            "total_running_reqs": total_running,
            "total_waiting_reqs": total_waiting,
            "total_reqs": total_running + total_waiting,
        },
    }
    return json.dumps(body)
