"""Trace transforms: a time window, time scaling and surge injection.

All three act on *units*: a root request plus every closed-loop request that
follows it, transitively (a whole session for kv-cache-tester, one request for
Mooncake or Azure). A unit is kept, moved or copied as a whole, so closed-loop
timing stays intact. ``load_trace`` applies them in this order: window (on the
loader's times), then scaling, then surges (on the scaled times).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from bench.traces.trace import Trace, TraceRequest


@dataclass(frozen=True)
class Surge:
    """Multiply the arrival rate of new units by ``factor`` during
    ``[start_s, end_s)`` (times after scaling)."""

    start_s: float
    end_s: float
    factor: float


def units(trace: Trace) -> list[list[TraceRequest]]:
    """Each root followed by its closed-loop followers, roots in arrival order."""
    by_rid = {r.rid: r for r in trace.requests}
    root_of: dict[str, str] = {}

    def find_root(r: TraceRequest) -> str:
        chain = []
        while r.after is not None and r.rid not in root_of:
            chain.append(r.rid)
            r = by_rid[r.after]
        root = root_of.get(r.rid, r.rid)
        for rid in chain:
            root_of[rid] = root
        return root

    members: dict[str, list[TraceRequest]] = {r.rid: [] for r in trace.roots()}
    for r in trace.requests:
        members[find_root(r)].append(r)
    return [members[r.rid] for r in trace.roots()]


def _rebuild(trace: Trace, unit_list: Sequence[Sequence[TraceRequest]], **changes: Any) -> Trace:
    roots = sorted((u[0] for u in unit_list), key=lambda r: r.arrival_s)
    rest = [r for u in unit_list for r in u[1:]]
    return replace(trace, requests=tuple(roots + rest), **changes)


def window(trace: Trace, start_s: float, end_s: float | None) -> Trace:
    """Units whose root arrives in ``[start_s, end_s)``, times rebased to ``start_s``."""
    end = math.inf if end_s is None else end_s
    if end <= start_s:
        raise ValueError(f"empty trace window [{start_s}, {end_s})")
    kept = [u for u in units(trace) if start_s <= u[0].arrival_s < end]
    moved = [[replace(r, arrival_s=r.arrival_s - start_s) for r in u] for u in kept]
    return _rebuild(trace, moved)


def scale_time(trace: Trace, factor: float) -> Trace:
    """Multiply arrival times and think times by ``factor`` (0.5 doubles the rate)."""
    if factor <= 0:
        raise ValueError(f"time_scale must be > 0, got {factor}")
    if factor == 1.0:
        return trace
    scaled = [[replace(r, arrival_s=r.arrival_s * factor, delay_s=r.delay_s * factor) for r in u]
              for u in units(trace)]
    return _rebuild(trace, scaled)


def inject_surges(trace: Trace, surges: Sequence[Surge], seed: int = 0) -> Trace:
    """Apply each surge in turn (see ``Surge`` and ``_surge``)."""
    rng = np.random.default_rng(seed)
    for s in surges:
        trace = _surge(trace, s, rng)
    return trace


def _surge(trace: Trace, s: Surge, rng: np.random.Generator) -> Trace:
    """One surge: factor ``k`` multiplies the rate of units starting in the window.

    ``k > 1``: each unit there gets ``ceil(k) - 1`` copies (the last one kept with
    probability ``k - floor(k)`` when ``k`` is fractional); copy ``j`` is the
    window's own arrival pattern phase-shifted by ``j/k`` of its length. ``k < 1``:
    each unit is kept with probability ``k``. A copy keeps the block ids its
    original shared with earlier traffic and gets fresh ids for the rest, so
    it hits the cache as its original would, but never its original's new
    content (a new user with the same shape of request).
    """
    if s.end_s <= s.start_s or s.factor < 0:
        raise ValueError(f"invalid surge {s}")
    all_units = units(trace)
    inside = [i for i, u in enumerate(all_units) if s.start_s <= u[0].arrival_s < s.end_s]
    if s.factor < 1.0:
        drop = {i for i in inside if rng.random() >= s.factor}
        return _rebuild(trace, [u for i, u in enumerate(all_units) if i not in drop])
    n_copies = math.ceil(s.factor) - 1
    frac = s.factor - math.floor(s.factor)
    seen_before = _shared_prefix_len(trace, all_units, inside)
    span, length = trace.block_id_span, s.end_s - s.start_s
    copies: list[list[TraceRequest]] = []
    copy_no = 0
    for j in range(1, n_copies + 1):
        for i in inside:
            if j == n_copies and frac > 0 and rng.random() >= frac:
                continue
            copy_no += 1
            shift = j * length / s.factor
            copies.append(_copy_unit(all_units[i], f"s{copy_no}", s.start_s, length, shift,
                                     seen_before, copy_no * span))
    return _rebuild(trace, all_units + copies, block_id_span=span * (copy_no + 1))


def _shared_prefix_len(trace: Trace, all_units: Sequence[Sequence[TraceRequest]], inside: Sequence[int]
                       ) -> dict[str, int]:
    """For each request of the surge's units: how many leading blocks it shares
    with units that arrived before its own (session-scoped ids share none)."""
    if trace.session_scoped_blocks or not inside:
        return {}
    seen: set[int] = set()
    out: dict[str, int] = {}
    inside_set = set(inside)
    for i, u in enumerate(all_units[: max(inside) + 1]):
        if i in inside_set:
            for r in u:
                blocks = r.block_ids or ()
                # NOTE: chained ids: a block unseen before makes all later ones unseen.
                k = next((n for n, b in enumerate(blocks) if b not in seen), len(blocks))
                out[r.rid] = k
        for r in u:
            seen.update(r.block_ids or ())
    return out


def _copy_unit(unit: Sequence[TraceRequest], tag: str, start: float, length: float, shift: float,
               shared: dict[str, int], id_offset: int) -> list[TraceRequest]:
    rid_map = {r.rid: f"{r.rid}@{tag}" for r in unit}
    root_t = start + ((unit[0].arrival_s - start + shift) % length)
    out = []
    for r in unit:
        blocks = r.block_ids
        if blocks is not None:
            keep = shared.get(r.rid, 0)
            tail = np.frombuffer(blocks, dtype=np.int64)[keep:] + id_offset
            blocks = array("q", blocks[:keep]) + array("q", tail.tobytes())
        out.append(replace(
            r, rid=rid_map[r.rid], block_ids=blocks,
            arrival_s=root_t + (r.arrival_s - unit[0].arrival_s),
            after=rid_map.get(r.after) if r.after is not None else None,
            session_id=f"{r.session_id}@{tag}" if r.session_id else None,
        ))
    return out
