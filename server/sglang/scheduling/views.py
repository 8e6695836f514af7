"""SGLang ``Req`` -> frozen ``RequestView``: the only code that reads a ``Req`` on
behalf of scheduling and admission policies (tree nodes: ``cache/eviction.py``)."""

from __future__ import annotations

import itertools
from typing import Any

from policies.views import RequestView
from server.sglang.scheduling.capture import features_of
from server.sglang.scheduling.state import state_of

_arrival_counter = itertools.count()


def stamp_arrival(req: Any, prefill_clock: int = 0) -> None:
    """Record ``req``'s arrival order and the prefill-token clock once (a retracted
    request keeps its own)."""
    state = state_of(req)
    if state.arrival_seq is None:
        state.arrival_seq = next(_arrival_counter)
        state.arrival_clock = prefill_clock


def request_view(req: Any) -> RequestView:
    """A ``RequestView`` of an SGLang ``Req`` (after prefix matching)."""
    num_output = len(req.output_ids)
    state = state_of(req)
    return RequestView(
        rid=req.rid,
        arrival_seq=state.arrival_seq or 0,
        arrival_time=float(req.time_stats.wait_queue_entry_time or 0.0),
        num_input_tokens=len(req.origin_input_ids) + num_output,
        num_cached_tokens=int(getattr(req, "num_matched_prefix_tokens", 0) or 0),
        max_new_tokens=int(req.sampling_params.max_new_tokens or 0),
        num_output_tokens=num_output,
        arrival_processed_tokens=state.arrival_clock,
        priority=req.priority,
        session_id=getattr(req, "session_id", None),
        features=features_of(req),
    )
