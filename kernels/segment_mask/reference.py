"""Segment masks and masked attention in torch: the CPU path and the GPU path's oracle.

Every function takes and returns tensors on the input's device; nothing here
needs a GPU. See the package docstring for the layout and the mask rule.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.nn.functional import scaled_dot_product_attention

#: The segment id of the shared context; question ``s`` has id ``s >= 1``.
CONTEXT = 0


def check_segment_ids(segment_ids: torch.Tensor) -> None:
    """Raise ``ValueError`` unless ``segment_ids`` is a 1-D integer tensor of ids
    ``>= 0`` that never decrease (context first, each question contiguous, in order)."""
    if segment_ids.dim() != 1:
        raise ValueError(f"segment ids must be a 1-D tensor, got shape {tuple(segment_ids.shape)}")
    if segment_ids.dtype.is_floating_point or segment_ids.dtype.is_complex or segment_ids.dtype == torch.bool:
        raise ValueError(f"segment ids must be integers, got {segment_ids.dtype}")
    if segment_ids.numel() == 0:
        return
    if int(segment_ids.min()) < 0:
        at = int(torch.nonzero(segment_ids < 0)[0])
        raise ValueError(f"segment ids must be >= 0 (0 = context, s >= 1 = question s): "
                         f"token {at} has {int(segment_ids[at])}")
    drops = torch.nonzero(segment_ids[1:] < segment_ids[:-1])
    if drops.numel():
        at = int(drops[0]) + 1
        raise ValueError(f"segment ids must not decrease (the context first, then each question's tokens "
                         f"contiguous, questions in order): token {at} has {int(segment_ids[at])} after "
                         f"{int(segment_ids[at - 1])}")


def packed_segment_ids(context_len: int, question_lens: Sequence[int],
                       device: torch.device | str | None = None) -> torch.Tensor:
    """Segment ids of ``context_len`` context tokens followed by questions
    ``1..len(question_lens)`` of the given lengths (a length 0 leaves its id absent)."""
    if context_len < 0 or any(n < 0 for n in question_lens):
        raise ValueError(f"lengths must be >= 0, got context {context_len}, questions {list(question_lens)}")
    ids = torch.tensor([CONTEXT, *range(1, len(question_lens) + 1)], dtype=torch.long, device=device)
    counts = torch.tensor([context_len, *question_lens], dtype=torch.long, device=device)
    return torch.repeat_interleave(ids, counts)


def _num_queries(n: int, num_queries: int | None) -> int:
    if num_queries is None:
        return n
    if not 0 <= num_queries <= n:
        raise ValueError(f"num_queries must be in [0, {n}] (the sequence's length), got {num_queries}")
    return num_queries


def segment_mask(segment_ids: torch.Tensor, num_queries: int | None = None) -> torch.Tensor:
    """``allowed[i, j]`` (bool, ``[num_queries, n]``) for query ``i`` = packed token
    ``n - num_queries + i`` and key ``j``: ``j`` comes no later than the query and
    is either a context token or in the query's own question.

    ``num_queries`` (default ``n``): the last tokens, the ones computed now; the
    first ``n - num_queries`` are keys only (already in the KV cache).

    NOTE: every row allows its own token (``j = i``: same segment, not later), so
    no softmax row is all ``-inf`` (SDPA would return NaN there)."""
    check_segment_ids(segment_ids)
    n = int(segment_ids.shape[0])
    nq = _num_queries(n, num_queries)
    rows = torch.arange(n - nq, n, device=segment_ids.device)
    cols = torch.arange(n, device=segment_ids.device)
    causal = cols[None, :] <= rows[:, None]
    keys = segment_ids[None, :]
    return causal & ((keys == CONTEXT) | (keys == segment_ids[rows][:, None]))


def packed_positions(segment_ids: torch.Tensor, start: int = 0) -> torch.Tensor:
    """Position ids (long) of a packed sequence: context token ``t`` gets
    ``start + t``; every question restarts at ``start + C`` (``C`` context tokens),
    the positions it has when it follows the context alone.

    NOTE: a token's offset in its question is its index minus its segment's first
    index, found by ``searchsorted`` because the ids never decrease."""
    check_segment_ids(segment_ids)
    ids = segment_ids.to(torch.long)
    index = torch.arange(ids.shape[0], device=ids.device)
    first = torch.searchsorted(ids, ids)  # first index of each token's segment
    context_len = int((ids == CONTEXT).sum())
    return start + index - first + (ids != CONTEXT).to(torch.long) * context_len


def readout_indices(segment_ids: torch.Tensor) -> torch.Tensor:
    """Index (long) of the last token of each non-empty question, in question
    order (``segment_ids[result]`` names the questions): where its answer's
    distribution is read."""
    check_segment_ids(segment_ids)
    n = int(segment_ids.shape[0])
    is_last = torch.ones(n, dtype=torch.bool, device=segment_ids.device)
    if n:
        is_last[:-1] = segment_ids[1:] != segment_ids[:-1]
    return torch.nonzero(is_last & (segment_ids != CONTEXT)).flatten()


def prefix_mask(prefix_len: int, inner: torch.Tensor) -> torch.Tensor:
    """``[d, prefix_len + d]``: ``d`` new tokens that all see the whole cached prefix,
    then each other as ``inner`` (``[d, d]`` bool) allows; a tree verify's mask
    (``inner[a, b]``: node ``b`` is ``a`` or one of its ancestors)."""
    if inner.dim() != 2 or inner.shape[0] != inner.shape[1]:
        raise ValueError(f"inner must be a square [d, d] mask, got shape {tuple(inner.shape)}")
    if prefix_len < 0:
        raise ValueError(f"prefix_len must be >= 0, got {prefix_len}")
    seen = torch.ones((inner.shape[0], prefix_len), dtype=torch.bool, device=inner.device)
    return torch.cat((seen, inner.to(torch.bool)), dim=1)


def masked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor,
                     scale: float | None = None) -> torch.Tensor:
    """Softmax attention ``[nq, Hq, Dv]`` of queries ``q`` (``[nq, Hq, D]``) over keys
    ``k`` (``[nk, Hk, D]``) and values ``v`` (``[nk, Hk, Dv]``) where ``allowed``
    (``[nq, nk]`` bool) is true; ``scale`` defaults to ``D ** -0.5``.

    Grouped-query attention when ``Hk < Hq`` (query head ``h`` reads kv head
    ``h // (Hq // Hk)``, as SGLang's layers). Computes in the input dtype (SDPA).

    NOTE: a row with no allowed key has no softmax (NaN); it is refused here, so
    callers build masks that always allow the diagonal or some prefix key."""
    if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
        raise ValueError(f"q, k, v must be [tokens, heads, dim], got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    nq, hq, _ = q.shape
    nk, hk, _ = k.shape
    if v.shape[:2] != k.shape[:2] or q.shape[2] != k.shape[2]:
        raise ValueError(f"k and v must match in tokens and heads, q and k in dim: q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}")
    if hk == 0 or hq % hk:
        raise ValueError(f"query heads ({hq}) must be a multiple of kv heads ({hk})")
    if tuple(allowed.shape) != (nq, nk) or allowed.dtype != torch.bool:
        raise ValueError(f"allowed must be a bool [{nq}, {nk}] mask, got {allowed.dtype} {tuple(allowed.shape)}")
    if nq == 0:
        return q.new_empty((0, hq, v.shape[2]))
    if not bool(allowed.any(dim=1).all()):
        raise ValueError(f"query row {int(torch.nonzero(~allowed.any(dim=1))[0])} allows no key")
    out = scaled_dot_product_attention(q.movedim(0, 1).unsqueeze(0), k.movedim(0, 1).unsqueeze(0),
                                       v.movedim(0, 1).unsqueeze(0), attn_mask=allowed, scale=scale,
                                       enable_gqa=hq != hk)
    return out.squeeze(0).movedim(0, 1)


def causal_mask(qo_len: int, kv_len: int, device: torch.device | str | None = None) -> torch.Tensor:
    """``[qo_len, kv_len]``: the last ``qo_len`` of ``kv_len`` tokens, causal (FlashInfer's
    ``causal=True`` when ``kv_len > qo_len``: the earlier tokens are a cached prefix)."""
    if not 0 <= qo_len <= kv_len:
        raise ValueError(f"need 0 <= qo_len <= kv_len, got {qo_len}, {kv_len}")
    return prefix_mask(kv_len - qo_len, torch.ones((qo_len, qo_len), dtype=torch.bool, device=device).tril())


def ragged_masked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, qo_lens: Sequence[int],
                            kv_lens: Sequence[int], masks: Sequence[torch.Tensor] | None = None,
                            scale: float | None = None) -> torch.Tensor:
    """A batch in the ragged layout of FlashInfer's ``BatchPrefillWithRaggedKVCacheWrapper``:
    request ``r``'s ``qo_lens[r]`` queries and ``kv_lens[r]`` keys follow the earlier
    requests' in ``q`` and ``k``/``v``; ``masks[r]`` (``[qo_lens[r], kv_lens[r]]``)
    or, without masks, ``causal_mask``. The torch twin of ``flashinfer.RaggedPrefill``."""
    if len(qo_lens) != len(kv_lens) or (masks is not None and len(masks) != len(qo_lens)):
        raise ValueError(f"{len(qo_lens)} qo lengths, {len(kv_lens)} kv lengths, "
                         f"{'no' if masks is None else len(masks)} masks")
    if sum(qo_lens) != q.shape[0] or sum(kv_lens) != k.shape[0]:
        raise ValueError(f"lengths cover {sum(qo_lens)} queries / {sum(kv_lens)} keys, "
                         f"tensors hold {q.shape[0]} / {k.shape[0]}")
    outs, qo, kv = [], 0, 0
    for r, (nq, nk) in enumerate(zip(qo_lens, kv_lens)):
        allowed = causal_mask(nq, nk, q.device) if masks is None else masks[r]
        outs.append(masked_attention(q[qo:qo + nq], k[kv:kv + nk], v[kv:kv + nk], allowed, scale))
        qo, kv = qo + nq, kv + nk
    return torch.cat(outs) if outs else q.new_empty((0, q.shape[1], v.shape[2]))


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None, causal: bool = False,
          mask: torch.Tensor | None = None) -> torch.Tensor:
    """SDPA over ``[tokens, heads, dim]`` tensors (GQA from the head counts)."""
    out = scaled_dot_product_attention(q.movedim(0, 1).unsqueeze(0), k.movedim(0, 1).unsqueeze(0),
                                       v.movedim(0, 1).unsqueeze(0), attn_mask=mask, is_causal=causal,
                                       scale=scale, enable_gqa=q.shape[1] != k.shape[1])
    return out.squeeze(0).movedim(0, 1)


def segment_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segment_ids: torch.Tensor,
                      scale: float | None = None) -> torch.Tensor:
    """``masked_attention(q, k, v, segment_mask(segment_ids, len(q)), scale)`` without
    the dense ``[nq, n]`` mask: the context's queries in one causal pass over the
    context, then the questions' (``_questions``; the CPU path: the dense mask's
    math kernel costs ``O(n^2)`` memory per head and layer).

    NOTE: the same sums over the same keys as the dense form, block by block;
    only the order of floating-point reductions may differ (~1e-7 in float32)."""
    check_segment_ids(segment_ids)
    n, nq = int(segment_ids.shape[0]), int(q.shape[0])
    if k.shape[0] != n or not 0 <= nq <= n:
        raise ValueError(f"{n} segment ids for {k.shape[0]} keys and {nq} queries")
    out = q.new_empty((nq, q.shape[1], v.shape[2]))
    start = n - nq  # the first query's position in the sequence
    context = int((segment_ids == CONTEXT).sum())
    if start < context:  # some context tokens are queries
        rows = slice(0, context - start)
        if start == 0:
            out[rows] = _sdpa(q[rows], k[:context], v[:context], scale, causal=True)
        else:
            out[rows] = masked_attention(q[rows], k[:context], v[:context], causal_mask(context - start, context,
                                                                                           q.device), scale)
    if start <= context < n and q.device.type == "cpu" and q.dtype in _FLASH_DTYPES:
        out[context - start:] = _questions(q[context - start:], k, v, segment_ids[context:], context, scale)
        return out
    ids = segment_ids[context:]
    for s in torch.unique_consecutive(ids).tolist():
        own = torch.nonzero(ids == s).flatten() + context
        first, last = int(own[0]), int(own[-1]) + 1
        lo = max(first, start)
        if lo >= last:
            continue
        keys = torch.cat((torch.arange(context, device=q.device), own))
        allowed = prefix_mask(context, torch.ones((last - first, last - first), dtype=torch.bool,
                                                  device=q.device).tril())[lo - first:]
        out[lo - start:last - start] = _sdpa(q[lo - start:last - start], k[keys], v[keys], scale, mask=allowed)
    return out


#: PyTorch's CPU flash-attention kernel: ``(output, logsumexp)`` (``[batch, heads, len, dim]``, ``[batch, heads,
#: len]``); bottom-right causal only when queries and keys are equally many.
_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_FLASH_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def _questions(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ids: torch.Tensor, context: int,
               scale: float | None) -> torch.Tensor:
    """Every question token's attention (queries ``q``: all of them, in order; their ids ``ids``) as two
    unmasked passes merged by their log-sum-exp: all questions over the context (every key visible), and
    each question over itself (causal; the questions padded into one batch, padding keys after the last
    real one, so no real query sees them).

    NOTE: softmax over the union of two key sets = the two softmaxes weighted by exp(lse_part - lse_all):
    the dense mask's sums, split in two (the context part is one pass instead of one per question)."""
    heads = q.shape[1]
    _, counts = torch.unique_consecutive(ids, return_counts=True)
    width = int(counts.max())
    slot = torch.arange(width, device=q.device)
    real = slot[None, :] < counts[:, None]
    at = torch.where(real, (torch.cumsum(counts, 0) - counts)[:, None] + slot[None, :], 0)

    def batch(x: torch.Tensor) -> torch.Tensor:  # [tokens, h, d] -> [questions, heads, width, d]
        return x[at].repeat_interleave(heads // x.shape[1], 2).movedim(2, 1)

    own, own_lse = _flash(batch(q), batch(k[context:]), batch(v[context:]), is_causal=True, scale=scale)
    own, own_lse = own.movedim(1, 2)[real].float(), own_lse.movedim(1, 2)[real]  # [tokens, heads, (dim)]
    if context == 0:
        return own.to(q.dtype)
    kc, vc = (x[:context].repeat_interleave(heads // x.shape[1], 1).movedim(0, 1)[None] for x in (k, v))
    shared, shared_lse = _flash(q.movedim(0, 1)[None], kc, vc, scale=scale)
    shared, shared_lse = shared[0].movedim(0, 1).float(), shared_lse[0].movedim(0, 1)
    total = torch.logaddexp(own_lse, shared_lse)
    merged = own * torch.exp(own_lse - total)[..., None] + shared * torch.exp(shared_lse - total)[..., None]
    return merged.to(q.dtype)
