"""One LoRA-wrapped SGLang layer's Scute slots, indexed by SGLang's buffer slot.

SGLang fuses some projections (``qkv_proj`` = q, k, v; ``gate_up_proj`` =
gate, up); an adapter fills each *slice* of the fused output with that
projection's slots. Per buffer slot the pool holds, over the fused output:
``scale`` and ``shift``; the slices' low-rank terms stacked along the rank
(``lora_a`` rows and ``mid`` of slice ``i`` follow slice ``i-1``'s, and
``lora_b`` is block-diagonal: slice ``i``'s rows only read its own ranks);
``out_scale``; and, per slice, an optional block-diagonal input transform.

NOTE: an unfilled slot is neutral (scale 1, shift 0, zero low-rank factors, no
transform), which leaves the base layer's output exactly as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

import torch
import torch.nn.functional as F

from kernels.scute.peft import UnsupportedAdapter
from kernels.scute.pool import gathered_low_rank, row_slots, scaled_base
from kernels.scute.reference import transform_input
from kernels.scute.slots import AdapterSlots

#: Rows per segment above which the low-rank term loops over segments
#: instead of gathering every row's factors (prefill vs decode).
GATHER_MAX_ROWS_PER_SEGMENT = 8


class LayerPool:
    """The slots of one SGLang layer for every buffer slot (see module docs)."""

    def __init__(self, name: str, slice_sizes: Sequence[int], in_features: int, num_slots: int,
                 max_rank: int, dtype: torch.dtype, device: torch.device | str) -> None:
        self.name = name
        self.bounds: list[tuple[int, int]] = []
        lo = 0
        for size in slice_sizes:
            self.bounds.append((lo, lo + size))
            lo += size
        self.out_features, self.in_features, self.max_rank = lo, in_features, max_rank
        rank = max_rank * len(self.bounds)
        kw = {"dtype": dtype, "device": device}
        self.scale = torch.ones(num_slots, lo, **kw)
        self.shift = torch.zeros(num_slots, lo, **kw)
        self.lora_a = torch.zeros(num_slots, rank, in_features, **kw)
        self.lora_b = torch.zeros(num_slots, lo, rank, **kw)
        self.mid_scale = torch.ones(num_slots, rank, **kw)
        self.out_scale = torch.ones(num_slots, lo, **kw)
        self.blocks: list[list[torch.Tensor | None]] = [[None] * len(self.bounds) for _ in range(num_slots)]
        self.active = [False] * num_slots
        """Slots whose adapter touches this layer (others skip the epilogue)."""

    def check(self, parts: Sequence[AdapterSlots | None]) -> None:
        """Raise ``UnsupportedAdapter`` if ``parts`` (one per slice) do not fit."""
        for (lo, hi), part in zip(self.bounds, parts, strict=True):
            if part is None:
                continue
            part.check(self.in_features, hi - lo)
            if part.rank > self.max_rank:
                raise UnsupportedAdapter(f"{self.name}: rank {part.rank} exceeds the slots' rank {self.max_rank} "
                                         "(sized at startup: raise adapters.max_rank)")

    def clear(self, slot: int) -> None:
        """Make ``slot`` neutral."""
        self.scale[slot] = 1.0
        self.shift[slot] = 0.0
        self.lora_a[slot] = 0.0
        self.lora_b[slot] = 0.0
        self.mid_scale[slot] = 1.0
        self.out_scale[slot] = 1.0
        self.blocks[slot] = [None] * len(self.bounds)
        self.active[slot] = False

    def fill(self, slot: int, parts: Sequence[AdapterSlots | None]) -> None:
        """Load an adapter's slots (one per slice, ``None``: untouched) into ``slot``."""
        self.check(parts)
        self.clear(slot)
        r0 = 0
        for i, ((lo, hi), part) in enumerate(zip(self.bounds, parts, strict=True)):
            if part is None:
                continue
            part = part.to(self.scale.dtype, self.scale.device)
            if part.scale is not None:
                self.scale[slot, lo:hi] = part.scale
            if part.shift is not None:
                self.shift[slot, lo:hi] = part.shift
            if part.lora_a is not None and part.lora_b is not None:
                r = part.rank
                self.lora_a[slot, r0:r0 + r] = part.lora_a
                self.lora_b[slot, lo:hi, r0:r0 + r] = part.lora_b
                if part.mid_scale is not None:
                    self.mid_scale[slot, r0:r0 + r] = part.mid_scale
                if part.out_scale is not None:
                    self.out_scale[slot, lo:hi] = part.out_scale
                r0 += r
            self.blocks[slot][i] = part.blocks
            self.active[slot] = True

    def forward(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                seg_lens: Sequence[int], seg_slots: Sequence[int]) -> torch.Tensor:
        """``s * ((x T) W^T) + b + t + e * (((x A^T) * d) B^T)``, each segment of
        rows with its own slot's values (``kernels.scute.reference`` per row)."""
        y = F.linear(x, weight)
        starts = list(accumulate(seg_lens, initial=0))
        # NOTE: rows with an input transform redo their slices' product on x T;
        # the shared GEMM above covers every other row.
        for i, slot in enumerate(seg_slots):
            lo_r, hi_r = starts[i], starts[i + 1]
            if hi_r == lo_r:
                continue
            for (lo, hi), blocks in zip(self.bounds, self.blocks[slot], strict=True):
                if blocks is not None:
                    y[lo_r:hi_r, lo:hi] = F.linear(transform_input(x[lo_r:hi_r], blocks), weight[lo:hi])
        slots = row_slots(seg_lens, seg_slots, x.device)
        y = scaled_base(y, bias, self, slots)
        if x.shape[0] <= GATHER_MAX_ROWS_PER_SEGMENT * len(seg_lens):
            return y + gathered_low_rank(x, self, slots)
        for i, slot in enumerate(seg_slots):
            lo_r, hi_r = starts[i], starts[i + 1]
            if hi_r > lo_r and self.active[slot]:
                h = F.linear(x[lo_r:hi_r], self.lora_a[slot]) * self.mid_scale[slot]
                y[lo_r:hi_r] += F.linear(h, self.lora_b[slot]) * self.out_scale[slot]
        return y
