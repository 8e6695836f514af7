"""The tier kind's rows of the hook contract (a leaf: no SGLang import).

The segment storage (``segment_backend.py``) is a ``HiCacheStorage`` that
SGLang's ``dynamic`` backend builds and its controller calls through the
generic page interface; the tier cache (``tier_cache.py``) subclasses
``UnifiedRadixCache`` and reads the Python tree core's nodes: a renamed
method or parameter there fails startup.
"""

from __future__ import annotations

from server.sglang.launch.symbols import HookedSymbol

MODULE = "sglang.srt.mem_cache.hicache_storage"
STORAGE = f"{MODULE}.HiCacheStorage"
FACTORY = "sglang.srt.mem_cache.storage.backend_factory.StorageBackendFactory"
_MC = "sglang.srt.mem_cache"
CACHE = f"{_MC}.unified_radix_cache.UnifiedRadixCache"
CORE = f"{_MC}.unified_cache.unified_tree_core.UnifiedTreeCore"
_FREES = ("self", "node", "tracker", "device_frees", "host_frees", "cache_actions")

TIER_SYMBOLS: tuple[HookedSymbol, ...] = (
    HookedSymbol(f"{MODULE}.HiCacheStorageConfig"),
    HookedSymbol(f"{MODULE}.HiCacheStorageExtraInfo"),
    HookedSymbol(f"{STORAGE}.register_mem_pool_host", ("self", "mem_pool_host")),
    HookedSymbol(f"{STORAGE}.get", ("self", "key", "target_location", "target_sizes")),
    HookedSymbol(f"{STORAGE}.batch_get", ("self", "keys", "target_locations", "target_sizes")),
    HookedSymbol(f"{STORAGE}.set", ("self", "key", "value", "target_location", "target_sizes")),
    HookedSymbol(f"{STORAGE}.batch_set", ("self", "keys", "values", "target_locations", "target_sizes")),
    HookedSymbol(f"{STORAGE}.exists", ("self", "key")),
    HookedSymbol(f"{STORAGE}.batch_exists", ("self", "keys", "extra_info")),
    HookedSymbol(f"{FACTORY}._create_dynamic_backend",
                 ("backend_config", "storage_config", "mem_pool_host", "kwargs")),
    # the tier cache: registered as a radix cache backend, built by SGLang's own factory
    HookedSymbol(f"{_MC}.registry.register_radix_cache_backend", ("name", "factory")),
    HookedSymbol(f"{_MC}.registry.get_radix_cache_factory", ("name",)),
    HookedSymbol(f"{_MC}.registry.create_unified_radix_cache", ("ctx", "cache_class")),
    HookedSymbol(f"{_MC}.cache_init_params.CacheInitParams"),
    HookedSymbol(f"{_MC}.unified_cache.unified_tree_core_interface.DemoteResult"),
    HookedSymbol(f"{_MC}.unified_cache.component_type.ComponentType.FULL"),
    HookedSymbol(f"{CACHE}.insert", ("self", "params")),
    HookedSymbol(f"{CACHE}.is_backuped", ("self", "node_id")),
    HookedSymbol("sglang.srt.managers.scheduler.Scheduler._prefetch_kvcache", ("self", "req", "storage_hit_end")),
    HookedSymbol(f"{CACHE}.checkpoint_into_tree", ("self", "req", "up_to", "kwargs")),
    HookedSymbol(f"{CACHE}.write_backup_storage", ("self", "node_id")),
    HookedSymbol(f"{CACHE}.check_hicache_events", ("self",)),
    HookedSymbol(f"{CACHE}._handle_prefetch_result", ("self", "operation")),
    HookedSymbol(f"{CACHE}._apply_eviction_result", ("self", "result")),
    HookedSymbol(f"{CORE}.node_by_id", ("self", "node_id")),
    HookedSymbol(f"{CORE}._walk_span", ("self", "key", "end")),
    HookedSymbol(f"{CORE}._can_reclaim_full_host_duplicate", ("self", "node")),
    HookedSymbol(f"{CORE}._release_full_host_duplicate", _FREES),
    HookedSymbol(f"{CORE}._is_host_leaf", ("self", "node")),
    HookedSymbol(f"{CORE}._evict_host_leaf", _FREES),
)
