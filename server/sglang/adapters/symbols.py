"""The adapters kind's rows of the hook contract (``AdaptersBinding.symbols``).

SGLang's LoRA manager, memory pool, slot eviction and torch backend, as
``hooks.py``, ``slot_eviction.py``, ``store.py`` and ``backend.py`` use them.
A leaf module (no SGLang import).
"""

from __future__ import annotations

from server.sglang.launch.symbols import LORA, HookedSymbol

ADAPTERS_SYMBOLS: tuple[HookedSymbol, ...] = (
    # The adapters kind (server/sglang/adapters/).
    HookedSymbol(f"{LORA}.lora_manager.LoRAManager.__init__",
                 ("self", "base_model", "base_hf_config", "max_loras_per_batch", "load_config", "dtype",
                  "server_args", "lora_backend", "max_lora_rank", "target_modules", "lora_paths")),
    HookedSymbol(f"{LORA}.lora_manager.LoRAManager._load_lora_adapter", ("self", "lora_ref")),
    HookedSymbol(f"{LORA}.lora_manager.LoRAManager._unload_lora_adapter", ("self", "lora_ref")),
    HookedSymbol(f"{LORA}.lora_manager.LoRAManager._load_lora_adapter_from_tensors",
                 ("self", "lora_ref", "tensors", "config_dict", "added_tokens_config")),
    HookedSymbol(f"{LORA}.lora_manager.LoRAManager.create_lora_update_result", ("self", "success", "error_message")),
    HookedSymbol(f"{LORA}.lora_manager.LoRAManager.init_lora_modules", ("self",)),
    HookedSymbol(f"{LORA}.mem_pool.LoRAMemoryPool.__init__",
                 ("self", "base_hf_config", "max_loras_per_batch", "dtype", "max_lora_rank", "target_modules",
                  "base_model", "eviction_policy", "lora_added_tokens_size", "experts_shared_outer_loras",
                  "strict_loading", "enable_lora_overlap_loading")),
    HookedSymbol(f"{LORA}.mem_pool.LoRAMemoryPool.prepare_lora_batch",
                 ("self", "cur_uids", "lora_adapters", "lora_modules", "lora_refs", "lora_embed_tokens_module",
                  "lora_lm_head_module")),
    HookedSymbol(f"{LORA}.mem_pool.LoRAMemoryPool.load_lora_weight_to_buffer",
                 ("self", "uid", "buffer_id", "lora_adapter", "lora_modules", "lora_embed_tokens_module",
                  "lora_lm_head_module")),
    HookedSymbol(f"{LORA}.mem_pool.LoRAMemoryPool._clear_buffer_slot_for_base", ("self", "buffer_id")),
    HookedSymbol(f"{LORA}.eviction_policy.EvictionPolicy.mark_used", ("self", "uid")),
    HookedSymbol(f"{LORA}.eviction_policy.EvictionPolicy.select_victim", ("self", "candidates")),
    HookedSymbol(f"{LORA}.eviction_policy.EvictionPolicy.remove", ("self", "uid")),
    HookedSymbol(f"{LORA}.backend.lora_registry.register_lora_backend", ("name",)),
    HookedSymbol(f"{LORA}.backend.torch_backend.TorchNativeLoRABackend"),
    HookedSymbol(f"{LORA}.backend.torch_backend.TorchNativeLoRABackend.forward_with_base",
                 ("self", "layer", "x", "base_fn", "lora_a", "lora_b", "output_offset", "offsets",
                  "all_reduce", "kind", "pruned_batch_info")),
    HookedSymbol(f"{LORA}.backend.torch_backend.TorchNativeLoRABackend.__init__",
                 ("self", "max_loras_per_batch", "device", "kwargs")),
    # cpu_pin.py replaces the ``torch`` these modules see (no CUDA only).
    HookedSymbol(f"{LORA}.layers.torch"),
    HookedSymbol(f"{LORA}.backend.torch_backend.torch"),
)
