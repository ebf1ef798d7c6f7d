"""An import-only stand-in for sgl-kernel's CPU build, which no registry ships.

With SGLANG_USE_CPU_ENGINE=1, six SGLang 0.5.23 modules import these nine
functions at module level. They serve speculative decoding and KV-cache copies
that a plain model served on the CPU never calls: each raises if it ever is
(the live tier fails on the log line). Nothing of SGLang's computation is
replaced: the model runs on its own pure-torch CPU path.
"""

from __future__ import annotations

from typing import NoReturn

CALLED = "sgl_kernel stand-in called"


def _absent(name: str) -> object:
    def call(*args: object, **kwargs: object) -> NoReturn:
        raise RuntimeError(f"{CALLED}: {name}")

    call.__name__ = name
    return call


copy_all_layer_kv_cache_cpu = _absent("copy_all_layer_kv_cache_cpu")
assign_req_to_token_pool_cpu = _absent("assign_req_to_token_pool_cpu")
assign_draft_cache_locs_contiguous_cpu = _absent("assign_draft_cache_locs_contiguous_cpu")
assign_extend_cache_locs_cpu = _absent("assign_extend_cache_locs_cpu")
build_tree_kernel_efficient_cpu = _absent("build_tree_kernel_efficient_cpu")
verify_tree_greedy_cpu = _absent("verify_tree_greedy_cpu")
fill_accept_out_cache_loc_cpu = _absent("fill_accept_out_cache_loc_cpu")
fill_bonus_tokens_cpu = _absent("fill_bonus_tokens_cpu")
rotate_input_ids_cpu = _absent("rotate_input_ids_cpu")
