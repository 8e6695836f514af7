"""Every SGLang symbol the adapter hooks or calls, with the signature it expects.

SGLang's plugin loader only *logs* a hook whose target is gone; a silently
unhooked policy would serve stock behaviour under a Switchboard config. So the
launcher and the plugin in every SGLang process call ``verify()`` and refuse
to start when anything below is missing or has changed shape.

NOTE: keep this table in step with the adapter: a symbol used in
``server/sglang/`` but not listed here is a bug (a test greps for it).
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass

from server.sglang import SGLANG_VERSION


@dataclass(frozen=True)
class HookedSymbol:
    """One SGLang symbol and, for callables, its expected parameter names."""

    path: str
    """Dotted path: ``module.Attr[.attr]``."""
    params: tuple[str, ...] | None = None
    """Expected parameter names (``self`` included); ``None`` = not a callable check."""


_SCHED = "sglang.srt.managers.scheduler"
_POLICY = "sglang.srt.managers.schedule_policy"
_LORA = "sglang.srt.lora"

HOOKED_SYMBOLS: tuple[HookedSymbol, ...] = (
    HookedSymbol("sglang.srt.plugins.load_plugins", ()),
    HookedSymbol("sglang.srt.plugins.hook_registry.HookRegistry.register",
                 ("target", "hook", "hook_type", "source")),
    HookedSymbol("sglang.srt.plugins.hook_registry.HookType.REPLACE"),
    HookedSymbol(f"{_SCHED}.Scheduler"),
    HookedSymbol(f"{_SCHED}.Scheduler.init_schedule_policy", ("self",)),
    HookedSymbol(f"{_SCHED}.Scheduler.get_prefill_adder_class", ("self",)),
    HookedSymbol(f"{_SCHED}.Scheduler._add_request_to_queue", ("self", "req", "is_retracted")),
    HookedSymbol(f"{_SCHED}.Scheduler.send_abort_output", ("self", "abort_req", "req")),
    HookedSymbol(f"{_SCHED}.Scheduler.init_req_max_new_tokens", ("self", "req")),
    HookedSymbol(f"{_SCHED}.Scheduler.run_batch", ("self", "batch", "pp_proxy_tensors")),
    HookedSymbol("sglang.srt.model_executor.forward_batch_info.ForwardMode.is_extend",
                 ("self", "include_draft_extend_v2")),
    HookedSymbol("sglang.srt.model_executor.forward_batch_info.ForwardMode.is_target_verify", ("self",)),
    HookedSymbol(f"{_SCHED}.Scheduler._release_aborted_request", ("self", "req")),
    HookedSymbol(f"{_SCHED}._make_abort_req", ("req", "finished_reason")),
    HookedSymbol(f"{_SCHED}.Scheduler.get_output_streamer_class", ("self",)),
    HookedSymbol(f"{_SCHED}.Scheduler.close_session", ("self", "recv_req")),
    HookedSymbol("sglang.srt.managers.scheduler_components.output_streamer.SchedulerOutputStreamer.stream_output",
                 ("self", "reqs", "return_logprob", "skip_req")),
    HookedSymbol("sglang.srt.managers.schedule_batch.FINISH_ABORT"),
    HookedSymbol(f"{_POLICY}.SchedulePolicy.__init__",
                 ("self", "policy", "tree_cache", "enable_hierarchical_cache",
                  "enable_priority_scheduling", "schedule_low_priority_values_first")),
    HookedSymbol(f"{_POLICY}.SchedulePolicy.calc_priority",
                 ("self", "waiting_queue", "running_batch", "processed_tokens")),
    HookedSymbol(f"{_POLICY}.SchedulePolicy._compute_prefix_matches",
                 ("self", "waiting_queue", "policy")),
    HookedSymbol(f"{_POLICY}.SchedulePolicy._determine_active_policy", ("self", "waiting_queue")),
    HookedSymbol(f"{_POLICY}.PrefillAdder.add_one_req",
                 ("self", "req", "has_chunked_req", "truncation_align_size")),
    HookedSymbol(f"{_POLICY}.AddReqResult"),
    HookedSymbol(f"{_POLICY}.CacheAwarePolicy"),
    HookedSymbol("sglang.srt.mem_cache.evict_policy.EvictionStrategy.get_priority", ("self", "node")),
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
    HookedSymbol(f"{_POLICY}.SchedulePolicy.shortest_prefill_chunk_limit",
                 ("self", "chunked_req", "waiting_queue", "budget", "page_size")),
    HookedSymbol(f"{_POLICY}.PrefillAdder._select_prefill_admission",
                 ("self", "req", "total_tokens", "host_hit_length", "swa_host_hit_length",
                  "truncation_align_size", "has_chunked_req")),
    HookedSymbol(f"{_POLICY}.PrefillAdder.budget_state", ("self",)),
    HookedSymbol(f"{_POLICY}._PrefillAdmission"),
    HookedSymbol(f"{_SCHED}.Scheduler.get_num_allocatable_reqs",
                 ("self", "running_bs", "beam_width", "running_batch", "num_held_rows")),
    HookedSymbol("sglang.srt.mem_cache.utils._EVICTION_POLICY_FACTORIES"),
    HookedSymbol("sglang.srt.arg_groups.choices.RADIX_EVICTION_POLICY_CHOICES"),
    HookedSymbol("sglang.srt.arg_groups.choices.add_radix_eviction_policy_choices"),
    HookedSymbol("sglang.srt.server_args.prepare_server_args", ("argv",)),
    HookedSymbol("sglang.srt.server_args.ServerArgs.add_cli_args", ("parser",)),
    HookedSymbol("sglang.srt.entrypoints.http_server.app"),
    # Diffusion-LM rounds (server/sglang/scheduling/dllm.py).
    HookedSymbol(f"{_SCHED}.Scheduler._fetch_waiting_reqs", ("self",)),
    HookedSymbol(f"{_SCHED}.Scheduler._process_dllm_batches", ("self", "adder", "running_batch")),
    HookedSymbol(f"{_SCHED}.Scheduler.get_new_batch_dllm", ("self", "running_batch")),
    HookedSymbol("sglang.srt.dllm.mixin.scheduler.DllmManager.add_waiting_reqs", ("self", "reqs")),
    HookedSymbol("sglang.srt.dllm.mixin.req.DllmReqPhase"),
    HookedSymbol("sglang.srt.dllm.mixin.req.ReqDllmMixin.is_dllm_prefill", ("self",)),
    HookedSymbol(f"{_POLICY}.PrefillAdder.add_dllm_staging_req", ("self", "req")),
    HookedSymbol("sglang.srt.model_executor.forward_batch_info.ForwardMode.DLLM_EXTEND"),
    HookedSymbol("sglang.srt.model_executor.forward_batch_info.ForwardMode.is_dllm_extend", ("self",)),
    HookedSymbol("sglang.srt.models.sdar.SDARForCausalLM.forward",
                 ("self", "input_ids", "positions", "forward_batch", "input_embeds", "pp_proxy_tensors")),
    # The adapters kind (server/sglang/adapters/).
    HookedSymbol(f"{_LORA}.lora_manager.LoRAManager.__init__",
                 ("self", "base_model", "base_hf_config", "max_loras_per_batch", "load_config", "dtype",
                  "server_args", "lora_backend", "max_lora_rank", "target_modules", "lora_paths")),
    HookedSymbol(f"{_LORA}.lora_manager.LoRAManager._load_lora_adapter", ("self", "lora_ref")),
    HookedSymbol(f"{_LORA}.lora_manager.LoRAManager._unload_lora_adapter", ("self", "lora_ref")),
    HookedSymbol(f"{_LORA}.lora_manager.LoRAManager._load_lora_adapter_from_tensors",
                 ("self", "lora_ref", "tensors", "config_dict", "added_tokens_config")),
    HookedSymbol(f"{_LORA}.lora_manager.LoRAManager.create_lora_update_result", ("self", "success", "error_message")),
    HookedSymbol(f"{_LORA}.lora_manager.LoRAManager.init_lora_modules", ("self",)),
    HookedSymbol(f"{_LORA}.mem_pool.LoRAMemoryPool.__init__",
                 ("self", "base_hf_config", "max_loras_per_batch", "dtype", "max_lora_rank", "target_modules",
                  "base_model", "eviction_policy", "lora_added_tokens_size", "experts_shared_outer_loras",
                  "strict_loading", "enable_lora_overlap_loading")),
    HookedSymbol(f"{_LORA}.mem_pool.LoRAMemoryPool.prepare_lora_batch",
                 ("self", "cur_uids", "lora_adapters", "lora_modules", "lora_refs", "lora_embed_tokens_module",
                  "lora_lm_head_module")),
    HookedSymbol(f"{_LORA}.mem_pool.LoRAMemoryPool.load_lora_weight_to_buffer",
                 ("self", "uid", "buffer_id", "lora_adapter", "lora_modules", "lora_embed_tokens_module",
                  "lora_lm_head_module")),
    HookedSymbol(f"{_LORA}.mem_pool.LoRAMemoryPool._clear_buffer_slot_for_base", ("self", "buffer_id")),
    HookedSymbol(f"{_LORA}.eviction_policy.EvictionPolicy.mark_used", ("self", "uid")),
    HookedSymbol(f"{_LORA}.eviction_policy.EvictionPolicy.select_victim", ("self", "candidates")),
    HookedSymbol(f"{_LORA}.eviction_policy.EvictionPolicy.remove", ("self", "uid")),
    HookedSymbol(f"{_LORA}.backend.lora_registry.register_lora_backend", ("name",)),
    HookedSymbol(f"{_LORA}.backend.torch_backend.TorchNativeLoRABackend"),
    HookedSymbol(f"{_LORA}.backend.torch_backend.TorchNativeLoRABackend.forward_with_base",
                 ("self", "layer", "x", "base_fn", "lora_a", "lora_b", "output_offset", "offsets",
                  "all_reduce", "kind", "pruned_batch_info")),
    HookedSymbol(f"{_LORA}.backend.torch_backend.TorchNativeLoRABackend.__init__",
                 ("self", "max_loras_per_batch", "device", "kwargs")),
    # cpu_pin.py replaces the ``torch`` these modules see (no CUDA only).
    HookedSymbol(f"{_LORA}.layers.torch"),
    HookedSymbol(f"{_LORA}.backend.torch_backend.torch"),
    HookedSymbol("sglang.srt.entrypoints.http_server.launch_server",
                 ("server_args", "init_tokenizer_manager_func", "run_scheduler_process_func",
                  "run_detokenizer_process_func", "execute_warmup_func", "launch_callback")),
)


class HookContractError(RuntimeError):
    """An SGLang symbol the adapter needs is missing or has another signature."""


def _resolve(path: str) -> object:
    parts = path.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attr in parts[split:]:
            obj = getattr(obj, attr)  # AttributeError: missing
        return obj
    raise ImportError(path)


def problems(symbols: tuple[HookedSymbol, ...] = HOOKED_SYMBOLS) -> list[str]:
    """What is wrong with ``symbols`` in the installed SGLang (empty: all good)."""
    found = []
    for sym in symbols:
        try:
            obj = _resolve(sym.path)
        except (ImportError, AttributeError) as exc:
            found.append(f"{sym.path} is missing ({type(exc).__name__}: {exc})")
            continue
        if sym.params is None:
            continue
        try:
            actual = tuple(inspect.signature(obj).parameters)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            found.append(f"{sym.path} is not a callable with a signature")
            continue
        if actual != sym.params:
            found.append(f"{sym.path} has parameters {actual}, expected {sym.params}")
    return found


def verify(symbols: tuple[HookedSymbol, ...] = HOOKED_SYMBOLS) -> None:
    """Raise ``HookContractError`` naming every broken symbol."""
    found = problems(symbols)
    if found:
        try:
            import sglang

            installed = getattr(sglang, "__version__", "unknown")
        except ImportError:
            installed = "not installed"
        raise HookContractError(
            f"Switchboard's SGLang adapter is pinned to sglang=={SGLANG_VERSION} "
            f"(installed: {installed}) and cannot hook it: " + "; ".join(found)
        )
