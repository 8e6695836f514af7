"""HiCache-on-CPU's rows of the hook contract and the settings it serves (a leaf: no SGLang import).

The rows are core rows (``launch/contract.py``): HiCache is SGLang's own
feature, turned on by ``sglang.enable_hierarchical_cache=true`` with or
without a kind, so every SGLang process checks them.
"""

from __future__ import annotations

from server.sglang.launch.symbols import HookedSymbol

POOL_HOST = "sglang.srt.mem_cache.pool_host"
#: The host pools' common constructor (every KV pool's ``pin_memory`` passes through it).
HOST_INIT = f"{POOL_HOST}.base.HostKVCache.__init__"
#: The MHA host pool, whose transfer methods read the module's copy-op globals.
MHA_HOST = f"{POOL_HOST}.mha.MHATokenToKVPoolHost"
#: A hybrid model's recurrent-state host pool: its own constructor (not ``HOST_INIT``) takes
#: ``pin_memory``; its copy helpers read its module's copy-op globals.
MAMBA_HOST = f"{POOL_HOST}.mamba.MambaPoolHost"
MAMBA_INIT = f"{MAMBA_HOST}.__init__"
#: Per host-pool class: each method that must still call the copy op ``server/sglang/hicache/cpu.py``
#: installs as its module's global (checked at install: a rename in SGLang fails loudly).
TRANSFER_READERS: dict[str, dict[str, tuple[str, ...]]] = {
    MHA_HOST: {"load_to_device_per_layer": ("transfer_kv_direct", "transfer_kv_per_layer_direct_pf_lf"),
               "backup_from_device_all_layer": ("transfer_kv_direct", "transfer_kv_all_layer_direct_lf_pf")},
    MAMBA_HOST: {"_copy_tensor": ("transfer_kv_direct",),
                 "_copy_tensor_pf_lf": ("transfer_kv_per_layer_direct_pf_lf",),
                 "_copy_tensor_all_layers_lf_pf": ("transfer_kv_all_layer_direct_lf_pf",)},
}

#: The io backend and host layouts served on CPU (``sglang.hicache_io_backend`` / ``hicache_mem_layout``):
#: the first layout is the default; a hybrid model's recurrent-state pool needs the second.
CPU_IO_BACKEND = "direct"
HYBRID_MEM_LAYOUT = "page_first_direct"
CPU_MEM_LAYOUTS = ("layer_first", HYBRID_MEM_LAYOUT)

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
    HookedSymbol(MAMBA_INIT, ("self", "buffer_info", "host_to_device_ratio", "host_size", "device_capacity",
                              "pin_memory", "device", "allocator_type", "layout", "mtp_draft_buffer_infos")),
    HookedSymbol(f"{MAMBA_HOST}._copy_tensor", ("src", "dst", "src_indices", "dst_indices", "io_backend")),
    HookedSymbol(f"{MAMBA_HOST}._copy_tensor_pf_lf",
                 ("src", "dst", "src_indices", "dst_indices", "layer_id", "num_layers", "io_backend")),
    HookedSymbol(f"{MAMBA_HOST}._copy_tensor_all_layers_lf_pf",
                 ("src_layers", "dst", "src_indices", "dst_indices", "num_layers", "io_backend", "src_ptrs",
                  "staging", "can_use_jit")),
)
