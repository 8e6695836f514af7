"""The speculative verify pass in SGLang's torch-native attention (the CPU path).

SGLang's ``TorchNativeAttnBackend.forward_extend`` has no verify branch: a
``TARGET_VERIFY`` batch carries no extend lengths (it would fail on them), and
a draft *tree* needs a mask that is not causal. This hook answers verify
batches itself and leaves every other batch to SGLang:

* each request ``i`` verifies ``d`` draft nodes (``spec_info.draft_token_num``)
  at the end of its ``seq_lens[i]`` cached tokens; their K/V are written at
  ``out_cache_loc`` first, as SGLang writes an extend's;
* node ``a`` attends to the whole cached prefix and to node ``b`` iff
  ``custom_mask[i][a, b]`` (``d x d`` per request, row-major: ``b`` is ``a``'s
  ancestor or ``a`` itself), the mask NGRAM builds on CPU (SGLang prefixes it
  with the context only on GPU, ``USE_FULL_MASK and not _is_cpu``).

NOTE: for a chain (``speculative_ngram_max_bfs_breadth=1`` and a full match)
the mask is lower-triangular and this is causal attention over ``prefix + d``
tokens; a shorter match hangs padding nodes off the root, which the mask keeps
apart. Sliding-window and cross attention are not handled here (refused at
launch: ``binding.py``).
"""

from __future__ import annotations

from typing import Any

import torch

from kernels.segment_mask import masked_attention, prefix_mask
from server.sglang.speculative.symbols import VERIFY_TARGET
from server.sglang.torch_native import answer_extend


def tree_verify_attention(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                          req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
                          tree_mask: torch.Tensor, draft: int, scaling: float | None) -> torch.Tensor:
    """Attention of ``bs * draft`` verify queries (``[tokens, heads, dim]``) over each
    request's cached prefix plus its draft nodes, masked by its tree (see module docs):
    ``kernels.segment_mask``'s attention under ``prefix_mask`` (GQA from the head counts)."""
    bs = int(seq_lens.shape[0])
    out = torch.empty((query.shape[0], query.shape[1], v_cache.shape[-1]), dtype=query.dtype, device=query.device)
    trees = tree_mask.reshape(bs, draft, draft).to(torch.bool)
    for i in range(bs):
        prefix = int(seq_lens[i])
        slots = req_to_token[req_pool_indices[i], : prefix + draft]
        rows = slice(i * draft, (i + 1) * draft)
        out[rows] = masked_attention(query[rows], k_cache[slots].to(query.dtype), v_cache[slots].to(query.dtype),
                                     prefix_mask(prefix, trees[i]), scaling)
    return out


def forward_extend_with_verify(original: Any, backend: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                               layer: Any, forward_batch: Any, save_kv_cache: bool = True) -> torch.Tensor:
    """``forward_extend``, answering ``TARGET_VERIFY`` batches with the tree mask."""
    if not forward_batch.forward_mode.is_target_verify():
        return original(backend, q, k, v, layer, forward_batch, save_kv_cache)
    spec = forward_batch.spec_info
    return answer_extend(
        backend, q, k, v, layer, forward_batch, save_kv_cache,
        lambda query, k_cache, v_cache: tree_verify_attention(
            query, k_cache, v_cache, backend.req_to_token_pool.req_to_token, forward_batch.req_pool_indices,
            forward_batch.seq_lens, spec.custom_mask, int(spec.draft_token_num), layer.scaling),
        "the CPU verify pass", "+speculative")


def install() -> None:
    """Hook SGLang's torch-native ``forward_extend`` (the scheduler process, before the model runs)."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(VERIFY_TARGET, forward_extend_with_verify, HookType.AROUND)
