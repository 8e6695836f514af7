"""A ``KeyIndex`` that walks the tree: keys of tokens matched page by page.

``PagedKeys`` matches any ``PagedKey`` (SGLang's ``RadixKey`` is one:
``child_key_at``/``match_at``) by walking down from the root, as SGLang's
radix tree does; it keeps no index, so its hooks do nothing. ``TokenKey`` is
a plain ``PagedKey`` over a tuple of ints (tests, tools).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any, Generic, Protocol, Self, TypeVar, overload

from radix.node import Key, Node


class PagedKey(Key, Protocol):
    """A key matched in pages of ``page_size`` units (SGLang's ``RadixKey`` shape)."""

    def child_key_at(self, offset: int, page_size: int) -> Hashable:
        """Hashable key of the page starting at unit ``offset``."""
        ...

    def match_at(self, other: Self, offset: int, page_size: int) -> int:
        """Leading units of this key equal to ``other[offset:]``, in whole pages."""
        ...


PK = TypeVar("PK", bound=PagedKey)


class PagedKeys(Generic[PK]):
    """Walks ``PagedKey``s down from the root (see module docs)."""

    def __init__(self, page_size: int = 1) -> None:
        self.page_size = page_size

    def edge(self, key: PK) -> Hashable:
        return key.child_key_at(0, self.page_size)

    def locate(self, root: Node[PK, Any], key: PK) -> tuple[int, Node[PK, Any]]:
        node, offset, page, n = root, 0, self.page_size, len(key)
        while offset + page <= n:
            child = node.children.get(key.child_key_at(offset, page))
            if child is None:
                break
            matched = child.key.match_at(key, offset, page)
            if matched == 0:
                break
            if matched < len(child.key):
                return offset + matched, child
            node, offset = child, offset + matched
        return offset, node

    def attached(self, node: Node[PK, Any]) -> None:
        pass

    def split(self, head: Node[PK, Any], tail: Node[PK, Any]) -> None:
        pass

    def detached(self, node: Node[PK, Any]) -> None:
        pass


class TokenKey:
    """An immutable run of int token ids, a ``PagedKey``."""

    __slots__ = ("ids",)

    def __init__(self, ids: Iterable[int]) -> None:
        self.ids = tuple(ids)

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, index: slice, /) -> TokenKey: ...

    @overload
    def __getitem__(self, index: int, /) -> int: ...

    def __getitem__(self, index: slice | int, /) -> TokenKey | int:
        if isinstance(index, slice):
            return TokenKey(self.ids[index])
        return self.ids[index]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TokenKey) and self.ids == other.ids

    def __hash__(self) -> int:
        return hash(self.ids)

    def __repr__(self) -> str:
        return f"TokenKey({list(self.ids)})"

    def child_key_at(self, offset: int, page_size: int) -> Hashable:
        return self.ids[offset] if page_size == 1 else self.ids[offset:offset + page_size]

    def match_at(self, other: TokenKey, offset: int, page_size: int) -> int:
        n = min(len(self.ids), len(other.ids) - offset)
        i = 0
        while i < n and self.ids[i] == other.ids[offset + i]:
            i += 1
        return i // page_size * page_size
