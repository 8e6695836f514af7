"""The generalized adapter computation in torch: the CPU path and the kernels' oracle."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from kernels.scute.slots import AdapterSlots


def transform_input(x: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
    """``x T`` for a block-diagonal ``T`` given as (n, k, k) blocks."""
    n, k, _ = blocks.shape
    lead = x.shape[:-1]
    return torch.einsum("...nk,nkc->...nc", x.reshape(*lead, n, k), blocks).reshape(*lead, n * k)


def low_rank(x: torch.Tensor, slots: AdapterSlots) -> torch.Tensor | None:
    """``e * (((x A^T) * d) B^T)``, or ``None`` without a low-rank term."""
    if slots.lora_a is None or slots.lora_b is None:
        return None
    h = F.linear(x, slots.lora_a)
    if slots.mid_scale is not None:
        h = h * slots.mid_scale
    z = F.linear(h, slots.lora_b)
    return z * slots.out_scale if slots.out_scale is not None else z


def scute_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                 slots: AdapterSlots | None) -> torch.Tensor:
    """``s * ((x T) W^T) + b + t + e * (((x A^T) * d) B^T)`` for one adapter
    (``None``: the base layer)."""
    if slots is None:
        return F.linear(x, weight, bias)
    y = F.linear(transform_input(x, slots.blocks) if slots.blocks is not None else x, weight)
    if slots.scale is not None:
        y = y * slots.scale
    if bias is not None:
        y = y + bias
    if slots.shift is not None:
        y = y + slots.shift
    z = low_rank(x, slots)
    return y + z if z is not None else y


def scute_linear_segments(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                          adapters: Sequence[AdapterSlots | None], seg_lens: Sequence[int],
                          seg_adapter: Sequence[int]) -> torch.Tensor:
    """A batch whose rows come in segments, segment ``i`` of ``seg_lens[i]``
    rows using ``adapters[seg_adapter[i]]`` (``None``: the base layer).

    NOTE: the base GEMM runs once over every row that has no input transform;
    rows with one are transformed first and then share the same GEMM."""
    if sum(seg_lens) != x.shape[0]:
        raise ValueError(f"segments cover {sum(seg_lens)} rows, x has {x.shape[0]}")
    starts = [0]
    for n in seg_lens:
        starts.append(starts[-1] + n)
    xin = x
    for i, k in enumerate(seg_adapter):
        a = adapters[k]
        if a is not None and a.blocks is not None and seg_lens[i]:
            xin = xin.clone() if xin is x else xin
            xin[starts[i]:starts[i + 1]] = transform_input(x[starts[i]:starts[i + 1]], a.blocks)
    base = F.linear(xin, weight)
    out = torch.empty_like(base)
    for i, k in enumerate(seg_adapter):
        lo, hi = starts[i], starts[i + 1]
        if lo == hi:
            continue
        a = adapters[k]
        y = base[lo:hi]
        if a is not None and a.scale is not None:
            y = y * a.scale
        if bias is not None:
            y = y + bias
        if a is not None:
            if a.shift is not None:
                y = y + a.shift
            z = low_rank(x[lo:hi], a)
            if z is not None:
                y = y + z
        out[lo:hi] = y
    return out
