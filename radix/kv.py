"""What happens to a node's KV in the gap tree: freed, pruned, filled back.

``GapTree.evict``, ``unlock``, ``insert`` and ``fill`` call these. An evicted
node's KV goes one of three ways (``free``):

==================================== ==========================================
the node                             becomes
==================================== ==========================================
the host tier can hold its tokens    hollow, held (keys kept, KV copied out first)
has children                         hollow (a gap: keys kept, KV freed)
a leaf                               removed; with an interior policy, hollow
                                     ancestors it leaves useless go too
==================================== ==========================================

A hollow node gets KV back when a request recomputes or restores it
(``fill``) or inserts through it (``fill_node``); a held node's copy is
dropped then (restored: counted in ``HostTier.num_restored_tokens``).

``NOTE``: a hollow node nothing needs (no children, no host copy, no lock) is
removed at once, walking up the path (``prune``): after a leaf goes, after
the tier drops a copy, after an unlock. The tree's counters move with every
step here, so ``GapTree.check`` holds between any two calls.
"""

from __future__ import annotations

from radix.core import TreeCore
from radix.node import K, Node, V


def evict(tree: TreeCore[K, V], num_tokens: int) -> int:
    """Free at least ``num_tokens`` tokens of KV if that many are evictable
    (whole nodes, smallest rank first); return the tokens freed."""
    queue = tree.queue
    queue.rerank_touched()
    freed = 0
    while freed < num_tokens:
        node = queue.pop()
        if node is None:
            break
        freed += free(tree, node)
    tree.num_evicted_tokens += freed
    queue.compact(tree.num_nodes)
    return freed


def free(tree: TreeCore[K, V], node: Node[K, V]) -> int:
    """Free evictable ``node``'s KV (see module docs); return the tokens freed."""
    tokens = node.num_tokens
    host = tree.host
    if host is not None and host.fits(tokens):
        copy = host.offload(node)  # NOTE: before the slots are freed
        hollow(tree, node)
        for dropped in host.add(node, copy):
            prune(tree, dropped)
        return tokens
    if node.children:
        hollow(tree, node)
        return tokens
    parent = node.parent
    assert parent is not None
    freed = remove(tree, node)
    if tree.interior:
        prune(tree, parent)
    return freed


def hollow(tree: TreeCore[K, V], node: Node[K, V]) -> None:
    """Free ``node``'s KV and keep its keys."""
    if tree.slots is not None and node.value is not None:
        tree.slots.free(node.value)
    node.value = None
    node.hollow = True
    node.version += 1
    tree.tree_tokens -= node.num_tokens
    tree.evictable_tokens -= node.num_tokens
    tree.queue.touched.discard(node)
    assert node.parent is not None
    tree.queue.offer(node.parent)  # NOTE: may have become a leaf of KV


def remove(tree: TreeCore[K, V], node: Node[K, V]) -> int:
    """Detach childless ``node`` (its parent link stays); return the KV tokens freed with it."""
    parent = node.parent
    assert parent is not None and not node.children and not node.on_host
    del parent.children[node.edge]
    node.attached = False
    tree.num_nodes -= 1
    tree.queue.touched.discard(node)
    kv = node.kv_tokens
    if tree.slots is not None and node.value is not None:
        tree.slots.free(node.value)
        node.value = None
    tree.tree_tokens -= kv
    tree.evictable_tokens -= kv
    tree.keys.detached(node)
    if not parent.children or tree.interior or tree.host is not None:
        tree.queue.offer(parent)
    return kv


def prune(tree: TreeCore[K, V], n: Node[K, V]) -> None:
    """Remove ``n`` and then its ancestors while they are useless: hollow,
    childless, without a host copy, unlocked."""
    while (n.parent is not None and n.attached and n.hollow and not n.on_host
           and not n.children and n.lock_ref == 0):
        parent = n.parent
        remove(tree, n)
        n = parent


def fill(tree: TreeCore[K, V], node: Node[K, V], value: V | None, start: int, end: int | None,
         restore: bool) -> list[Node[K, V]]:
    """``GapTree.fill``: the hollow nodes on the path to ``node`` (those covering
    units ``[start, end)`` if ``end`` is given) get KV back, ``value`` sliced
    from ``start``; returns them in path order. A node filled meanwhile (another
    request's insert) keeps its KV. With ``restore`` held nodes' copies are
    what came back."""
    filled: list[Node[K, V]] = []
    covered = 0
    for n in tree.path_to(node):
        if end is not None:
            if n.end <= start or n.start >= end:
                continue
            assert start <= n.start and n.end <= end, "a gap ends inside a node"
            covered += len(n.key)
        if not n.hollow:
            continue
        if restore and n.on_host:
            assert tree.host is not None
            tree.host.num_restored_tokens += n.num_tokens
        fill_node(tree, n, None if tree.slots is None or value is None
                  else tree.slots.take(value, n.start - start, n.end - start))
        filled.append(n)
    assert end is None or covered == end - start, "the range is not on this path"
    return filled


def fill_node(tree: TreeCore[K, V], n: Node[K, V], value: V | None) -> None:
    """Hollow ``n`` gets KV again (recomputed, restored or inserted: ``value``)."""
    assert tree.slots is None or value is not None
    n.value = value
    if tree.host is not None:
        tree.host.discard(n)
    n.hollow = False
    tree.tree_tokens += n.num_tokens
    if n.lock_ref == 0:
        tree.evictable_tokens += n.num_tokens
    tree.queue.offer(n)
