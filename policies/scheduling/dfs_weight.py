"""``+policy=dfs-weight``: SGLang's depth-first, subtree-weight order."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from policies.scheduling import OrderDecision, QueueView, SchedulingNeeds


@dataclass(eq=False)
class _Subtree:
    """One node of the trie the waiting requests' ``prefix_path``s span."""

    weight: int = 0
    """Waiting requests whose match ends in this node or below it."""
    rids: list[str] = field(default_factory=list)
    """Requests whose match ends exactly here, in queue order."""
    children: dict[int, _Subtree] = field(default_factory=dict)
    """Child nodes by their sibling key."""


@dataclass(frozen=True)
class DfsWeightPolicy:
    """Walk the prefix tree depth first, heaviest subtree first.

    A node's weight is the number of waiting requests whose cached prefix ends
    in its subtree. From the root, children are visited in descending weight
    (ties in the host's child order) and a node's own requests come after all
    of its children's (post-order), so requests sharing the longest prefixes
    run back to back while their common prefix is still cached. Requests with
    equal paths keep their queue order. Needs ``RequestView.prefix_path``;
    without it every request sits at the root and the order is the queue
    order. Inside SGLang: ``--schedule-policy dfs-weight`` (SGLang's own tree
    walk, ``BasePrefixCache.dfs_weight_order``).
    """

    needs: ClassVar[SchedulingNeeds] = SchedulingNeeds(sglang_native="dfs-weight", prefix_path=True)

    def order(self, queue: QueueView) -> OrderDecision:
        root = _Subtree()
        for r in queue.requests:
            node = root
            node.weight += 1
            for key in r.prefix_path:
                child = node.children.get(key)
                if child is None:
                    child = node.children[key] = _Subtree()
                child.weight += 1
                node = child
            node.rids.append(r.rid)

        # NOTE: iterative post-order (paths can be deep); the stack pops the
        # heaviest child first and a node's own requests after its subtree.
        out: list[str] = []
        stack: list[tuple[_Subtree, bool]] = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                out.extend(node.rids)
                continue
            stack.append((node, True))
            kids = sorted(node.children.items(), key=lambda kv: (-kv[1].weight, kv[0]))
            stack.extend((child, False) for _, child in reversed(kids))
        return OrderDecision(tuple(out))
