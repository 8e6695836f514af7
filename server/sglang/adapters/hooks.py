"""Install the adapters kind in an SGLang scheduler process.

``+adapters=scute``: the ``scute`` LoRA backend (registered in SGLang's LoRA
backend registry and chosen when the LoRA manager is built), Scute's
conversion of every adapter SGLang loads, and the slots filled and cleared
with SGLang's buffer slots. ``+adapters=lora``: SGLang's own path, with a clear
refusal of the PEFT types it cannot serve. Both: the slot eviction order
through the policy, and pinned memory as a no-op where CUDA is absent.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compose.schema import AdaptersHostConfig
from kernels.scute.peft import UnsupportedAdapter
from policies.adapters import AdaptersPolicy

if TYPE_CHECKING:
    from server.sglang.adapters.store import ScuteStore

log = logging.getLogger("switchboard.adapters")

_LORA = "sglang.srt.lora"
MANAGER = f"{_LORA}.lora_manager.LoRAManager"
POOL = f"{_LORA}.mem_pool.LoRAMemoryPool"
#: Attribute of the base model (and of the LoRA memory pool) holding the ``ScuteStore``.
SCUTE_STORE = "scute_store"


def install(policy: AdaptersPolicy, host: AdaptersHostConfig) -> None:
    """Register the hooks (the scheduler process, before SGLang builds its model)."""
    from sglang.srt.lora.backend.lora_registry import register_lora_backend
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from server.sglang.adapters.cpu_pin import allow_unpinned
    from server.sglang.adapters.slot_eviction import PolicySlotEviction

    if allow_unpinned():
        log.info("switchboard: no CUDA, SGLang's LoRA path uses unpinned host memory")

    def after_pool_init(_result: None, pool: Any, *args: Any, **kwargs: Any) -> None:
        pool.eviction_policy = PolicySlotEviction(policy)
        pool.scute_store = getattr(kwargs.get("base_model"), SCUTE_STORE, None)

    def count_batch(pool: Any, *args: Any, **kwargs: Any) -> None:
        pool.eviction_policy.next_batch()

    HookRegistry.register(f"{POOL}.__init__", after_pool_init, HookType.AFTER)
    HookRegistry.register(f"{POOL}.prepare_lora_batch", count_batch, HookType.BEFORE)
    if not policy.needs.mixed_methods:
        HookRegistry.register(f"{MANAGER}._load_lora_adapter", refuse_non_lora, HookType.AROUND)
        return

    from server.sglang.adapters.backend import BACKEND_NAME, ScuteLoRABackend
    from server.sglang.adapters.store import ScuteStore

    register_lora_backend(BACKEND_NAME)(lambda: ScuteLoRABackend)

    def scute_manager(original: Any, manager: Any, **kwargs: Any) -> None:
        # NOTE: the store rides on the base model: the adapters SGLang loads
        # while its manager is still being built are converted into it.
        setattr(kwargs["base_model"], SCUTE_STORE, ScuteStore(host.max_rank))
        # NOTE: SGLang's CLI only accepts its own backend names; the launcher
        # passes torch_native (args.py) and the manager is built with ours.
        kwargs["lora_backend"] = BACKEND_NAME
        original(manager, **kwargs)

    def after_modules(_result: None, manager: Any) -> None:
        store = store_of(manager.base_model)
        store.build_pools(manager.lora_modules, manager.max_loras_per_batch)
        manager.lora_backend.store = store

    def after_buffer_load(_result: None, pool: Any, uid: str | None, buffer_id: int, *args: Any, **kw: Any) -> None:
        store_of(pool).fill(buffer_id, uid)

    def after_buffer_clear(_result: None, pool: Any, buffer_id: int) -> None:
        store_of(pool).clear(buffer_id)

    HookRegistry.register(MANAGER + ".__init__", scute_manager, HookType.AROUND)
    HookRegistry.register(f"{MANAGER}._load_lora_adapter", load_converted, HookType.AROUND)
    HookRegistry.register(f"{MANAGER}._unload_lora_adapter", unload_converted, HookType.AROUND)
    HookRegistry.register(f"{MANAGER}.init_lora_modules", after_modules, HookType.AFTER)
    HookRegistry.register(f"{POOL}.load_lora_weight_to_buffer", after_buffer_load, HookType.AFTER)
    HookRegistry.register(f"{POOL}._clear_buffer_slot_for_base", after_buffer_clear, HookType.AFTER)


def store_of(owner: Any) -> ScuteStore:
    """The store on the base model (or a LoRA memory pool) ``owner``."""
    store: ScuteStore | None = getattr(owner, SCUTE_STORE, None)
    if store is None:
        raise RuntimeError(f"Scute: {type(owner).__name__} has no store (the manager hook did not run)")
    return store


def load_converted(original: Any, manager: Any, lora_ref: Any) -> Any:
    """``LoRAManager._load_lora_adapter``: convert with Scute, hand SGLang the
    zero rank-1 LoRA, keep the slots. A refusal is SGLang's failed load (its
    message names the type), before any slot is touched."""
    from server.sglang.adapters.store import sglang_shaped

    store = store_of(manager.base_model)
    try:
        adapter = store.convert(lora_ref.lora_name, lora_ref.lora_path, manager.base_model)
        config, tensors = sglang_shaped(adapter, manager.base_model)
    except (UnsupportedAdapter, OSError, ValueError) as exc:
        log.warning("Scute refused adapter %s: %s", lora_ref.lora_name, exc)
        return manager.create_lora_update_result(success=False, error_message=f"{lora_ref.lora_name}: {exc}")
    result = manager._load_lora_adapter_from_tensors(lora_ref, tensors, config)
    if result.success:
        store.add(lora_ref.lora_id, adapter)
        log.info("Scute loaded %s (%s, %d layers)", lora_ref.lora_name, adapter.method, len(adapter.slots))
    return result


def unload_converted(original: Any, manager: Any, lora_ref: Any) -> Any:
    result = original(manager, lora_ref)
    if result.success:
        store_of(manager.base_model).remove(lora_ref.lora_id)
    return result


def refuse_non_lora(original: Any, manager: Any, lora_ref: Any) -> Any:
    """``+adapters=lora``: SGLang's path serves PEFT LoRA only; other types are
    refused naming the type (stock: a bare ``KeyError``)."""
    cfg_path = Path(lora_ref.lora_path) / "adapter_config.json"
    if cfg_path.exists():
        cfg = json.loads(cfg_path.read_text())
        kind = str(cfg.get("peft_type", "")).upper()
        if kind != "LORA" or cfg.get("use_dora"):
            what = "DoRA" if kind == "LORA" else (kind or "(no peft_type)")
            msg = (f"{lora_ref.lora_name}: PEFT type {what} is not served by SGLang's LoRA path "
                   "(+adapters=lora serves LORA only); +adapters=scute serves LoRA, DoRA, VeRA, OFT and IA3")
            return manager.create_lora_update_result(success=False, error_message=msg)
    return original(manager, lora_ref)
