"""HiCache-on-CPU's rows of the hook contract and the settings it serves (a leaf: no SGLang import).

The rows are core rows (``launch/contract.py``): HiCache is SGLang's own
feature, turned on by ``sglang.enable_hierarchical_cache=true`` with or
without a kind, so every SGLang process checks them.
"""

from __future__ import annotations

from server.sglang.launch.symbols import HookedSymbol

POOL_HOST = "sglang.srt.mem_cache.pool_host"
#: The host pools' common constructor (every pool's ``pin_memory`` passes through it).
HOST_INIT = f"{POOL_HOST}.base.HostKVCache.__init__"
#: The MHA host pool, whose transfer methods read the module global ``transfer_kv_direct``.
MHA_HOST = f"{POOL_HOST}.mha.MHATokenToKVPoolHost"
#: The module global the pool's ``direct`` branch calls (unbound on CPU).
TRANSFER_GLOBAL = "transfer_kv_direct"
#: Pool methods that call ``TRANSFER_GLOBAL`` (checked at install: a rename in SGLang fails loudly).
TRANSFER_READERS = ("load_to_device_per_layer", "backup_from_device_all_layer")

#: The io backend and host layout served on CPU (``sglang.hicache_io_backend`` / ``hicache_mem_layout``).
CPU_IO_BACKEND = "direct"
CPU_MEM_LAYOUT = "layer_first"

HICACHE_SYMBOLS: tuple[HookedSymbol, ...] = (
    HookedSymbol(HOST_INIT, ("self", "dtype", "device_capacity_tokens", "size_per_token", "start_layer",
                             "end_layer", "host_to_device_ratio", "host_size", "page_size", "layout",
                             "pin_memory", "device", "allocator_type", "dcp_size", "dcp_rank", "pool_label",
                             "is_dummy", "host_token_capacity")),
    HookedSymbol(f"{MHA_HOST}.load_to_device_per_layer",
                 ("self", "device_pool", "host_indices", "device_indices", "layer_id", "io_backend",
                  "is_draft")),
    HookedSymbol(f"{MHA_HOST}.backup_from_device_all_layer",
                 ("self", "device_pool", "host_indices", "device_indices", "io_backend")),
)
