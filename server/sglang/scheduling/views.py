"""SGLang ``Req`` -> frozen ``RequestView``: the only code that reads a ``Req`` on
behalf of scheduling and admission policies (tree nodes: ``cache/eviction.py``)."""

from __future__ import annotations

import itertools
from typing import Any

from policies.views import DllmView, RequestView
from server.sglang.scheduling.capture import features_of

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


def request_view(req: Any, dllm: DllmView | None = None) -> RequestView:
    """A ``RequestView`` of an SGLang ``Req`` (after prefix matching); ``dllm``:
    its block-round progress, for a diffusion LM's round host."""
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
        priority=req.priority,
        session_id=getattr(req, "session_id", None),
        features=features_of(req),
        dllm=dllm,
    )
