"""Nodes of the gap tree (``radix.tree.GapTree``) and helpers over their paths.

A node holds a run of key units (``key``: tokens, pages or block ids, the
host's choice) that share one path, the KV of those units (``value``, host
defined; ``None`` when hollow or when the host tracks token counts only) and
what eviction ranks it by. ``start`` and ``end`` are key-unit positions;
``num_tokens`` counts the KV tokens the node covers, hollow or not.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Generic, NamedTuple, Protocol, Self, TypeVar


class Key(Protocol):
    """What the tree needs of a key: a length and slicing (``array``, ``tuple``,
    SGLang's ``RadixKey``)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: slice, /) -> Self: ...


K = TypeVar("K", bound=Key)
"""A node's key type."""
V = TypeVar("V")
"""A node's value type (its KV slots)."""


class Node(Generic[K, V]):
    """One tree node (see module docs). Attributes are public: hosts read them."""

    __slots__ = ("id", "parent", "children", "edge", "key", "value", "start", "num_tokens",
                 "lock_ref", "waiting_ref", "last_access", "created", "hit_count", "priority",
                 "sibling_key", "version", "attached", "hollow", "on_host", "host_stamp",
                 "host_copy", "session", "others")

    def __init__(self, node_id: int, parent: Node[K, V] | None, key: K, edge: Hashable,
                 start: int, num_tokens: int, now: float, sibling_key: int,
                 value: V | None = None) -> None:
        self.id = node_id
        """Unique in its tree; breaks eviction-rank ties (smaller first)."""
        self.parent = parent
        """Kept after the node is detached (a detached node's waiters still walk up)."""
        self.children: dict[Hashable, Node[K, V]] = {}
        self.edge = edge
        """This node's key in ``parent.children`` (``KeyIndex.edge(key)``)."""
        self.key = key
        self.value = value
        """The node's KV slots, if the host binds slots (``None`` when hollow)."""
        self.start = start
        """Key-unit position of the node's first unit in every sequence through it."""
        self.num_tokens = num_tokens
        """KV tokens the node covers (kept while hollow)."""
        self.lock_ref = 0
        """Locks on paths through the node (running requests)."""
        self.waiting_ref = 0
        """Waiting requests whose match runs through the node (``touch_waiting``)."""
        self.last_access = now
        self.created = now
        self.hit_count = 0
        """Requests that inserted through the node (its creator included)."""
        self.priority = 0
        self.sibling_key = sibling_key
        """Orders siblings as they were attached (SGLang's insertion-ordered dict)."""
        self.version = 0
        """Moves whenever the node's eviction entries may be stale."""
        self.attached = True
        self.hollow = False
        """Keys kept, KV freed: a gap in every path through the node."""
        self.on_host = False
        """A hollow node whose KV the host tier holds (``radix.host.HostTier``)."""
        self.host_stamp = 0
        """Age of the host copy (the tier drops the oldest first)."""
        self.host_copy: object = None
        """The host's handle of the copied KV (``HostCopies``), if it keeps one."""
        self.session: str | None = None
        """First session that inserted through the node."""
        self.others: set[str] | None = None
        """Other sessions that did."""

    @property
    def kv_tokens(self) -> int:
        """KV tokens the node owns (0 when hollow)."""
        return 0 if self.hollow else self.num_tokens

    @property
    def end(self) -> int:
        """Key-unit position one past the node's last unit."""
        return self.start + len(self.key)

    def add_session(self, session: str) -> None:
        """Record that ``session`` inserted through the node."""
        if self.session is None:
            self.session = session
        elif session != self.session:
            if self.others is None:
                self.others = {session}
            else:
                self.others.add(session)


class Inserted(NamedTuple, Generic[K, V]):
    """What ``GapTree.insert`` did."""

    prefix_len: int
    """Key units the tree held before (hollow ones included)."""
    node: Node[K, V]
    """The node the inserted path ends in."""
    num_new_tokens: int
    """Tokens of the new leaf (0 if the whole key was in the tree)."""
    adopted: list[tuple[int, int]]
    """Unit ranges of the value the tree took: hollow nodes it filled, the new
    leaf. NOTE: the rest of ``value[:prefix_len]`` stays the caller's."""


def first_gap(path: list[Node[K, V]]) -> int:
    """Index of the first hollow node on ``path`` (``len(path)`` if none): the
    nodes before it are the contiguous cached prefix."""
    return next((i for i, n in enumerate(path) if n.hollow), len(path))


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Adjacent half-open ranges merged (input in ascending order)."""
    merged: list[tuple[int, int]] = []
    for start, end in ranges:
        if merged and merged[-1][1] == start:
            merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def unadopted(adopted: Iterable[tuple[int, int]], prefix_len: int,
              start: int = 0) -> list[tuple[int, int]]:
    """Ranges of ``[start, prefix_len)`` outside the ascending ``adopted``
    ranges: what an insert left the caller (``Inserted.adopted``), i.e. the
    duplicates of slots the tree already held, which the caller frees."""
    dups, pos = [], start
    for s, e in adopted:
        if s >= prefix_len:
            break
        if s > pos:
            dups.append((pos, s))
        pos = max(pos, e)
    if pos < prefix_len:
        dups.append((pos, prefix_len))
    return dups
