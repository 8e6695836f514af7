"""Answering SGLang's torch-native extend attention with a mask of Switchboard's (the CPU path).

Kinds that hook ``TorchNativeAttnBackend.forward_extend`` (the speculative tree
verify, the packed decisions) answer the batches they own the same way around
their own attention: refuse what a mask cannot serve, write the new tokens' K/V
to the pool as SGLang writes an extend's, hand the pool to the kind's attention,
and return the output in SGLang's layout. Every other batch stays SGLang's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

#: A kind's attention over the pool: ``(query [tokens, heads, dim], k_cache, v_cache) ->
#: [tokens, heads, v_dim]``.
PoolAttention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def answer_extend(backend: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: Any,
                  forward_batch: Any, save_kv_cache: bool, attend: PoolAttention, what: str,
                  option: str) -> torch.Tensor:
    """``forward_extend``'s result for a batch the kind owns, ``attend`` computing it.

    NOTE: sliding-window and cross attention are refused (``what`` and ``option``
    name the kind in the error): the kinds' masks are over the whole sequence."""
    if layer.is_cross_attention or (layer.sliding_window_size is not None and layer.sliding_window_size > -1):
        raise NotImplementedError(f"switchboard: {what} has no sliding-window or cross attention "
                                  f"(layer {layer.layer_id}); serve this model without {option}")
    from sglang.srt.mem_cache.memory_pool import KVWriteLoc

    if save_kv_cache and k is not None and v is not None:
        backend.token_to_kv_pool.set_kv_buffer(
            layer, KVWriteLoc(forward_batch.out_cache_loc, backend.swa_out_cache_loc), k, v)
    out = attend(q.view(-1, layer.tp_q_head_num, layer.qk_head_dim),
                 backend.token_to_kv_pool.get_key_buffer(layer.layer_id),
                 backend.token_to_kv_pool.get_value_buffer(layer.layer_id))
    return out.reshape(q.shape[0], layer.tp_q_head_num * layer.v_head_dim)
