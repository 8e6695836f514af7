"""The GPU path: FlashInfer's prefill with a custom mask (flashinfer-python 0.7.2).

NOT YET RUN ON A GPU: written against the installed 0.7.2 sources on a machine
without one; ``gpu_check.py`` is the first thing to run where one is lent (its
``--cpu-smoke`` mode checks only the torch twins of these calls).

* ``RaggedPrefill``: a batch of requests in ragged layout
  (``BatchPrefillWithRaggedKVCacheWrapper``), each with its own ``[qo_len, kv_len]``
  mask (a packed sequence's ``segment_mask``, a verify's ``prefix_mask``) or causal.
  ``plan`` once per batch (it packs the masks to bits, ``segment_packbits``), ``run``
  per layer; ``reference.ragged_masked_attention`` is its torch twin.
* ``single_masked_prefill``: one request (``single_prefill_with_kv_cache``).

Settings, from the 0.7.2 sources: ``causal=False`` (FlashInfer ignores ``causal``
under a custom mask; the mask carries causality), ``pos_encoding_mode="NONE"``
(rope is applied by the model, by ``packed_positions``, before attention),
``sm_scale=None`` means ``head_dim_qk ** -0.5``, ``kv_layout="NHD"`` (``[tokens,
heads, dim]``), GQA when the query heads are a multiple of the kv heads. A
custom mask runs on the FA2 kernels (FA3 has no custom mask; ``auto`` picks FA2
for it too); FlashInfer has no float32 attention kernels (fp16, bf16, fp8 only).

Why a custom mask rather than SGLang's multi-item scoring (FlashInfer's
``prefix_len_ptr`` / ``token_pos_in_items_ptr`` mask mode, which SGLang's
FlashInfer backend drives): multi-item scoring separates items with a delimiter
token, so its layout is ``C + sum(q_s + 1)`` tokens and every item also sees an
extra token (its delimiter) that a separate ``context + question_s`` pass never
has; its outputs are not the separate computation's. A custom mask over the plain
``C + sum(q_s)`` tokens with ``packed_positions`` reproduces the separate passes
exactly (up to float rounding).

NOTE: a custom mask costs ``qo_len * kv_len`` bits per request and the FA2
kernel visits every key tile under it (no causal early exit): for long contexts
cache the context first and run only the questions as queries
(``segment_mask(..., num_queries=...)``), so the mask is ``questions x n``.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import torch

#: FlashInfer's recommended float workspace (the split-k scratch).
WORKSPACE_BYTES = 128 * 1024 * 1024


def _flashinfer() -> Any:
    """FlashInfer, imported at first use (the module imports on CPU without it).

    NOTE: through ``importlib`` so mypy types it ``Any``: flashinfer ships
    ``py.typed``, and a plain import would make mypy analyse all of it."""
    return importlib.import_module("flashinfer")


def _indptr(lens: Sequence[int], device: torch.device) -> torch.Tensor:
    out = torch.zeros(len(lens) + 1, dtype=torch.int32)
    out[1:] = torch.cumsum(torch.tensor(list(lens), dtype=torch.int64), 0).to(torch.int32)
    return out.to(device)


class RaggedPrefill:
    """FlashInfer's ragged batch prefill with per-request masks (or causal).

    ``q``: ``[sum(qo_lens), Hq, D]``, ``k``/``v``: ``[sum(kv_lens), Hk, D(v)]``, request
    ``r``'s rows after the earlier requests'. Plan once per batch, run per layer."""

    def __init__(self, device: torch.device | str, workspace_bytes: int = WORKSPACE_BYTES,
                 backend: str = "fa2") -> None:
        self.device = torch.device(device)
        workspace = torch.empty(workspace_bytes, dtype=torch.uint8, device=self.device)
        self._wrapper = _flashinfer().BatchPrefillWithRaggedKVCacheWrapper(workspace, "NHD", backend=backend)
        self._rows = 0

    def plan(self, qo_lens: Sequence[int], kv_lens: Sequence[int], num_qo_heads: int, num_kv_heads: int,
             head_dim: int, *, masks: Sequence[torch.Tensor] | None = None, head_dim_vo: int | None = None,
             scale: float | None = None, dtype: torch.dtype = torch.float16) -> None:
        """Plan a batch: ``masks[r]`` is request ``r``'s bool ``[qo_lens[r], kv_lens[r]]``
        mask; without masks every request is causal (its queries the last of its keys)."""
        if len(qo_lens) != len(kv_lens) or (masks is not None and len(masks) != len(qo_lens)):
            raise ValueError(f"{len(qo_lens)} qo lengths, {len(kv_lens)} kv lengths, "
                             f"{'no' if masks is None else len(masks)} masks")
        if any(not 0 <= a <= b for a, b in zip(qo_lens, kv_lens)):
            raise ValueError("every request needs 0 <= qo_len <= kv_len")
        flat = None
        if masks is not None:
            for r, m in enumerate(masks):
                if tuple(m.shape) != (qo_lens[r], kv_lens[r]) or m.dtype != torch.bool:
                    raise ValueError(f"mask {r} must be bool [{qo_lens[r]}, {kv_lens[r]}], "
                                     f"got {m.dtype} {tuple(m.shape)}")
            # NOTE: row-major per request, requests in order: FlashInfer's flattened
            # custom-mask layout (mask_indptr[r] = sum of qo_len * kv_len before r)
            flat = torch.cat([m.reshape(-1) for m in masks]).to(self.device)
        self._wrapper.plan(_indptr(qo_lens, self.device), _indptr(kv_lens, self.device), num_qo_heads,
                           num_kv_heads, head_dim, head_dim_vo=head_dim_vo, custom_mask=flat,
                           causal=masks is None, pos_encoding_mode="NONE", sm_scale=scale,
                           q_data_type=dtype, kv_data_type=dtype)
        self._rows = sum(qo_lens)

    def run(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``[sum(qo_lens), Hq, Dv]`` for the planned batch."""
        if q.shape[0] != self._rows:
            raise ValueError(f"planned {self._rows} query rows, got {q.shape[0]}")
        out: torch.Tensor = self._wrapper.run(q, k, v)
        return out


def single_masked_prefill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor,
                          scale: float | None = None) -> torch.Tensor:
    """One request: ``masked_attention``'s contract (``[nq, Hq, D]`` queries over ``[nk,
    Hk, D]`` keys, bool ``allowed [nq, nk]``) on ``single_prefill_with_kv_cache``.

    NOTE: it packs the mask to bits on every call; ``RaggedPrefill`` packs once per plan."""
    if tuple(allowed.shape) != (q.shape[0], k.shape[0]) or allowed.dtype != torch.bool:
        raise ValueError(f"allowed must be bool [{q.shape[0]}, {k.shape[0]}], got {allowed.dtype} "
                         f"{tuple(allowed.shape)}")
    out: torch.Tensor = _flashinfer().single_prefill_with_kv_cache(
        q, k, v, custom_mask=allowed, causal=False, kv_layout="NHD", pos_encoding_mode="NONE", sm_scale=scale)
    return out
