"""``+cache=penelope``: keep the shared prefix, free agent history from the
front, recompute only the gap (Penelope), as a pure eviction policy.

An agent resends its whole, ever-longer history every turn. A tail-first cache
(stock SGLang/vLLM, ``+cache=lru``) frees the end of a history, the most
expensive part to recompute: every token attends to everything before it, so
recompute cost grows with position. Penelope's order:

1. the *shared* prefix goes last: blocks more than one session went through,
   blocks with more than one continuation (a branch point: sub-agents, a
   system prompt), and blocks starting within the first
   ``system_prompt_tokens`` of their path; among them least recently used
   first, deepest first (tail-first, as stock);
2. across sessions' private histories, least recently used first (a path's
   blocks share their last access: a match or insert touches the whole path);
3. within one history, the *front* first (smallest ``prefix_len``).

Freeing a block in the middle of a path leaves a gap: the policy declares
``EvictionNeeds(interior=True)`` so a host that can hold gaps (the
simulator's cache, the server's gap cache; see ``policies.cache``) offers
interior blocks; a later request through the path recomputes only the gap and
reuses the tail after it. The host's optional host-memory tier
(``cache.host_tier_tokens``) restores freed segments instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from policies.cache import BlockView, EvictionNeeds, EvictionRank


@dataclass(frozen=True)
class PenelopePolicy:
    """Shared prefix last; private histories LRU across, front-first within."""

    system_prompt_tokens: int = 0
    """Blocks starting within this many tokens of a path's start count as the
    shared system prompt (0: only sharing seen in the cache counts)."""

    position_weight_s: float = 0.001
    """Recency a private block earns per token of its start position, in the
    host's time unit (seconds): ``last_access + position_weight_s * prefix_len``
    orders private histories. 0 = strictly least recently used across sessions
    (front-first only within one); > 0 trades recency for recompute cost, so
    the cheap fronts of several recent histories go before an older tail.
    0.001: chosen on the tuning split (``bench.scripts.penelope``'s sweep)."""

    needs: ClassVar[EvictionNeeds] = EvictionNeeds(interior=True, refresh_waiting=True)
    """Interior blocks may be freed, leaving a gap (``policies.cache`` NOTE); the
    waiting queue's prefixes are refreshed as for LRU (its rank starts from recency)."""

    def is_shared(self, block: BlockView) -> bool:
        """Whether ``block`` belongs to the shared prefix (see module docs)."""
        return (block.num_sessions > 1 or block.num_children > 1
                or block.prefix_len < self.system_prompt_tokens)

    def rank(self, block: BlockView) -> EvictionRank:
        if self.is_shared(block):
            return (1.0, block.last_access, -float(block.prefix_len))
        age = block.last_access + self.position_weight_s * block.prefix_len
        return (0.0, age, float(block.prefix_len))
