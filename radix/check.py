"""The gap tree's invariants, asserted in one walk (``GapTree.check``).

Tests call it after every step; it costs a walk of the tree and of the
eviction heap, so hosts never call it on a hot path.
"""

from __future__ import annotations

from typing import Any

from radix.core import TreeCore


def check_tree(tree: TreeCore[Any, Any]) -> None:
    """Assert every ``NOTE`` invariant of ``radix.tree``, ``radix.eviction`` and ``radix.host``."""
    queue, host, slots, keys = tree.queue, tree.host, tree.slots, tree.keys
    ranks = queue.live_ranks()
    num_nodes = tree_tokens = evictable = held = 0
    assert tree.root.lock_ref == 1 and tree.root.parent is None and len(tree.root.key) == 0
    for n in tree.nodes():
        parent = n.parent
        # NOTE: structure: every node hangs off its parent by its first unit and continues it
        assert n.attached and parent is not None and n.lock_ref >= 0 and n.waiting_ref >= 0
        assert parent.children[n.edge] is n and keys.edge(n.key) == n.edge
        assert len(n.key) > 0 and n.start == parent.end, "a node does not continue its parent"
        assert 0 <= n.num_tokens <= len(n.key) * tree.unit_tokens
        # NOTE: a lock covers the whole path, so a parent is locked at least as often
        assert parent is tree.root or parent.lock_ref >= n.lock_ref, "a lock not on a path"
        # NOTE: gaps: hollow nodes own no KV; a useless one (nothing after it, no
        # copy, no lock) is gone; only interior policies or a host tier make them
        assert not n.hollow or bool(n.children) or n.on_host or n.lock_ref > 0, "useless hollow node"
        assert tree.interior or host is not None or not n.hollow, "a tail-only policy left a gap"
        assert not n.on_host or n.hollow, "a host copy of a node with KV"
        if slots is not None:
            assert (n.value is None) == n.hollow, "slots of a hollow node, or none of a full one"
            assert n.value is None or slots.size(n.value) == n.num_tokens
        # NOTE: eviction: an evictable node is queued at its current rank (or touched)
        if queue.evictable(n):
            if n.waiting_ref > 0:
                assert n in queue.touched, "an evictable waited-on node is not re-ranked"
            else:
                assert ranks.get(n) == tree.policy.rank(queue.view(n)), "an evictable node not queued"
        num_nodes += 1
        tree_tokens += n.kv_tokens
        evictable += n.kv_tokens if n.lock_ref == 0 else 0
        held += n.on_host
        if host is not None and host.copies is not None:
            assert (n.host_copy is not None) == n.on_host, "a host copy without its node"
    assert num_nodes == tree.num_nodes
    assert tree_tokens == tree.tree_tokens, (tree_tokens, tree.tree_tokens)
    assert evictable == tree.evictable_tokens, (evictable, tree.evictable_tokens)
    if host is not None:
        # NOTE: the tier holds exactly the held nodes' tokens, within capacity
        assert host.held(tree.nodes()) == host.used <= host.capacity
        assert host.num_copies == held
