"""The two conv kernels of ``sglang.kernels.ops.mamba`` in torch (see the package docstring).

Layouts (SGLang's): a varlen prefill's ``x`` is ``(dim, tokens)`` with the
sequences back to back (``query_start_loc``: ``[0, l_0, l_0 + l_1, ...]``), or
``(batch, dim, seqlen)`` without it; a state is ``(dim, state_len)`` with
``state_len >= width - 1``, the last inputs in time order, in a pool
``conv_states[slot]``. Each sequence's outputs are
``bias + sum_k weight[:, k] * window[:, t + k]`` over the window of the state's
last ``width - 1`` inputs followed by the sequence (zeros for a sequence
without an initial state), optionally SiLU; its slot then holds the last
``state_len`` inputs of the state followed by the sequence.

NOTE: the sum runs as the Triton kernels run it: from the bias (or 0), adding
``x * w`` for ``k = 0 .. width - 1`` in float32, one rounding per step, so the
outputs equal theirs bit for bit in float32 (with SiLU, a few ulp apart: the
exp differs); states are stored in the pool's dtype and outputs in the input's.
NOTE: in place, as the compiled kernels are: outputs overwrite ``x`` and the
used slots of the pool; a sequence whose slot is ``pad_slot_id`` is skipped
(its part of ``x`` is left as it was).
"""

from __future__ import annotations

import torch


def _window_conv(window: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, length: int,
                 silu_activation: bool) -> torch.Tensor:
    """Outputs of the last ``length`` positions of ``window`` (``(dim, width - 1 + length)``), float32."""
    width = weight.shape[1]
    w = weight.float()
    acc = bias.float()[:, None].expand(-1, length) if bias is not None else window.new_zeros(
        window.shape[0], length, dtype=torch.float32)
    for k in range(width):
        acc = acc + window[:, k:k + length].float() * w[:, k:k + 1]
    # NOTE: SiLU as the Triton kernels write it (not torch's x * sigmoid(x), one ulp apart)
    return acc / (1 + torch.exp(-acc)) if silu_activation else acc


def _run(seq: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, state: torch.Tensor | None,
         silu_activation: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence ``(dim, L)`` from ``state`` (``(dim, state_len)`` or ``None``: zeros): outputs in
    ``seq``'s dtype and the window (state then sequence) the next state is cut from."""
    keep = weight.shape[1] - 1
    head = state.to(torch.float32) if state is not None else seq.new_zeros(seq.shape[0], keep, dtype=torch.float32)
    window = torch.cat([head, seq.to(torch.float32)], dim=1)
    out = _window_conv(window[:, window.shape[1] - keep - seq.shape[1]:], weight, bias, seq.shape[1],
                       silu_activation)
    return out.to(seq.dtype), window


def _slots(indices: torch.Tensor | None, n: int) -> list[int]:
    return list(range(n)) if indices is None else [int(i) for i in indices.tolist()]


def causal_conv1d_fwd(x: torch.Tensor, weight: torch.Tensor, bias_: torch.Tensor | None,
                      conv_states: torch.Tensor | None, query_start_loc: torch.Tensor | None,
                      cache_indices: torch.Tensor | None, has_initial_state: torch.Tensor | None,
                      silu_activation: bool, pad_slot_id: int) -> None:
    """Prefill (SGLang's ``causal_conv1d_fwd``): outputs into ``x``, end states into ``conv_states``."""
    spans: list[tuple[int, int | None]]
    if query_start_loc is None:
        spans = [(b, None) for b in range(x.shape[0])]
    else:
        cu = [int(v) for v in query_start_loc.tolist()]
        spans = [(a, b) for a, b in zip(cu, cu[1:])]
    slots = _slots(cache_indices, len(spans))
    starts = [bool(h) for h in has_initial_state.tolist()] if has_initial_state is not None else [False] * len(spans)
    state_len = conv_states.shape[-1] if conv_states is not None else 0
    for i, (a, b) in enumerate(spans):
        slot = slots[i]
        if slot == pad_slot_id:
            continue
        seq = x[a] if b is None else x[:, a:b]
        if seq.shape[-1] == 0:
            continue
        state = conv_states[slot] if conv_states is not None and starts[i] else None
        if conv_states is not None and state is None:
            state = conv_states.new_zeros(conv_states.shape[1:])
        out, window = _run(seq, weight, bias_, state, silu_activation)
        if conv_states is not None:
            conv_states[slot] = window[:, -state_len:].to(conv_states.dtype)
        seq.copy_(out)


def causal_conv1d_update(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor,
                         bias_: torch.Tensor | None, silu_activation: bool, cache_seqlens: torch.Tensor | None,
                         conv_state_indices: torch.Tensor | None, pad_slot_id: int) -> None:
    """Decode (SGLang's ``causal_conv1d_update``): ``x`` is ``(batch, dim, seqlen)``; outputs into
    ``x``, each row's state in ``conv_state`` moved on by its ``seqlen`` inputs."""
    if cache_seqlens is not None:
        # NOTE: a circular state buffer; no SGLang model on the CPU path passes one
        raise NotImplementedError("switchboard's CPU causal_conv1d_update has no circular-buffer mode "
                                  "(cache_seqlens); refusing rather than computing something else")
    state_len = conv_state.shape[-1]
    for b, slot in enumerate(_slots(conv_state_indices, x.shape[0])):
        if slot == pad_slot_id:
            continue
        out, window = _run(x[b], weight, bias_, conv_state[slot], silu_activation)
        conv_state[slot] = window[:, -state_len:].to(conv_state.dtype)
        x[b].copy_(out)
