"""Cache-side seam: a pure ``EvictionPolicy`` as an SGLang ``EvictionStrategy``.

SGLang's radix trees evict the evictable leaf with the smallest
``EvictionStrategy.get_priority(node)`` first (a heap over leaves; a parent
that becomes a leaf is pushed in turn). The strategy is looked up by name
(``--radix-eviction-policy``) in ``mem_cache.utils._EVICTION_POLICY_FACTORIES``;
``install_eviction_policy`` registers ours under ``switchboard`` in the
scheduler process, and the launcher selects it together with the Python tree
core (the Rust core only knows SGLang's built-in names).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from sglang.srt.mem_cache import utils as mem_cache_utils
from sglang.srt.mem_cache.evict_policy import EvictionStrategy

from policies.cache import BlockView, EvictionPolicy, EvictionRank
from server.sglang.cache.names import EVICTION_STRATEGY_NAME, register_eviction_choice
from server.sglang.scheduling.hook_clock import HOOK_CLOCK

log = logging.getLogger("switchboard.eviction")


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


class PolicyEvictionStrategy(EvictionStrategy):
    """Ranks tree nodes with a pure eviction policy (smallest first)."""

    def __init__(self, policy: EvictionPolicy) -> None:
        self.policy = policy
        log.info("switchboard: radix-cache eviction ranked by %s", type(policy).__name__)

    def get_priority(self, node: Any) -> EvictionRank:
        t = time.perf_counter()
        rank = self.policy.rank(block_view(node))
        HOOK_CLOCK.add("eviction", time.perf_counter() - t)
        return rank


def install_eviction_policy(policy: EvictionPolicy) -> None:
    """Make ``--radix-eviction-policy switchboard`` build a strategy over ``policy``."""
    register_eviction_choice()
    mem_cache_utils._EVICTION_POLICY_FACTORIES[EVICTION_STRATEGY_NAME] = (
        lambda **_config: PolicyEvictionStrategy(policy)
    )
