"""Pure-torch versions of the ``sgl_kernel`` ``*_cpu`` ops SGLang's speculative decoding calls on CPU.

With ``SGLANG_USE_CPU_ENGINE=1``, SGLang 0.5.23 imports six speculative kernels from ``sgl_kernel`` at module
level (``sglang.kernels.ops.speculative.cache_locs``, ``.eagle`` and ``.spec_tree``). The strict stand-in
(``server/sglang/launch/stub.py``) provides them as kernels that raise when called; the functions here replace
those stand-ins only when speculative decoding is switched on (NGRAM calls ``assign_extend_cache_locs_cpu``,
``verify_tree_greedy_cpu`` and ``fill_accept_out_cache_loc_cpu``; EAGLE the other three as well).

Each takes SGLang's call-site arguments in the same order (``verify_tree_greedy_cpu`` is called by keyword, with
the ``retrive_*`` spelling), writes its outputs in place and returns ``None``, as sgl-kernel's C++ CPU kernels
(``sgl-kernel/csrc/cpu/spec.cpp``) do; the semantics are those kernels' and SGLang's Triton/CUDA twins'. Index
inputs may be int32 or int64; outputs keep their dtype. Outputs must be contiguous (written through ``view``).
As in the kernels, only well-formed inputs are meant: nothing is bounds-checked beyond torch's indexing.

:data:`SPECULATIVE_OPS` adds the one op NGRAM needs from the *submodule* ``sgl_kernel.speculative``
(``reconstruct_indices_from_tree_mask``, imported at module level by
``sglang.kernels.ops.speculative.reconstruct_tree`` on CPU).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import torch

#: ``TreeMaskMode`` values (``sglang.kernels.ops.speculative.spec_tree``).
FULL_MASK, QLEN_ONLY, QLEN_ONLY_BITPACKING = 0, 1, 2


def _flat(out: torch.Tensor) -> torch.Tensor:
    """A 1-D view of an output tensor, so that writes land in it (raises if it cannot be viewed flat)."""
    return out.view(-1)


def assign_draft_cache_locs_contiguous_cpu(req_pool_indices: torch.Tensor, req_to_token: torch.Tensor,
                                           seq_lens: torch.Tensor, out_cache_loc: torch.Tensor, pool_len: int,
                                           topk: int, num_steps: int) -> None:
    """Copy each request's ``topk * num_steps`` reserved draft slots out of ``req_to_token``.

    ``req_pool_indices`` [bs], ``seq_lens`` [bs] (int32/int64), ``req_to_token`` [rows, pool_len] int32,
    ``pool_len`` its row length. Out: ``out_cache_loc`` [bs * topk * num_steps] (int64), where
    ``out_cache_loc[b * c + j] = req_to_token[req_pool_indices[b], seq_lens[b] + j]`` for ``j < c = topk * num_steps``.
    """
    copy_len = topk * num_steps
    if req_pool_indices.numel() == 0 or copy_len == 0:
        return
    start = req_pool_indices.reshape(-1).long() * pool_len + seq_lens.reshape(-1).long()
    index = start[:, None] + torch.arange(copy_len, device=start.device)
    out_cache_loc.copy_(req_to_token.reshape(-1)[index].reshape(out_cache_loc.shape))


def assign_extend_cache_locs_cpu(req_pool_indices: torch.Tensor, req_to_token: torch.Tensor,
                                 start_offset: torch.Tensor, end_offset: torch.Tensor, out_cache_loc: torch.Tensor,
                                 pool_len: int) -> None:
    """Gather each request's slots ``[start_offset[b], end_offset[b])`` of ``req_to_token``, packed back to back.

    ``req_pool_indices``, ``start_offset``, ``end_offset`` [bs] (int32/int64), ``req_to_token`` [rows, pool_len]
    (int32), ``pool_len`` its row length. Out: the first ``sum(end - start)`` entries of ``out_cache_loc`` (int64;
    request b's run starts at ``sum(end[:b] - start[:b])``); the rest is left as it was.
    """
    start = start_offset.reshape(-1).long()
    lengths = end_offset.reshape(-1).long() - start
    total = int(lengths.sum()) if lengths.numel() else 0
    if total == 0:
        return
    row_start = req_pool_indices.reshape(-1).long() * pool_len + start
    packed_start = torch.cumsum(lengths, 0) - lengths
    within = torch.arange(total, device=start.device) - packed_start.repeat_interleave(lengths)
    _flat(out_cache_loc)[:total] = req_to_token.reshape(-1)[row_start.repeat_interleave(lengths) + within]


def fill_accept_out_cache_loc_cpu(accept_index: torch.Tensor, out_cache_loc: torch.Tensor,
                                  accept_out_cache_loc: torch.Tensor) -> None:
    """Compact the accepted tokens' KV slots: ``out_cache_loc`` at the non-negative entries of ``accept_index``.

    ``accept_index`` [bs, width] (int32/int64, read flat in row-major order, ``-1`` = not accepted),
    ``out_cache_loc`` [bs * num_draft_tokens] (int64). Out: the first ``k`` entries of ``accept_out_cache_loc``
    (int64), ``k`` the number of entries ``> -1``, in order; the rest is left as it was.
    """
    flat = accept_index.reshape(-1).long()
    source = flat[flat > -1]
    if source.numel():
        _flat(accept_out_cache_loc)[:source.numel()] = out_cache_loc.reshape(-1)[source]


def fill_bonus_tokens_cpu(accept_tokens: torch.Tensor, accept_lens: torch.Tensor, bonus_tokens: torch.Tensor,
                          accept_stride: int) -> None:
    """Pick each request's last accepted token (the bonus token).

    ``accept_tokens`` [bs, accept_stride] (int32, read flat), ``accept_lens`` [bs] (int32, accepted tokens with the
    bonus, so ``>= 1``). Out: ``bonus_tokens[b] = accept_tokens.flat[b * accept_stride + accept_lens[b] - 1]`` (int32).
    """
    lengths = accept_lens.reshape(-1).long()
    batch = lengths.numel()
    if batch == 0:
        return
    index = torch.arange(batch, device=lengths.device) * accept_stride + lengths - 1
    _flat(bonus_tokens)[:batch] = accept_tokens.reshape(-1)[index]


def build_tree_kernel_efficient_cpu(parent_list: torch.Tensor, selected_index: torch.Tensor,
                                    verified_seq_len: torch.Tensor, tree_mask: torch.Tensor, positions: torch.Tensor,
                                    retrive_index: torch.Tensor, retrive_next_token: torch.Tensor,
                                    retrive_next_sibling: torch.Tensor, topk: int, depth: int, draft_token_num: int,
                                    tree_mask_mode: int) -> None:
    """Build EAGLE's draft tree (``n = draft_token_num`` nodes a request, node 0 the root) from the draft's picks.

    ``parent_list`` [bs, topk * (depth - 1) + 1] and ``selected_index`` [bs, n - 1] (int64; score-space ids as
    ``organize_draft_results`` gives them: node ``i >= 1`` is ``selected_index[b, i - 1]``, its parent the root if
    ``selected_index // topk == 0``, else the node whose id is ``parent_list[b, selected_index // topk]``),
    ``verified_seq_len`` [bs] (int64). Outputs, in place:

    * ``tree_mask`` (bool): row ``i`` marks node i's ancestors and itself (column 0, the root, always). QLEN_ONLY:
      ``[bs * n * n]``; FULL_MASK: row ``i`` of request b is ``n`` columns after ``seq_len[b]`` prefix columns,
      ``b``'s block at ``b * n * n + sum(seq_len[:b]) * n`` (the prefix columns are not written: callers fill True).
    * ``positions`` [bs * n] (int64): ``seq_len[b] + depth(i)``.
    * ``retrive_index`` [bs, n]: ``b * n + i``.
    * ``retrive_next_token`` / ``retrive_next_sibling`` [bs, n]: first child / next sibling (children in ascending
      order); only linked entries are written, callers pre-fill ``-1``.

    ``depth`` only sizes ``parent_list``. QLEN_ONLY_BITPACKING is refused, as by the C++ CPU kernel. A node whose
    parent is not among the picks (an invalid tree) gets no link, and its mask/position walk stops there.
    """
    mode = int(tree_mask_mode)
    if mode not in (FULL_MASK, QLEN_ONLY):
        raise NotImplementedError(f"build_tree_kernel_efficient_cpu: tree_mask_mode {mode} is not supported on CPU")
    n = draft_token_num
    batch = verified_seq_len.numel()
    if batch == 0:
        return
    seq_lens = [int(x) for x in verified_seq_len.reshape(-1).tolist()]
    picks = selected_index.reshape(batch, n - 1).tolist()
    parents = parent_list.reshape(batch, parent_list.numel() // batch).tolist()  # [bs, 0] when depth == 1
    mask, pos = _flat(tree_mask), _flat(positions)
    index = _flat(retrive_index).view(batch, n)
    next_token, next_sibling = _flat(retrive_next_token).view(batch, n), _flat(retrive_next_sibling).view(batch, n)
    full_offset = 0
    for b in range(batch):
        parent = [-1] * n  # parent node of each node; -1: the root, or not found
        for i in range(1, n):
            slot = picks[b][i - 1] // topk
            if slot == 0:
                parent[i] = 0
            elif parents[b][slot] in picks[b]:
                parent[i] = picks[b].index(parents[b][slot]) + 1
        first, sibling = next_token[b].tolist(), next_sibling[b].tolist()
        for i in range(n - 1, 0, -1):  # descending, so each parent ends up linked to its smallest child
            p = parent[i]
            if p >= 0:
                if first[p] != -1:
                    sibling[i] = first[p]
                first[p] = i
        next_token[b] = torch.tensor(first, dtype=next_token.dtype)
        next_sibling[b] = torch.tensor(sibling, dtype=next_sibling.dtype)
        index[b] = torch.arange(b * n, (b + 1) * n, dtype=index.dtype)

        rows = torch.zeros((n, n), dtype=torch.bool)
        rows[:, 0] = True
        for i in range(1, n):
            node, steps = i, 0
            while node > 0:
                rows[i, node] = True
                steps += 1
                node = parent[node]
            pos[b * n + i] = seq_lens[b] + steps
        pos[b * n] = seq_lens[b]
        if mode == QLEN_ONLY:
            mask[b * n * n:(b + 1) * n * n] = rows.flatten()
        else:
            width = seq_lens[b] + n
            mask[full_offset:full_offset + n * width].view(n, width)[:, seq_lens[b]:] = rows
            full_offset += n * width


def verify_tree_greedy_cpu(predicts: torch.Tensor, accept_index: torch.Tensor, accept_token_num: torch.Tensor,
                           candidates: torch.Tensor, retrive_index: torch.Tensor, retrive_next_token: torch.Tensor,
                           retrive_next_sibling: torch.Tensor, target_predict: torch.Tensor) -> None:
    """Greedy verification: follow each request's draft tree while the drafts match the target's argmax.

    ``candidates``, ``retrive_index``, ``retrive_next_token``, ``retrive_next_sibling``, ``target_predict``
    [bs, n] (int64; ``target_predict`` is read flat at ``retrive_index`` values). From the root, at most
    ``width - 1`` levels (``width = accept_index.shape[1]``): take the first child, in sibling order, whose
    candidate equals the target token at the last accepted node; stop when none does. Outputs, in place:

    * ``accept_index`` [bs, width] (int32): ``retrive_index`` of the root then of each accepted node; entries past
      them are not written (callers pre-fill ``-1``).
    * ``accept_token_num`` [bs] (int32): accepted drafts, the bonus excluded (0 when none is accepted).
    * ``predicts`` [bs * n] (int32): ``target_predict`` at the root and each accepted node (the last one's is the
      bonus token); other entries are not written.
    """
    batch, n = candidates.shape
    width = accept_index.shape[1]
    if batch == 0:
        return
    tokens, index = candidates.tolist(), retrive_index.tolist()
    first, sibling = retrive_next_token.tolist(), retrive_next_sibling.tolist()
    target = target_predict.reshape(-1).tolist()
    rows: list[int] = []
    cols: list[int] = []
    path: list[int] = []
    for b in range(batch):
        last, node = index[b][0], 0
        accepted = [last]
        for _ in range(1, width):
            node = first[b][node]
            while node != -1 and tokens[b][node] != target[last]:
                node = sibling[b][node]
            if node == -1:
                break
            last = index[b][node]
            accepted.append(last)
        rows += [b] * len(accepted)
        cols += range(len(accepted))
        path += accepted
        accept_token_num.view(-1)[b] = len(accepted) - 1
    accepted_at = torch.tensor(path, dtype=torch.long)
    accept_index[torch.tensor(rows), torch.tensor(cols)] = accepted_at.to(accept_index.dtype)
    _flat(predicts)[accepted_at] = target_predict.reshape(-1)[accepted_at].to(predicts.dtype)


def reconstruct_indices_from_tree_mask(tree_mask: torch.Tensor, verified_seq_len: torch.Tensor,
                                       positions: torch.Tensor, retrive_index: torch.Tensor,
                                       retrive_next_token: torch.Tensor, retrive_next_sibling: torch.Tensor,
                                       batch_size: int, draft_token_num: int) -> None:
    """NGRAM's tree links from its QLEN tree mask (``sgl_kernel.speculative``'s op of that name).

    ``tree_mask`` [>= bs * n * n] bool/uint8, row ``i`` of request b marking node i's ancestors (and itself),
    ``verified_seq_len`` [bs]. Outputs, all entries written: ``positions`` [bs * n] = ``seq_len[b]`` + number of
    ancestors ``j < i``; ``retrive_index`` [bs, n] = ``b * n + i``; ``retrive_next_token`` [bs, n] = smallest
    ``k > i`` with ``i`` among k's ancestors, else -1; ``retrive_next_sibling`` [bs, n] = smallest ``k > i`` with
    the same parent (the largest ancestor ``j < i``), else -1 (also for the root).
    """
    n, batch = draft_token_num, batch_size
    if batch == 0:
        return
    node = torch.arange(n)
    below = node[None, :] < node[:, None]  # [i, j]: j < i
    ancestors = tree_mask.reshape(-1)[:batch * n * n].view(batch, n, n).bool() & below
    parent = torch.where(ancestors, node, -1).amax(dim=-1)  # [bs, n]
    child = torch.where(ancestors, node[:, None], n).amin(dim=1)  # [bs, n]: smallest row k with column i set
    same = (parent[:, :, None] == parent[:, None, :]) & below & (parent[:, None, :] >= 0)  # [b, k, i]
    after = torch.where(same, node[:, None], n).amin(dim=1)
    _flat(positions)[:batch * n] = (ancestors.sum(-1) + verified_seq_len.reshape(-1)[:batch, None]).reshape(-1)
    _flat(retrive_index)[:batch * n] = torch.arange(batch * n)
    _flat(retrive_next_token)[:batch * n] = torch.where(child < n, child, -1).reshape(-1)
    _flat(retrive_next_sibling)[:batch * n] = torch.where(after < n, after, -1).reshape(-1)


def assign_req_to_token_pool_cpu(req_pool_indices: torch.Tensor, req_to_token: torch.Tensor,
                                 start_offset: torch.Tensor, end_offset: torch.Tensor, out_cache_loc: torch.Tensor,
                                 pool_len: int) -> None:
    """Write each request's new KV slots into its row of ``req_to_token``.

    Request ``i`` owns ``out_cache_loc``'s next ``end_offset[i] - start_offset[i]``
    entries (requests in order, concatenated) and gets them at columns
    ``start_offset[i]:end_offset[i]`` of row ``req_pool_indices[i]``; ``pool_len``
    is the row length. SGLang calls it when a speculative decode step reserves
    the drafts' slots (``alloc_for_spec_decode``)."""
    starts, ends = start_offset.reshape(-1).tolist(), end_offset.reshape(-1).tolist()
    rows, locs = req_pool_indices.reshape(-1).tolist(), out_cache_loc.reshape(-1)
    taken = 0
    for row, start, end in zip(rows, starts, ends, strict=True):
        n = int(end) - int(start)
        if n > 0:
            req_to_token[int(row), int(start):int(end)] = locs[taken:taken + n].to(req_to_token.dtype)
            taken += n


def copy_all_layer_kv_cache_cpu(data_ptrs: torch.Tensor, strides: torch.Tensor, tgt_loc: torch.Tensor,
                                src_loc: torch.Tensor) -> None:
    """Copy KV slot rows ``src_loc[j] -> tgt_loc[j]`` in every buffer.

    ``data_ptrs[b]``: the address of buffer ``b`` (one per layer's K and V, as
    ``uint64``), whose slot ``i`` is the ``strides[b]`` bytes at ``data_ptrs[b] +
    i * strides[b]``. Every source row is read before any target is written
    (a gather, then a scatter). SGLang calls it at KV-pool warm-up when
    speculation turns its slot copy on; its moves after a verify take the
    native torch path (``SGLANG_NATIVE_MOVE_KV_CACHE``)."""
    tgt, src = tgt_loc.reshape(-1).tolist(), src_loc.reshape(-1).tolist()
    if not tgt:
        return
    for base, stride in zip(data_ptrs.reshape(-1).tolist(), strides.reshape(-1).tolist(), strict=True):
        rows = [ctypes.string_at(int(base) + int(s) * int(stride), int(stride)) for s in src]
        for t, row in zip(tgt, rows, strict=True):
            ctypes.memmove(int(base) + int(t) * int(stride), row, int(stride))


#: The seven ``sgl_kernel`` ops, by name: what replaces the stand-ins when speculation is on.
CPU_OPS: dict[str, Callable[..., None]] = {
    "assign_draft_cache_locs_contiguous_cpu": assign_draft_cache_locs_contiguous_cpu,
    "assign_extend_cache_locs_cpu": assign_extend_cache_locs_cpu,
    "assign_req_to_token_pool_cpu": assign_req_to_token_pool_cpu,
    "build_tree_kernel_efficient_cpu": build_tree_kernel_efficient_cpu,
    "copy_all_layer_kv_cache_cpu": copy_all_layer_kv_cache_cpu,
    "fill_accept_out_cache_loc_cpu": fill_accept_out_cache_loc_cpu,
    "fill_bonus_tokens_cpu": fill_bonus_tokens_cpu,
    "verify_tree_greedy_cpu": verify_tree_greedy_cpu,
}

#: ``sgl_kernel.speculative`` ops, by name: NGRAM on CPU imports this one from there (not a ``*_cpu`` op).
SPECULATIVE_OPS: dict[str, Callable[..., None]] = {
    "reconstruct_indices_from_tree_mask": reconstruct_indices_from_tree_mask,
}
