"""The segment mask in SGLang's torch-native extend attention (the CPU path).

A batch with packed rows (filed by request id when the batch was built:
``layout.packed_rows``) is answered here; every other batch goes to SGLang. Per row: the keys are the
row's cached prefix plus its new tokens (written to the KV pool first, as
SGLang writes an extend's); a packed row's queries see the context and their
own question only (``kernels.segment_mask.segment_attention``: the context
causal in one pass, then each question over the context and itself), any other
row's are causal, as SGLang's own. Rotary positions were rewritten with the batch.

NOTE: causality is by packed order (a query never sees a later token), the
positions are the question's own (continuing from the context's end): the two
together make each question's output equal ``context + question`` computed
alone. Sliding-window and cross attention are refused for packed batches.
"""

from __future__ import annotations

from typing import Any

import torch

from kernels.segment_mask import segment_attention
from server.sglang.decisions.layout import PackedRow, packed_rows
from server.sglang.torch_native import answer_extend


def packed_extend_attention(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            req_to_token: torch.Tensor, req_pool_indices: torch.Tensor,
                            prefix_lens: list[int], extend_lens: list[int], rows: dict[int, PackedRow],
                            scaling: float | None) -> torch.Tensor:
    """Attention of an extend batch's queries (``[tokens, heads, dim]``): packed rows
    under the segment mask, the others causal (see module docs)."""
    out = torch.empty((query.shape[0], query.shape[1], v_cache.shape[-1]), dtype=query.dtype, device=query.device)
    start = 0
    for i, (prefix, n) in enumerate(zip(prefix_lens, extend_lens, strict=True)):
        slots = req_to_token[req_pool_indices[i], : prefix + n]
        row = rows.get(i)
        # NOTE: a row that is not packed is all context: plain causal attention
        segments = (torch.zeros(prefix + n, dtype=torch.long) if row is None else row.layout.segment_ids())
        out[start:start + n] = segment_attention(query[start:start + n], k_cache[slots].to(query.dtype),
                                                 v_cache[slots].to(query.dtype), segments.to(query.device), scaling)
        start += n
    return out


def forward_extend_packed(original: Any, backend: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                          layer: Any, forward_batch: Any, save_kv_cache: bool = True, **kwargs: Any) -> torch.Tensor:
    """``forward_extend``, answering batches that hold packed rows."""
    if forward_batch.forward_mode.is_target_verify():
        return original(backend, q, k, v, layer, forward_batch, save_kv_cache, **kwargs)
    rows = packed_rows(forward_batch.rids)
    if not rows:
        return original(backend, q, k, v, layer, forward_batch, save_kv_cache, **kwargs)
    return answer_extend(
        backend, q, k, v, layer, forward_batch, save_kv_cache,
        lambda query, k_cache, v_cache: packed_extend_attention(
            query, k_cache, v_cache, backend.req_to_token_pool.req_to_token, forward_batch.req_pool_indices,
            forward_batch.extend_prefix_lens_cpu, forward_batch.extend_seq_lens_cpu, rows, layer.scaling),
        "packed decisions", "+decisions=flide")
