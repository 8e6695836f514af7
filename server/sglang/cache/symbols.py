"""The cache kind's rows of the hook contract (``CacheBinding.symbols``).

A leaf module (no SGLang import): the binding lists them, startup checks them
with the core's (``launch/contract.py``), and the seams that use them import
nothing to know them.
"""

from __future__ import annotations

from server.sglang.launch.symbols import POLICY, HookedSymbol

#: The eviction seam (``eviction.py``, ``names.py``, ``refresh.py``) and the gap prefill walk (``gap_prefill.py``).
EVICTION_SYMBOLS: tuple[HookedSymbol, ...] = (
    HookedSymbol("sglang.srt.mem_cache.evict_policy.EvictionStrategy.get_priority", ("self", "node")),
    HookedSymbol(f"{POLICY}.PrefillAdder._select_prefill_admission",
                 ("self", "req", "total_tokens", "host_hit_length", "swa_host_hit_length",
                  "truncation_align_size", "has_chunked_req")),
    HookedSymbol(f"{POLICY}.PrefillAdder.budget_state", ("self",)),
    HookedSymbol(f"{POLICY}._PrefillAdmission"),
    HookedSymbol("sglang.srt.mem_cache.utils._EVICTION_POLICY_FACTORIES"),
    HookedSymbol("sglang.srt.arg_groups.choices.RADIX_EVICTION_POLICY_CHOICES"),
    HookedSymbol("sglang.srt.arg_groups.choices.add_radix_eviction_policy_choices"),
    # the waiting-prefix refresh (refresh.py): SGLang's own, re-run for an order through the seam
    HookedSymbol(f"{POLICY}.SchedulePolicy._touch_waiting_prefixes", ("self", "policy", "waiting_queue")),
    HookedSymbol(f"{POLICY}.WAITING_PREFIX_REFRESH_INTERVAL"),
    HookedSymbol(f"{POLICY}.WAITING_QUEUE_PREFIX_MATCH_MAX"),
    HookedSymbol("sglang.srt.mem_cache.common.touch_waiting_prefix", ("req", "tree_cache")),
    HookedSymbol("sglang.srt.environ.envs.SGLANG_ENABLE_WAITING_PREFIX_REFRESH"),
    HookedSymbol("sglang.srt.runtime_context.get_disagg", ()),
)

_MC = "sglang.srt.mem_cache"
#: SGLang symbols the gap cache (``gap_cache.py``, ``host_kv.py``) uses (checked at startup with the binding's rows, and again by ``register_gap_cache``).
GAP_CACHE_SYMBOLS: tuple[HookedSymbol, ...] = tuple(
    HookedSymbol(path, params) for path, params in (
        (f"{_MC}.registry.register_radix_cache_backend", ("name", "factory")),
        (f"{_MC}.registry.get_radix_cache_factory", ("name",)),
        (f"{_MC}.base_prefix_cache.BasePrefixCache.checkpoint", ("self", "req", "up_to", "kwargs")),
        (f"{_MC}.base_prefix_cache.MatchResult", None),
        (f"{_MC}.base_prefix_cache.MatchPrefixParams", None),
        (f"{_MC}.base_prefix_cache.InsertParams", None),
        (f"{_MC}.base_prefix_cache.InsertResult", None),
        (f"{_MC}.base_prefix_cache.EvictParams", None),
        (f"{_MC}.base_prefix_cache.EvictResult", None),
        (f"{_MC}.base_prefix_cache.IncLockRefResult", None),
        (f"{_MC}.base_prefix_cache.DecLockRefResult", None),
        (f"{_MC}.radix_cache.RadixKey.match_at", ("self", "other", "offset", "page_size")),
        (f"{_MC}.radix_cache.RadixKey.child_key_at", ("self", "offset", "page_size")),
        (f"{_MC}.unified_cache.component_type.ComponentType.FULL", None),
        # the host tier (host_kv.py): the default KV pool's own offload API
        (f"{_MC}.allocator.token.TokenToKVPoolAllocator.get_kvcache", ("self",)),
        (f"{_MC}.memory_pool.MHATokenToKVPool.get_cpu_copy",
         ("self", "indices", "mamba_indices", "req_pool_index")),
        (f"{_MC}.memory_pool.MHATokenToKVPool.load_cpu_copy",
         ("self", "kv_cache_cpu", "indices", "mamba_indices", "req_pool_index")),
    ))

_URC = f"{_MC}.unified_radix_cache.UnifiedRadixCache"
_CORE = f"{_MC}.unified_cache.unified_tree_core.UnifiedTreeCore"
#: SGLang symbols the snapshot cache (``histate_cache.py``, ``state_codec.py``) uses: private
#: methods of the unified cache's Python tree core (checked at startup and by ``register_histate_cache``).
HISTATE_SYMBOLS: tuple[HookedSymbol, ...] = tuple(
    HookedSymbol(path, params) for path, params in (
        (f"{_MC}.registry.create_unified_radix_cache", ("ctx", "cache_class")),
        (f"{_URC}._match_tree", ("self", "params")),
        (f"{_URC}._evict_components",
         ("self", "request_by_type", "tracker", "available_size_targets", "allocation_reclaim_satisfied")),
        (f"{_URC}._evict_device_leaf", ("self", "node_id", "tracker")),
        (f"{_URC}._apply_eviction_result", ("self", "result")),
        (f"{_URC}._accumulate_tracker", ("self", "tracker", "delta")),
        (f"{_URC}._component_available_size", ("self", "component_type")),
        (f"{_URC}.inc_lock_ref", ("self", "node_id", "skip_lock_components")),
        (f"{_URC}.dec_lock_ref", ("self", "node_id", "params", "skip_swa")),
        (f"{_URC}.evict_for_alloc", ("self", "params", "allocation_reclaim_satisfied")),
        (f"{_URC}.reset", ("self",)),
        (f"{_CORE}._remove_leaf_from_parent", ("self", "node")),
        (f"{_CORE}._evict_component_and_detach_lru",
         ("self", "node", "comp", "device_frees", "host_frees", "cache_actions", "target", "tracker")),
        (f"{_CORE}._update_evictable_leaf_sets", ("self", "node")),
        (f"{_CORE}._walk_span", ("self", "key", "end")),
        (f"{_CORE}.set_component_device_value", ("self", "node_id", "component_type", "value")),
        (f"{_MC}.unified_cache.unified_tree_core_interface.BaseEvictionResult", None),
        (f"{_MC}.unified_cache.components.base.EvictLayer.DEVICE", None),
        (f"{_MC}.unified_cache.components.base._LAST_ACCESS_TIME_COUNTER_FLOAT", None),
        (f"{_MC}.unified_cache.component_type.ComponentType.MAMBA", None),
        (f"{_MC}.memory_pool.MambaPool.get_cpu_copy", ("self", "indices")),
        (f"{_MC}.memory_pool.MambaPool.load_cpu_copy", ("self", "mamba_cache_cpu", "indices")),
        (f"{_MC}.allocator.mamba.MambaSlotAllocator.alloc", ("self", "need_size")),
        (f"{_MC}.allocator.mamba.MambaSlotAllocator.free", ("self", "free_index")),
    ))

#: Every row of the cache kind.
CACHE_SYMBOLS = EVICTION_SYMBOLS + GAP_CACHE_SYMBOLS + HISTATE_SYMBOLS
