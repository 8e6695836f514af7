"""Several adapters' slots for one layer, stacked so that a kernel indexes them by slot.

Slot 0 is the base model (every slot neutral). Unused slots hold neutral values,
which keep the computation exact: an identity input block (``x * 1 + 0``), scale
one, shift zero, and zero rows/columns of the low-rank factors up to the
pool's rank (a zero row of ``A`` gives a zero middle value, a zero column of
``B`` adds zero). Block sizes are unified to the pool's block size ``K``: a
smaller block size that divides ``K`` is laid out block-diagonally inside each
``K`` block (IA3's diagonal is blocks of size one), with zeros elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from kernels.scute.slots import AdapterSlots


@dataclass(frozen=True)
class SlotPool:
    """Stacked slots: index 0 is the base model, ``i`` the ``i``-th adapter given."""

    blocks: torch.Tensor | None
    """(S, n, K, K) input transforms; ``None`` when no adapter has one."""
    scale: torch.Tensor
    """(S, out)."""
    shift: torch.Tensor
    """(S, out)."""
    lora_a: torch.Tensor
    """(S, R, in); R >= 1 (zeros where an adapter has a lower rank or none)."""
    lora_b: torch.Tensor
    """(S, out, R)."""
    mid_scale: torch.Tensor
    """(S, R)."""
    out_scale: torch.Tensor
    """(S, out)."""

    @property
    def num_slots(self) -> int:
        return int(self.scale.shape[0])

    @classmethod
    def stack(cls, adapters: Sequence[AdapterSlots | None], in_features: int, out_features: int,
              dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> SlotPool:
        """The pool of ``[base, *adapters]`` (``None``: an adapter that leaves this layer alone)."""
        for a in adapters:
            if a is not None:
                a.check(in_features, out_features)
        slots = [None, *adapters]
        n = len(slots)
        kw = {"dtype": dtype, "device": device}
        rank = max([1] + [a.rank for a in slots if a is not None])
        sizes = [a.blocks.shape[1] for a in slots if a is not None and a.blocks is not None]
        block = max(sizes) if sizes else 0
        for k in sizes:
            if block % k:
                raise ValueError(f"input block sizes {sorted(set(sizes))} do not divide the largest, {block}")
        scale, shift = torch.ones(n, out_features, **kw), torch.zeros(n, out_features, **kw)
        lora_a, lora_b = torch.zeros(n, rank, in_features, **kw), torch.zeros(n, out_features, rank, **kw)
        mid, out = torch.ones(n, rank, **kw), torch.zeros(n, out_features, **kw)
        blocks = None
        if block:
            eye = torch.eye(block, **kw)
            blocks = eye.repeat(n, in_features // block, 1, 1)
        for i, a in enumerate(slots):
            if a is None:
                continue
            if a.scale is not None:
                scale[i] = a.scale
            if a.shift is not None:
                shift[i] = a.shift
            if a.lora_a is not None and a.lora_b is not None:
                r = a.rank
                lora_a[i, :r], lora_b[i, :, :r] = a.lora_a, a.lora_b
                mid[i, :r] = a.mid_scale if a.mid_scale is not None else 1.0
                out[i] = a.out_scale if a.out_scale is not None else 1.0
            if a.blocks is not None and blocks is not None:
                blocks[i] = _widen(a.blocks.to(**kw), block)
        return cls(blocks, scale, shift, lora_a, lora_b, mid, out)


def _widen(blocks: torch.Tensor, size: int) -> torch.Tensor:
    """(n, k, k) blocks as (n*k/size, size, size), each holding size/k blocks on its diagonal."""
    n, k, _ = blocks.shape
    per = size // k
    out = torch.zeros(n // per, size, size, dtype=blocks.dtype, device=blocks.device)
    for j in range(per):
        out[:, j * k:(j + 1) * k, j * k:(j + 1) * k] = blocks[j::per]
    return out


def row_slots(seg_lens: Sequence[int], seg_slot: Sequence[int], device: torch.device | str | None = None
              ) -> torch.Tensor:
    """The slot of every row of a batch given as segments."""
    return torch.repeat_interleave(torch.tensor(list(seg_slot), dtype=torch.int64, device=device),
                                   torch.tensor(list(seg_lens), dtype=torch.int64, device=device))


class StackedSlots(Protocol):
    """Slots stacked by slot index (``SlotPool``, or a server layer's pool); read only
    (properties, so that a frozen dataclass such as ``SlotPool`` matches)."""

    @property
    def scale(self) -> torch.Tensor: ...
    @property
    def shift(self) -> torch.Tensor: ...
    @property
    def lora_a(self) -> torch.Tensor: ...
    @property
    def lora_b(self) -> torch.Tensor: ...
    @property
    def mid_scale(self) -> torch.Tensor: ...
    @property
    def out_scale(self) -> torch.Tensor: ...


def scaled_base(base: torch.Tensor, bias: torch.Tensor | None, pool: StackedSlots, slots: torch.Tensor
                ) -> torch.Tensor:
    """``s * base + b + t``, each row with its slot's ``s`` and ``t`` (``base``: ``(x T) W^T``)."""
    y = base * pool.scale[slots]
    if bias is not None:
        y = y + bias
    return y + pool.shift[slots]


def gathered_low_rank(x: torch.Tensor, pool: StackedSlots, slots: torch.Tensor) -> torch.Tensor:
    """``e * (((x A^T) * d) B^T)``, each row gathering its slot's factors."""
    h = torch.einsum("ri,rki->rk", x, pool.lora_a[slots]) * pool.mid_scale[slots]
    return torch.einsum("rk,rok->ro", h, pool.lora_b[slots]) * pool.out_scale[slots]


def pool_reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, pool: SlotPool,
                   slots: torch.Tensor) -> torch.Tensor:
    """The pooled computation in torch, row by row via gathers (``slots``: one per row)."""
    xin = x
    if pool.blocks is not None:
        b = pool.blocks[slots]  # (N, n, K, K)
        n, k = b.shape[1], b.shape[2]
        xin = torch.einsum("rnk,rnkc->rnc", x.reshape(-1, n, k), b).reshape(x.shape)
    y = scaled_base(torch.nn.functional.linear(xin, weight), bias, pool, slots)
    return y + gathered_low_rank(x, pool, slots)
