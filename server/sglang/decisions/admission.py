"""A packed decision request in SGLang's scheduler: admitted whole, cached up to its context.

* Never chunked: a packed sequence is one pass (its questions' masks and
  readouts are the pass's). When SGLang's prefill walk would admit it as a
  chunk, the walk stops there (``AddReqResult.OTHER``, as SGLang's own adder
  stops when a budget runs out); the next pass starts with it, where it fits
  whole (``serving.py`` never sends a sequence over the chunk budget).
* Cached only up to the context's end: question ``i > 1`` was computed without
  the questions before it, so its KV is not the KV of the token path
  ``context + q_1 + ... + q_i`` the prefix cache would file it under. The
  tree's ``checkpoint`` of a packed request is clamped to the context; the
  questions' KV is freed with the request.
"""

from __future__ import annotations

import functools
from typing import Any

from server.sglang.decisions.layout import forget, layout_of


@functools.cache
def packed_prefill_adder(base: type) -> type:
    from sglang.srt.managers.schedule_policy import AddReqResult

    class PackedPrefillAdder(base):  # type: ignore[misc]
        """SGLang's adder, refusing to chunk a packed request."""

        def _select_prefill_admission(self, req: Any, **kwargs: Any) -> Any:
            admission = super()._select_prefill_admission(req, **kwargs)
            if not isinstance(admission, AddReqResult) and admission.is_chunked and layout_of(req) is not None:
                return AddReqResult.OTHER
            return admission

    return PackedPrefillAdder


def clamp_checkpoints(tree_cache: Any) -> None:
    """Make ``tree_cache.checkpoint`` insert a packed request only up to its context.

    NOTE: wraps this scheduler's tree instance (whatever its class: SGLang's,
    or a cache kind's), once."""
    if getattr(tree_cache, "_switchboard_packed_clamp", False):
        return
    checkpoint = tree_cache.checkpoint

    def clamped(req: Any, *, up_to: int, **kwargs: Any) -> None:
        layout = layout_of(req)
        if layout is not None:
            up_to = min(up_to, layout.context)
            if req.finished():
                forget(req.rid)
        return checkpoint(req, up_to=up_to, **kwargs)  # type: ignore[no-any-return]

    tree_cache.checkpoint = clamped
    tree_cache._switchboard_packed_clamp = True


class PackedAdmission:
    """The decisions kind's scheduler seam (``WrapsPrefillAdder``)."""

    def __init__(self, scheduler: Any) -> None:
        clamp_checkpoints(scheduler.tree_cache)

    def adder_class(self, base: type) -> type:
        return packed_prefill_adder(base)
