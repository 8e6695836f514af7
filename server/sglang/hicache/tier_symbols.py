"""The tier kind's rows of the hook contract (a leaf: no SGLang import).

The segment storage (``segment_backend.py``) is a ``HiCacheStorage`` that
SGLang's ``dynamic`` backend builds and its controller calls through the
generic page interface: a renamed method or parameter there fails startup.
"""

from __future__ import annotations

from server.sglang.launch.symbols import HookedSymbol

MODULE = "sglang.srt.mem_cache.hicache_storage"
STORAGE = f"{MODULE}.HiCacheStorage"
FACTORY = "sglang.srt.mem_cache.storage.backend_factory.StorageBackendFactory"

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
)
