"""Packed decision rows through LFM2's short convolution: every question restarts from the context's end.

SGLang runs an extend's short conv (``Lfm2ShortConv.forward``) straight through
each row: question ``i > 1`` of a packed row would start from the last inputs
of question ``i - 1``, not from the context. The attention's segment mask
(``attention.py``) cannot reach a convolution's state, so this AROUND hook
answers every extend batch that holds packed rows (``layout.packed_rows``) with
two calls of SGLang's own varlen kernel (``causal_conv1d_fn``), the same
arithmetic per token:

1. every ordinary row whole, and every packed row's uncached context
   (``C - prefix`` tokens), each from its own slot (or zeros): the kernel
   leaves each segment's end state in the slot, in place;
2. every question of every packed row, each from a scratch copy of its
   row's context-end state (built from the slot before step 1 and the
   context's inputs, in the inputs' dtype, as the kernel reads a slot).

Each question's output then equals ``context + question`` run alone from the
same cached prefix, bit for bit. Batches without packed rows, and decode,
verify and idle batches, go to SGLang untouched.

NOTE: after the pass a packed row's slot holds the state at the context's end
(step 1 wrote it; with ``prefix == C`` it is the cached state, untouched;
step 2 writes only scratch). The tree's checkpoint of a packed request is
clamped to its context (``admission.py``), and under ``no_buffer`` the mamba
cache files the live slot at the end of the inserted key: so it donates the
right state. Keep the two together.

NOTE: only ``Lfm2ShortConv`` (LFM2, and LFM2-VL, which wraps it) is hooked.
SGLang 0.5.23's ``lfm2_moe.Lfm2MoeShortConv`` has its own forward (and a fused
prefill kernel) and is not hooked: a packed batch on LFM2-MoE would run its
conv straight through, so packing must not be served for it.
"""

from __future__ import annotations

from typing import Any

import torch

from server.sglang.decisions.layout import PackedRow, packed_rows
from server.sglang.decisions.symbols import CONV_TARGET


def _cu(lens: list[int], device: torch.device) -> torch.Tensor:
    """cu-seqlens ``[0, l_0, l_0 + l_1, ...]`` (int32, as SGLang builds ``query_start_loc``)."""
    return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=device)


def _ranges(spans: list[tuple[int, int]], device: torch.device) -> torch.Tensor:
    return torch.cat([torch.arange(a, b, device=device) for a, b in spans])


def _check(rows: dict[int, PackedRow], extend_lens: list[int] | None, has_prefix: list[bool],
           tokens: int) -> list[int]:
    """The extend's row lengths; ``RuntimeError`` when a packed row does not match them."""
    if extend_lens is None or len(extend_lens) != len(has_prefix) or sum(extend_lens) != tokens:
        raise RuntimeError(f"switchboard: a packed batch's short conv got extend lengths {extend_lens} for "
                           f"{len(has_prefix)} conv rows and {tokens} tokens; refusing to run it")
    for r, row in rows.items():
        c, qs, p = row.layout.context, row.layout.questions, row.prefix
        n = extend_lens[r] if r < len(extend_lens) else None
        if n is None or p > c or (c - p) + sum(qs) != n or has_prefix[r] != (p > 0):
            raise RuntimeError(
                f"switchboard: packed row {r} (context {c}, questions {list(qs)}, cached prefix {p}) does not "
                f"match its extend ({n} tokens, initial state {has_prefix[r] if n is not None else None}); "
                "refusing to run its short conv straight through")
    return extend_lens


def restarted_conv(bx_t: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, meta: Any,
                   rows: dict[int, PackedRow], extend_lens: list[int] | None) -> torch.Tensor:
    """The extend's conv output (``[dim, tokens]``, like ``bx_t``), packed rows' questions restarted
    from their context's end (see module docs). ``meta``: SGLang's ``ShortConvMetadata`` (its
    ``layer_cache.conv[0]`` pool ``[slots, dim, K-1]`` is updated in place, as SGLang's pass would)."""
    conv_state = meta.layer_cache.conv[0]
    slots = meta.cache_indices.tolist()
    lens = _check(rows, extend_lens, [bool(h) for h in meta.has_initial_state.tolist()], bx_t.shape[1])
    from sglang.srt.layers.attention.mamba.causal_conv1d import causal_conv1d_fn

    dev, keep = bx_t.device, weight.shape[1] - 1
    starts = [0, *torch.tensor(lens).cumsum(0).tolist()]
    out = torch.empty_like(bx_t)
    # 1. Ordinary rows whole, packed rows' uncached context, with their own slots.
    seg1: list[tuple[int, int]] = []
    row1: list[int] = []
    ctx_end: dict[int, torch.Tensor] = {}
    for r, n in enumerate(lens):
        s = starts[r]
        row = rows.get(r)
        if row is None:
            seg1.append((s, s + n))
            row1.append(r)
            continue
        uncached = row.layout.context - row.prefix
        # NOTE: read before step 1 overwrites the slot; cast to the inputs' dtype as the kernel
        # reads it, so the questions do not depend on the pool's dtype.
        init = (conv_state[slots[r]].to(bx_t.dtype) if row.prefix > 0
                else bx_t.new_zeros(bx_t.shape[0], keep))
        ctx_end[r] = torch.cat([init, bx_t[:, s:s + uncached]], dim=1)[:, -keep:]
        if uncached > 0:  # prefix == context: the slot already holds the context-end state
            seg1.append((s, s + uncached))
            row1.append(r)
    if seg1:
        idx = _ranges(seg1, dev)
        which = torch.tensor(row1, device=meta.cache_indices.device)
        out[:, idx] = causal_conv1d_fn(
            bx_t[:, idx].contiguous(), weight, bias, query_start_loc=_cu([b - a for a, b in seg1], dev),
            cache_indices=meta.cache_indices[which], has_initial_state=meta.has_initial_state[which],
            conv_states=conv_state, activation=None)
    # 2. Every question from a scratch copy of its row's context-end state (the pool is not touched).
    seg2: list[tuple[int, int]] = []
    scratch: list[torch.Tensor] = []
    for r, row in sorted(rows.items()):
        q0 = starts[r] + row.layout.context - row.prefix
        for q in row.layout.questions:
            seg2.append((q0, q0 + q))
            scratch.append(ctx_end[r])
            q0 += q
    if seg2:
        idx = _ranges(seg2, dev)
        out[:, idx] = causal_conv1d_fn(
            bx_t[:, idx].contiguous(), weight, bias, query_start_loc=_cu([b - a for a, b in seg2], dev),
            cache_indices=torch.arange(len(seg2), dtype=meta.cache_indices.dtype, device=dev),
            has_initial_state=torch.ones(len(seg2), dtype=torch.bool, device=dev),
            conv_states=torch.stack(scratch).contiguous(), activation=None)
    return out


def forward_with_restart(original: Any, conv: Any, hidden_states: torch.Tensor, forward_batch: Any) -> torch.Tensor:
    """``Lfm2ShortConv.forward``, restarting packed rows' questions; SGLang's own otherwise."""
    mode = forward_batch.forward_mode
    if not mode.is_extend() or mode.is_target_verify():
        return original(conv, hidden_states, forward_batch)
    rows = packed_rows(forward_batch.rids)
    if not rows:
        return original(conv, hidden_states, forward_batch)
    from sglang.srt.model_executor.forward_context import get_attn_backend

    # As SGLang's forward (lfm2.py), but the varlen conv restarts packed questions.
    meta = get_attn_backend().conv_state_metadata(conv.layer_idx, forward_batch)
    proj, _ = conv.in_proj(hidden_states)
    b_gate, c_gate, x = proj.chunk(3, dim=-1)
    conv_out = restarted_conv((b_gate * x).transpose(0, 1).contiguous(), conv.conv_weight, conv.conv_bias, meta,
                              rows, forward_batch.extend_seq_lens_cpu)
    output, _ = conv.out_proj(c_gate * conv_out.transpose(0, 1))
    return output


def install() -> None:
    """Hook SGLang's ``Lfm2ShortConv.forward`` (the scheduler process, before the model runs)."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(CONV_TARGET, forward_with_restart, HookType.AROUND)
