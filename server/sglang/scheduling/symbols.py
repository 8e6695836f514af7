"""The queue-order kind's rows of the hook contract (``OrderBinding.symbols``).

The prefix-match tracker (``matching.py``, for an order that reads cache
hits), the diffusion-LM round host (``dllm.py``) and the hidden-state capture
(``capture.py``). A leaf module (no SGLang import); the scheduler subclass's
own rows are the core's (``launch/contract.py``).
"""

from __future__ import annotations

from server.sglang.launch.symbols import POLICY, HookedSymbol

ORDER_SYMBOLS: tuple[HookedSymbol, ...] = (
    HookedSymbol(f"{POLICY}.SchedulePolicy._compute_prefix_matches",
                 ("self", "waiting_queue", "policy")),
    HookedSymbol("sglang.srt.mem_cache.common.match_kv_cache",
                 ("req", "tree_cache", "token_ids", "cow_mamba", "max_prefix_len")),
    HookedSymbol("sglang.srt.mem_cache.unified_radix_cache.UnifiedRadixCache.insert", ("self", "params")),
    HookedSymbol("sglang.srt.mem_cache.radix_cache.RadixCache.insert", ("self", "params")),
    # MatchTracker counts evictions through these (matching.EVICTING_METHODS).
    HookedSymbol("sglang.srt.mem_cache.unified_radix_cache.UnifiedRadixCache.evict", ("self", "params")),
    HookedSymbol("sglang.srt.mem_cache.unified_radix_cache.UnifiedRadixCache.evict_for_alloc",
                 ("self", "params", "allocation_reclaim_satisfied")),
    HookedSymbol("sglang.srt.mem_cache.unified_radix_cache.UnifiedRadixCache.reset", ("self",)),
    HookedSymbol("sglang.srt.mem_cache.radix_cache.RadixCache.evict", ("self", "params")),
    HookedSymbol("sglang.srt.mem_cache.radix_cache.RadixCache.reset", ("self",)),
    HookedSymbol("sglang.srt.dllm.mixin.scheduler.DllmManager.add_waiting_reqs", ("self", "reqs")),
    HookedSymbol("sglang.srt.dllm.mixin.req.DllmReqPhase"),
    HookedSymbol("sglang.srt.dllm.mixin.req.ReqDllmMixin.is_dllm_prefill", ("self",)),
    HookedSymbol(f"{POLICY}.PrefillAdder.add_dllm_staging_req", ("self", "req")),
    HookedSymbol("sglang.srt.model_executor.forward_batch_info.ForwardMode.DLLM_EXTEND"),
    HookedSymbol("sglang.srt.model_executor.forward_batch_info.ForwardMode.is_dllm_extend", ("self",)),
    HookedSymbol("sglang.srt.models.sdar.SDARForCausalLM.forward",
                 ("self", "input_ids", "positions", "forward_batch", "input_embeds", "pp_proxy_tensors")),
)
