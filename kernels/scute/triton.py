"""The pooled Scute computation as Triton kernels (GPU; on CPU under ``TRITON_INTERPRET=1``).

Three launches around the base GEMM, each row reading its own adapter's slots
(``slots``: one slot index per row, from the batch's segments):

1. ``_transform``: ``x T`` block by block (rows whose slot has no transform
   multiply by identity blocks, which is exact);
2. the base product ``(x T) W^T``: one dense GEMM for the whole batch (torch);
3. ``_shrink``: ``h = (x A^T) * d`` per row, rank ``R`` (the pool's);
4. ``_expand``: ``y = s * base + b + t + e * (h B^T)``, fused into one pass.

``pool_reference`` (``kernels.scute.pool``) is the oracle the tests compare with.
NOTE: ``triton.jit`` decides at decoration time whether to interpret: import
this module with ``TRITON_INTERPRET=1`` set to run it on CPU tensors.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.scute.pool import SlotPool


@triton.jit
def _transform(x_ptr, blocks_ptr, slots_ptr, out_ptr, n_blocks, in_features,
               K: tl.constexpr, BK: tl.constexpr):
    row = tl.program_id(0)
    blk = tl.program_id(1)
    slot = tl.load(slots_ptr + row)
    kk = tl.arange(0, BK)
    mask = kk < K
    x = tl.load(x_ptr + row * in_features + blk * K + kk, mask=mask, other=0.0)
    base = blocks_ptr + ((slot * n_blocks + blk) * K) * K
    t = tl.load(base + kk[:, None] * K + kk[None, :], mask=mask[:, None] & mask[None, :], other=0.0)
    y = tl.sum(x[:, None] * t, axis=0)
    tl.store(out_ptr + row * in_features + blk * K + kk, y, mask=mask)


@triton.jit
def _shrink(x_ptr, a_ptr, d_ptr, slots_ptr, h_ptr, in_features, rank,
            BR: tl.constexpr, BI: tl.constexpr):
    row = tl.program_id(0)
    slot = tl.load(slots_ptr + row)
    rr = tl.arange(0, BR)
    rmask = rr < rank
    acc = tl.zeros((BR,), dtype=tl.float32)
    for start in range(0, in_features, BI):
        ii = start + tl.arange(0, BI)
        imask = ii < in_features
        x = tl.load(x_ptr + row * in_features + ii, mask=imask, other=0.0)
        a = tl.load(a_ptr + (slot * rank + rr[:, None]) * in_features + ii[None, :],
                    mask=rmask[:, None] & imask[None, :], other=0.0)
        acc += tl.sum(a * x[None, :], axis=1)
    d = tl.load(d_ptr + slot * rank + rr, mask=rmask, other=0.0)
    tl.store(h_ptr + row * rank + rr, acc * d, mask=rmask)


@triton.jit
def _expand(base_ptr, h_ptr, b_ptr, s_ptr, t_ptr, e_ptr, bias_ptr, slots_ptr, y_ptr, out_features, rank,
            HAS_BIAS: tl.constexpr, BO: tl.constexpr, BR: tl.constexpr):
    row = tl.program_id(0)
    tile = tl.program_id(1)
    slot = tl.load(slots_ptr + row)
    oo = tile * BO + tl.arange(0, BO)
    omask = oo < out_features
    rr = tl.arange(0, BR)
    rmask = rr < rank
    h = tl.load(h_ptr + row * rank + rr, mask=rmask, other=0.0)
    b = tl.load(b_ptr + (slot * out_features + oo[:, None]) * rank + rr[None, :],
                mask=omask[:, None] & rmask[None, :], other=0.0)
    z = tl.sum(b * h[None, :], axis=1)
    y = tl.load(base_ptr + row * out_features + oo, mask=omask, other=0.0)
    y = y * tl.load(s_ptr + slot * out_features + oo, mask=omask, other=1.0)
    if HAS_BIAS:
        y = y + tl.load(bias_ptr + oo, mask=omask, other=0.0)
    y = y + tl.load(t_ptr + slot * out_features + oo, mask=omask, other=0.0)
    y = y + z * tl.load(e_ptr + slot * out_features + oo, mask=omask, other=0.0)
    tl.store(y_ptr + row * out_features + oo, y, mask=omask)


def scute_linear_triton(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, pool: SlotPool,
                        slots: torch.Tensor) -> torch.Tensor:
    """The pooled computation for a 2-D ``x`` (rows, in); ``slots``: int64 slot per row."""
    rows, in_features = x.shape
    out_features = weight.shape[0]
    x = x.contiguous()
    slots = slots.contiguous()
    xin = x
    if pool.blocks is not None and rows:
        n_blocks, k = pool.blocks.shape[1], pool.blocks.shape[2]
        xin = torch.empty_like(x)
        _transform[(rows, n_blocks)](x, pool.blocks.contiguous(), slots, xin, n_blocks, in_features,
                                     K=k, BK=triton.next_power_of_2(k))
    base = torch.nn.functional.linear(xin, weight).contiguous()
    rank = pool.lora_a.shape[1]
    h = torch.empty(rows, rank, dtype=torch.float32, device=x.device)
    y = torch.empty(rows, out_features, dtype=x.dtype, device=x.device)
    if not rows:
        return y
    br = triton.next_power_of_2(rank)
    _shrink[(rows,)](x, pool.lora_a.contiguous(), pool.mid_scale.contiguous(), slots, h, in_features, rank,
                     BR=br, BI=min(128, triton.next_power_of_2(in_features)))
    bo = min(128, triton.next_power_of_2(out_features))
    _expand[(rows, triton.cdiv(out_features, bo))](
        base, h, pool.lora_b.contiguous(), pool.scale.contiguous(), pool.shift.contiguous(),
        pool.out_scale.contiguous(), bias if bias is not None else base, slots, y, out_features, rank,
        HAS_BIAS=bias is not None, BO=bo, BR=br)
    return y
