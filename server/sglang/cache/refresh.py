"""The waiting-prefix refresh of an eviction order that asks for it (``EvictionNeeds.refresh_waiting``).

Stock SGLang bumps the recency of the waiting queue's cached prefixes at the
end of some queue orders (``SchedulePolicy._touch_waiting_prefixes``), so its
LRU does not evict what the queue is about to reuse; it does so only while
``--radix-eviction-policy`` is ``lru``. An order running through Switchboard's
eviction seam sets that flag to ``switchboard`` (``binding.py``), so SGLang's
own refresh stops; this seam runs it again, told of each final queue order
(``OnQueueOrdered``), under SGLang's other conditions unchanged: not on a pass
that matched the whole queue already, every 32nd eligible pass, the first 128
waiting requests, head last.

Imported only inside SGLang processes (it imports SGLang).
"""

from __future__ import annotations

from typing import Any

from sglang.srt.environ import envs
from sglang.srt.managers import schedule_policy
from sglang.srt.mem_cache.common import touch_waiting_prefix
from sglang.srt.runtime_context import get_disagg


class WaitingPrefixRefresh:
    """SGLang's LRU refresh of waiting prefixes, for an order through the eviction seam."""

    def __init__(self, tree_cache: Any) -> None:
        self.tree_cache = tree_cache
        self.passes = 0
        """Eligible passes so far (SGLang's ``_waiting_prefix_refresh_calls``)."""

    def queue_ordered(self, waiting_queue: list[Any], matched: bool) -> None:
        # NOTE: SGLang's conditions but the eviction-policy name (ours is ``switchboard``);
        # a matched pass (cache-aware order, fast matching) touched every request already.
        if (matched or not waiting_queue
                or not envs.SGLANG_ENABLE_WAITING_PREFIX_REFRESH.get()
                or get_disagg().disaggregation_mode == "decode"
                or not self.tree_cache.supports_prefix_sharing()):
            return
        refresh = self.passes % schedule_policy.WAITING_PREFIX_REFRESH_INTERVAL == 0
        self.passes += 1
        if not refresh:
            return
        # NOTE: head last, so recency follows the order the queue will be admitted in
        for req in reversed(waiting_queue[:schedule_policy.WAITING_QUEUE_PREFIX_MATCH_MAX]):
            touch_waiting_prefix(req, self.tree_cache)
