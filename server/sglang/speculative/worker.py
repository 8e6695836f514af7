"""NGRAM speculation whose draft length changes per decode step (SGLang's NGRAMWorker, subclassed).

SGLang's ``NGRAMWorker`` drafts a fixed ``draft_token_num`` nodes per request
(the root, the last verified token, plus ``k`` drafts). This worker keeps
SGLang's corpus, verify and KV bookkeeping and changes one thing per decode
step: the policy's length ``k`` (``controller.DraftLengthHost``) sets the
step's width ``k + 1``:

* the corpus still answers at the full width (``speculative_num_draft_tokens``);
  the first ``k + 1`` nodes of each request's tree are kept
  (``truncate_drafts``: nodes are in BFS order, so every kept node's
  ancestors are kept too);
* the preallocated index buffers exist for every width, and the step uses
  those of its width;
* the result's ``speculative_output_stride`` is the step's width, so SGLang's
  result processor reads each request's accepted tokens at the right stride.

NOTE: the width changes only between steps, and overlap scheduling is off
(``binding.py``): no step's tokens are read with another step's stride. The
KV SGLang reserves per decode step stays the full width's
(``get_alloc_len_per_decode``); a narrower step frees the rest as any
rejected draft's.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

_BUFFERS = ("draft_tokens_batch", "tree_mask_batch", "retrieve_indexes_batch", "retrieve_next_token_batch",
            "retrieve_next_sibling_batch", "positions_batch")

#: The scheduler process's host, set by ``binding.install`` before SGLang builds its worker.
HOST: Any = None


def truncate_drafts(drafts: np.ndarray, mask: np.ndarray, batch_size: int, full: int,
                    width: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``width`` nodes of each request's ``full``-node tree: flat drafts and
    the flat ``width x width`` masks. NOTE: SGLang's corpus lays a tree out in BFS
    order (a node after its parent), so a prefix of nodes is a tree."""
    if width == full:
        return drafts, mask
    d = drafts.reshape(batch_size, full)[:, :width]
    m = mask.reshape(batch_size, full, full)[:, :width, :width]
    return np.ascontiguousarray(d).reshape(-1), np.ascontiguousarray(m).reshape(-1)


def worker_class() -> type:
    """SGLang's ``NGRAMWorker`` with a per-step width (imports SGLang)."""
    from sglang.srt.speculative.ngram_worker import NGRAMWorker

    class SwitchboardNgramWorker(NGRAMWorker):  # type: ignore[misc]  # NOTE: SGLang is untyped
        """NGRAM drafting ``k`` tokens per step, ``k`` from the speculative policy."""

        draft_token_num: int
        """The current step's width (SGLang's attribute; the full width between steps)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            if HOST is None:
                raise RuntimeError("switchboard: +speculative's host was not installed in this process")
            self.full_width: int = self.draft_token_num
            self.host = HOST

        def _init_preallocated_tensors(self) -> None:
            full = self.draft_token_num
            self._by_width: dict[int, dict[str, Any]] = {}
            for width in range(1, full + 1):
                self.draft_token_num = width
                super()._init_preallocated_tensors()
                self._by_width[width] = {name: getattr(self, name) for name in _BUFFERS}
            self.draft_token_num = full

        def _prepare_draft_tokens(self, batch: Any) -> tuple[np.ndarray, np.ndarray]:
            width = self.draft_token_num
            self.draft_token_num = self.full_width
            try:
                drafts, mask = super()._prepare_draft_tokens(batch)
            finally:
                self.draft_token_num = width
            return truncate_drafts(drafts, mask, len(batch.reqs), self.full_width, width)

        def forward_batch_generation(self, batch: Any, *args: Any, **kwargs: Any) -> Any:
            if not batch.forward_mode.is_decode():
                return super().forward_batch_generation(batch, *args, **kwargs)
            bs = len(batch.reqs)
            draft = self.host.ask(bs)
            width = draft + 1
            self.draft_token_num = width
            for name, buffers in self._by_width[width].items():
                setattr(self, name, buffers)
            start = time.perf_counter()
            try:
                result = super().forward_batch_generation(batch, *args, **kwargs)
            finally:
                self.draft_token_num = self.full_width
            self.host.stepped(tuple(r.rid for r in batch.reqs), draft, time.perf_counter() - start)
            result.speculative_output_stride = width
            return result

        def on_verify_complete_cpu(self, num_correct_drafts_per_req: list[int], batch_size: int = 0) -> None:
            super().on_verify_complete_cpu(num_correct_drafts_per_req, batch_size=batch_size)
            self.host.verified(list(num_correct_drafts_per_req))

    return SwitchboardNgramWorker
