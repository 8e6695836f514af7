"""SMG's approximate prefix tree over Unicode characters (``kv_index/src/string_tree.rs``),
as ``cache_aware`` uses it: one radix tree shared by all workers, each worker
a *tenant* of the nodes its requests' texts passed through.

* ``insert(text, tenant)``: radix insert; the tenant is attached to every
  node on the path (edges split where texts diverge) and stamped with the
  current epoch. Its character count grows by an edge's length when it first
  attaches to that node.
* ``match(text)``: walk from the root; a fully matched edge continues the
  walk, a partly matched one adds its shared characters and stops there.
  Returns the characters matched (in the union of all tenants) and the
  tenants of the node the walk stopped at (the partly matched child, or the
  last fully matched node), at most ``MATCHED_TENANTS_CAP`` of them; none
  when nothing matched.
* ``evict(max_chars)``: while the tree-wide total (sum over tenants of their
  characters) exceeds ``max_chars``, drop the least recently inserted
  tenant-leaf (a node holding the tenant where no child does); nodes left
  without tenants are deleted.

NOTE (invariant, checked by ``check``): a node's tenants include every
tenant of each of its children, and each tenant's count is the sum of the
edge lengths of the nodes holding it.
"""

from __future__ import annotations

import heapq

#: Most tenants a match reports (``MATCHED_TENANTS_CAP``).
MATCHED_TENANTS_CAP = 8


def shared_prefix(edge: str, text: str, start: int) -> int:
    """Length of the common prefix of ``edge`` and ``text[start:]``."""
    n = min(len(edge), len(text) - start)
    if text.startswith(edge[:n], start):
        return n
    lo, hi = 0, n  # NOTE: edge[:lo] matches, edge[:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if text.startswith(edge[:mid], start):
            lo = mid
        else:
            hi = mid
    return lo


class Node:
    """One radix node: the edge leading to it, its children by first char, its tenants."""

    __slots__ = ("edge", "children", "tenants", "parent")

    def __init__(self, edge: str, parent: Node | None) -> None:
        self.edge = edge
        self.children: dict[str, Node] = {}
        self.tenants: dict[str, int] = {}
        """Tenant -> epoch of its last insert through this node."""
        self.parent = parent


class CharTree:
    """The shared tree of one model (see module docs)."""

    def __init__(self) -> None:
        self.root = Node("", None)
        self.chars: dict[str, int] = {}
        """Characters attached per tenant."""
        self.epoch = 0

    @property
    def total_chars(self) -> int:
        """Tree-wide size, as SMG's eviction counts it."""
        return sum(self.chars.values())

    def match(self, text: str) -> tuple[int, list[str]]:
        """``(characters matched, tenants where the walk stopped)`` (see module docs)."""
        node, stop, i = self.root, self.root, 0
        while i < len(text):
            child = node.children.get(text[i])
            if child is None:
                break
            k = shared_prefix(child.edge, text, i)
            i += k
            stop = child
            if k < len(child.edge):
                break
            node = child
        if i == 0:
            return 0, []
        return i, list(stop.tenants)[:MATCHED_TENANTS_CAP]

    def insert(self, text: str, tenant: str) -> None:
        """Insert ``text`` for ``tenant`` (see module docs)."""
        self.epoch += 1
        node, i = self.root, 0
        self._attach(node, tenant)
        while i < len(text):
            child = node.children.get(text[i])
            if child is None:
                child = Node(text[i:], node)
                node.children[text[i]] = child
                self._attach(child, tenant)
                return
            k = shared_prefix(child.edge, text, i)
            if k < len(child.edge):
                child = self._split(child, k)
            self._attach(child, tenant)
            i += k
            node = child

    def _attach(self, node: Node, tenant: str) -> None:
        if tenant not in node.tenants:
            self.chars[tenant] = self.chars.get(tenant, 0) + len(node.edge)
        node.tenants[tenant] = self.epoch

    @staticmethod
    def _split(child: Node, k: int) -> Node:
        """Cut ``child``'s edge after ``k`` chars; return the new upper node."""
        parent = child.parent
        assert parent is not None
        mid = Node(child.edge[:k], parent)
        mid.tenants = dict(child.tenants)
        parent.children[mid.edge[0]] = mid
        child.edge = child.edge[k:]
        child.parent = mid
        mid.children[child.edge[0]] = child
        return mid

    def remove_tenant(self, tenant: str) -> None:
        """Purge ``tenant`` from every node (a worker left the fleet)."""
        stack = [self.root]
        while stack:
            node = stack.pop()
            if node.tenants.pop(tenant, None) is None:
                continue
            stack.extend(node.children.values())
            if not node.tenants and node.parent is not None:
                del node.parent.children[node.edge[0]]
        self.chars.pop(tenant, None)

    def evict(self, max_chars: int) -> None:
        """Drop least recently inserted tenant-leaves until the total is at most ``max_chars``."""
        total = self.total_chars
        if total <= max_chars:
            return
        heap: list[tuple[int, int, str, Node]] = []
        tie = 0
        stack = [self.root]
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            if node.parent is None:
                continue
            for tenant, epoch in node.tenants.items():
                if not any(tenant in c.tenants for c in node.children.values()):
                    heap.append((epoch, tie, tenant, node))
                    tie += 1
        heapq.heapify(heap)
        while total > max_chars and heap:
            _, _, tenant, node = heapq.heappop(heap)
            if tenant not in node.tenants:
                continue
            del node.tenants[tenant]
            self.chars[tenant] -= len(node.edge)
            total -= len(node.edge)
            parent = node.parent
            assert parent is not None
            if not node.tenants:
                del parent.children[node.edge[0]]
            if parent.parent is not None and tenant in parent.tenants and \
                    not any(tenant in c.tenants for c in parent.children.values()):
                heapq.heappush(heap, (parent.tenants[tenant], tie, tenant, parent))
                tie += 1

    def check(self) -> None:
        """Assert the invariants of the module docs (tests call this)."""
        counts: dict[str, int] = {}
        stack = [self.root]
        while stack:
            node = stack.pop()
            for first, child in node.children.items():
                assert child.parent is node and child.edge[0] == first and child.edge
                assert set(child.tenants) <= set(node.tenants)
                stack.append(child)
            for tenant in node.tenants:
                counts[tenant] = counts.get(tenant, 0) + len(node.edge)
        assert {t: c for t, c in counts.items() if c} == {t: c for t, c in self.chars.items() if c}
