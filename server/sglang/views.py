"""SGLang objects -> frozen policy views. The only code that reads ``Req`` or tree nodes
on behalf of policies."""

from __future__ import annotations

import itertools
from typing import Any

from policies.cache import BlockView
from server.sglang.capture import features_of
from policies.views import RequestView

#: Attributes the adapter stamps on each ``Req``: arrival order and the
#: scheduler's prefill-token clock at arrival.
ARRIVAL_SEQ_ATTR = "_switchboard_arrival_seq"
ARRIVAL_CLOCK_ATTR = "_switchboard_arrival_clock"
_arrival_counter = itertools.count()


def stamp_arrival(req: Any, prefill_clock: int = 0) -> None:
    """Stamp ``req``'s arrival once (a retracted request keeps its own)."""
    if getattr(req, ARRIVAL_SEQ_ATTR, None) is None:
        setattr(req, ARRIVAL_SEQ_ATTR, next(_arrival_counter))
        setattr(req, ARRIVAL_CLOCK_ATTR, prefill_clock)


def request_view(req: Any, in_batch_duplicate: bool = False) -> RequestView:
    """A ``RequestView`` of an SGLang ``Req`` (after prefix matching)."""
    num_output = len(req.output_ids)
    return RequestView(
        rid=req.rid,
        arrival_seq=getattr(req, ARRIVAL_SEQ_ATTR, 0),
        arrival_time=float(req.time_stats.wait_queue_entry_time or 0.0),
        num_input_tokens=len(req.origin_input_ids) + num_output,
        num_cached_tokens=int(getattr(req, "num_matched_prefix_tokens", 0) or 0),
        max_new_tokens=int(req.sampling_params.max_new_tokens or 0),
        num_output_tokens=num_output,
        arrival_processed_tokens=int(getattr(req, ARRIVAL_CLOCK_ATTR, 0)),
        in_batch_duplicate=in_batch_duplicate,
        priority=req.priority,
        session_id=getattr(req, "session_id", None),
        features=features_of(req),
    )


def block_view(node: Any) -> BlockView:
    """A ``BlockView`` of a radix-tree node (``TreeNode`` or ``UnifiedTreeNode``)."""
    prefix_len = 0
    parent = node.parent
    while parent is not None and parent.key is not None:
        prefix_len += len(parent.key)
        parent = parent.parent
    return BlockView(
        block_id=int(node.id),
        num_tokens=len(node.key) if node.key is not None else 0,
        prefix_len=prefix_len,
        last_access=float(node.last_access_time),
        created=float(node.creation_time),
        hit_count=int(node.hit_count),
        priority=int(node.priority or 0),
        num_children=len(node.children),
    )
