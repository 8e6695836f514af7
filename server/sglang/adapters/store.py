"""Scute adapters inside SGLang's LoRA manager: conversion, slots, buffer slots.

SGLang keeps its own per-adapter state (``LoRAConfig``, ``LoRAAdapter``, the
A/B buffers and the buffer-slot table). For each adapter Scute converts, SGLang
is handed a zero rank-1 LoRA over the same projections, so that its
bookkeeping (names, slot assignment, eviction, batch segments) runs unchanged
and its low-rank term adds exact zeros; the adapter's real values live in the
``LayerPool`` of every wrapped layer, at SGLang's buffer slot.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from kernels.scute.peft import PREFIX, BaseLinear, ScuteAdapter, UnsupportedAdapter, read_peft
from kernels.scute.slots import AdapterSlots
from server.sglang.adapters.layer_pool import LayerPool

log = logging.getLogger("switchboard.scute")

#: HF projection -> (SGLang's fused layer, slice index).
FUSED: dict[str, tuple[str, int]] = {
    "q_proj": ("qkv_proj", 0), "k_proj": ("qkv_proj", 1), "v_proj": ("qkv_proj", 2),
    "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1),
}
#: SGLang's fused layer -> its HF projections, in slice order.
SLICES: dict[str, tuple[str, ...]] = {"qkv_proj": ("q_proj", "k_proj", "v_proj"),
                                      "gate_up_proj": ("gate_proj", "up_proj")}


def unwrap(module: torch.nn.Module) -> torch.nn.Module:
    """The base layer of a LoRA-wrapped SGLang layer (or the layer itself)."""
    return getattr(module, "base_layer", module)


def slice_sizes(layer: torch.nn.Module) -> list[int]:
    """Output sizes of a (fused) SGLang linear layer's slices, this rank's."""
    if hasattr(layer, "q_proj_shard_size"):  # QKVParallelLinear
        return [int(layer.q_proj_shard_size), int(layer.kv_proj_shard_size), int(layer.v_proj_shard_size)]
    sizes = getattr(layer, "output_sizes", None)  # MergedColumnParallelLinear
    if sizes and len(sizes) > 1:
        return [int(s) for s in sizes]
    return [int(layer.weight.shape[0])]


def dense_weight(layer: torch.nn.Module) -> torch.Tensor | None:
    """The layer's (out, in) weight, or ``None`` when it has none (quantized, not linear)."""
    weight = getattr(layer, "weight", None)
    return weight if isinstance(weight, torch.Tensor) and weight.dim() == 2 else None


def base_linear(model: torch.nn.Module) -> BaseLinear:
    """HF module path -> that projection's base weight and bias, sliced out of
    SGLang's fused layers."""
    def get(path: str) -> tuple[torch.Tensor, torch.Tensor | None]:
        parent, _, leaf = path.rpartition(".")
        fused, index = FUSED.get(leaf, (leaf, 0))
        try:
            layer = unwrap(model.get_submodule(f"{parent}.{fused}"))
        except AttributeError:
            raise UnsupportedAdapter(f"the adapter targets {path}, which is not a linear layer of "
                                     "this model that Scute can adapt") from None
        weight = dense_weight(layer)
        if weight is None:
            raise UnsupportedAdapter(f"{path}: the base layer has no dense weight (quantized or not linear)")
        sizes = slice_sizes(layer)
        lo = sum(sizes[:index])
        bias = getattr(layer, "bias", None)
        return weight[lo:lo + sizes[index]].detach(), None if bias is None else bias[lo:lo + sizes[index]].detach()
    return get


def sglang_shaped(adapter: ScuteAdapter, model: torch.nn.Module) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The zero rank-1 PEFT LoRA SGLang is handed for ``adapter``: its config
    and tensors, over every projection of each fused layer it touches.
    NOTE: zeros, so SGLang's own low-rank term adds exactly nothing."""
    paths: set[str] = set()
    for path in adapter.slots:
        parent, _, leaf = path.rpartition(".")
        fused = FUSED.get(leaf, (leaf, 0))[0]
        paths.update(f"{parent}.{p}" for p in SLICES.get(fused, (leaf,)))
    get = base_linear(model)
    tensors: dict[str, torch.Tensor] = {}
    for path in sorted(paths):
        weight, _ = get(path)
        out, inp = weight.shape
        tensors[f"{PREFIX}{path}.lora_A.weight"] = torch.zeros(1, inp, dtype=weight.dtype)
        tensors[f"{PREFIX}{path}.lora_B.weight"] = torch.zeros(out, 1, dtype=weight.dtype)
    leaves = sorted({p.rpartition(".")[2] for p in paths})
    config = {"peft_type": "LORA", "r": 1, "lora_alpha": 1, "target_modules": leaves, "bias": "none"}
    return config, tensors


class ScuteStore:
    """Converted adapters by SGLang LoRA id, and every wrapped layer's pool."""

    def __init__(self, max_rank: int | None) -> None:
        self.max_rank = max_rank
        """Rank of each slice's slots; ``None``: the largest of the adapters
        converted before the pools are built (the startup ones)."""
        self.adapters: dict[str, ScuteAdapter] = {}
        self.pools: dict[int, LayerPool] = {}
        """``id`` of the LoRA-wrapped SGLang layer -> its pool."""
        self._by_name: dict[str, LayerPool] = {}

    def convert(self, name: str, path: str, model: torch.nn.Module) -> ScuteAdapter:
        """Read and convert the PEFT adapter at ``path``; raise ``UnsupportedAdapter``
        (naming why) before SGLang allocates anything."""
        adapter = read_peft(path, base_linear(model), name=name)
        if self._by_name:
            self._check(adapter)
        return adapter

    def _check(self, adapter: ScuteAdapter) -> None:
        """Raise ``UnsupportedAdapter`` if ``adapter`` does not fit the pools:
        a rank past theirs, or a layer SGLang did not wrap."""
        covered: set[str] = set()
        for pool in self._by_name.values():
            parts = self._parts(adapter, pool.name)
            pool.check(parts)
            parent, _, fused = pool.name.rpartition(".")
            covered.update(f"{parent}.{leaf}" for leaf in SLICES.get(fused, (fused,)))
        missing = sorted(set(adapter.slots) - covered)
        if missing:
            raise UnsupportedAdapter(f"{adapter.name}: touches layers the server did not wrap at startup "
                                     f"({', '.join(missing[:3])}...); widen adapters.target_modules")

    def add(self, lora_id: str, adapter: ScuteAdapter) -> None:
        self.adapters[lora_id] = adapter

    def remove(self, lora_id: str) -> None:
        self.adapters.pop(lora_id, None)

    def _parts(self, adapter: ScuteAdapter, layer_name: str) -> list[AdapterSlots | None]:
        parent, _, fused = layer_name.rpartition(".")
        return [adapter.slots.get(f"{parent}.{leaf}") for leaf in SLICES.get(fused, (fused,))]

    def build_pools(self, lora_modules: list[dict[str, torch.nn.Module]], num_slots: int) -> None:
        """One pool per wrapped layer (``LoRAManager.lora_modules``), filled with
        nothing; sized by ``max_rank`` (or the converted adapters' largest rank)."""
        if self.max_rank is None:
            self.max_rank = max([1] + [s.rank for a in self.adapters.values() for s in a.slots.values()])
        for layer_modules in lora_modules:
            for name, wrapper in layer_modules.items():
                base = unwrap(wrapper)
                weight = dense_weight(base)
                if weight is None:
                    raise RuntimeError(f"Scute: {name} has no dense weight (quantized models are not served)")
                pool = LayerPool(name, slice_sizes(base), int(weight.shape[1]), num_slots, self.max_rank,
                                 weight.dtype, weight.device)
                self.pools[id(wrapper)] = pool
                self._by_name[name] = pool
        for adapter in self.adapters.values():  # NOTE: startup adapters, checked now the pools exist
            self._check(adapter)
        log.info("Scute: %d layer pools, %d slots, rank %d per slice", len(self.pools), num_slots, self.max_rank)

    def fill(self, buffer_id: int, lora_id: str | None) -> None:
        """SGLang loaded ``lora_id`` (``None``: the base model) into ``buffer_id``."""
        adapter = self.adapters.get(lora_id) if lora_id is not None else None
        for name, pool in self._by_name.items():
            if adapter is None:
                pool.clear(buffer_id)
            else:
                pool.fill(buffer_id, self._parts(adapter, name))

    def clear(self, buffer_id: int) -> None:
        for pool in self._by_name.values():
            pool.clear(buffer_id)
