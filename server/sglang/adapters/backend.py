"""The ``scute`` LoRA backend: SGLang's torch-native backend, with every
LoRA-wrapped layer computed through Scute's generalized slots.

Every LoRA-wrapped layer's ``forward`` calls ``forward_with_base`` (column,
merged, QKV and row layers alike), so this one override serves them all. The
batch's segments and their buffer slots are SGLang's own (``batch_info``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from sglang.srt.lora.backend.torch_backend import TorchNativeLoRABackend

from server.sglang.adapters.store import ScuteStore, unwrap

#: The name the backend is registered under in SGLang's LoRA backend registry.
BACKEND_NAME = "scute"


class ScuteLoRABackend(TorchNativeLoRABackend):
    """Torch-native segments and batch info; Scute's slots for the layer math."""

    name = BACKEND_NAME

    def __init__(self, max_loras_per_batch: int, device: torch.device, **kwargs: Any) -> None:
        super().__init__(max_loras_per_batch, device, **kwargs)
        self.store: ScuteStore | None = None
        """Set once the wrapped layers' pools exist (``hooks.after_modules``)."""

    def forward_with_base(self, layer: Any, x: torch.Tensor, base_fn: Callable[[], torch.Tensor], lora_a: Any,
                          lora_b: Any, output_offset: Any, offsets: Any, *, all_reduce: Any = None,
                          kind: str = "linear", pruned_batch_info: Any = None) -> torch.Tensor:
        pool = self.store.pools.get(id(layer)) if self.store is not None else None
        if pool is None or all_reduce is not None or pruned_batch_info is not None:
            # NOTE: startup refuses TP > 1 (all_reduce); a layer without a pool
            # is not one Scute adapts (SGLang's own path, zeros for ours).
            return super().forward_with_base(layer, x, base_fn, lora_a, lora_b, output_offset, offsets,
                                             all_reduce=all_reduce, kind=kind, pruned_batch_info=pruned_batch_info)
        info = self.batch_info
        n = int(info.num_segments)
        seg_slots = [int(s) for s in info.weight_indices_cpu[:n].tolist()]
        if not any(pool.active[s] for s in seg_slots):
            return base_fn()
        seg_lens = [int(v) for v in info.seg_lens_cpu[:n].tolist()]
        base = unwrap(layer)
        bias = None if getattr(base, "skip_bias_add", False) else base.bias
        return pool.forward(x, base.weight, bias, seg_lens, seg_slots)
