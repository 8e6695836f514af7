"""Gap-tree paths in SGLang's terms: slot tensors, gaps, and who owns which slot.

The gap cache (``gap_cache.GapRadixCache``) binds ``radix.GapTree`` values to
SGLang's KV slot-index tensors (``TensorSlots``: every node owns its own copy
and frees it through the allocator). A path through hollow nodes reads
``prefix | gap | tail | gap | tail ...`` (``GapMatch``, ``gaps_of``).

``NOTE`` (ownership): an insert adopts only the ranges of the inserted value
it stores (filled gaps, the new leaf; ``InsertResult.adopted_ranges[FULL]``);
every other slot of ``value[:prefix_len]`` duplicates one the tree already
has, and the caller frees it (``duplicate_ranges``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from sglang.srt.mem_cache import base_prefix_cache as bpc
from sglang.srt.mem_cache.unified_cache import component_type

from radix import Node, first_gap, unadopted

FULL = component_type.ComponentType.FULL

GapNode = Node[Any, torch.Tensor]
"""A node of the gap cache: ``RadixKey`` key, slot-index tensor value."""


class TensorSlots:
    """The tree's ``radix.Slots``: slot-index tensors, freed through the allocator."""

    def __init__(self, allocator: Any) -> None:
        self.allocator = allocator

    def take(self, value: torch.Tensor, start: int, end: int) -> torch.Tensor:
        return value[start:end].clone()

    def free(self, value: torch.Tensor) -> None:
        self.allocator.free_segment(value, start_pos=0)

    def size(self, value: torch.Tensor) -> int:
        return len(value)


class GapMatch(NamedTuple):
    """A match through gaps: ``prefix | gap | tail | gap | tail ...``."""

    prefix_indices: torch.Tensor
    """Slots of the contiguous cached prefix (what ``match_prefix`` returns)."""
    gaps: list[tuple[int, int]]
    """Token positions ``[start, end)`` of each gap, in order."""
    tail: list[tuple[int, int, torch.Tensor]]
    """Cached segments after the first gap: ``(start, end, slots)``."""
    last_node: Any
    """Node the whole match ends in: lock it before filling gaps."""
    matched_len: int
    """Tokens the match covers (prefix, gaps and tail)."""


def cat_slots(values: list[torch.Tensor], empty: torch.Tensor) -> torch.Tensor:
    """The slots of consecutive nodes as one tensor (``empty`` if none)."""
    return torch.cat(values) if values else empty


def gaps_of(path: list[GapNode], root: GapNode, empty: torch.Tensor) -> GapMatch:
    """What ``path`` (from the root, hollow nodes included) holds, gap by gap."""
    gap = first_gap(path)
    prefix = cat_slots([n.value for n in path[:gap]], empty)
    gaps: list[tuple[int, int]] = []
    tail: list[tuple[int, int, list[torch.Tensor]]] = []
    for n in path[gap:]:
        if n.hollow:
            if gaps and gaps[-1][1] == n.start:
                gaps[-1] = (gaps[-1][0], n.end)
            else:
                gaps.append((n.start, n.end))
        elif tail and tail[-1][1] == n.start:
            tail[-1] = (tail[-1][0], n.end, tail[-1][2] + [n.value])
        else:
            tail.append((n.start, n.end, [n.value]))
    return GapMatch(prefix, gaps, [(s, e, cat_slots(v, empty)) for s, e, v in tail],
                    path[-1] if path else root, path[-1].end if path else 0)


def duplicate_ranges(result: bpc.InsertResult, start: int = 0) -> list[tuple[int, int]]:
    """Ranges of ``value[start:result.prefix_len]`` the insert did not adopt:
    duplicates of slots the tree already had, which the caller frees."""
    return unadopted((result.adopted_ranges or {}).get(FULL, []), result.prefix_len, start)
