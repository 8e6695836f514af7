"""Trace requests as a small model can serve them: scaled lengths and token-id prompts.

``shape_trace`` scales a trace's prompt and output lengths (and its prefix
block size with the prompts), caps them, and drops what still cannot fit; the
simulator and a live replay both run the shaped trace, so they see the same
requests. ``PromptSynth`` turns a shaped request into the token ids a live
replay sends:

* prefix block ``b`` is ``block_size`` tokens drawn from ``hash(seed, b)``, so
  equal block ids give equal token blocks and, block ids being prefix-chained,
  equal leading blocks give equal prompt prefixes: the server's prefix cache
  sees the trace's sharing, no more and no less;
* the part of a prompt no block covers (an unhashed tail, or a whole prompt of a
  trace without blocks) is drawn from ``hash(seed, rid)``: private to its request;
* every token id lies in ``[token_id_low, token_id_high)``, away from special tokens.

Tokens come from a counter-based hash (SplitMix64), not a stateful generator:
a token depends only on the seed, its block (or request) and its position.
"""

from __future__ import annotations

import hashlib
import math
from array import array
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from bench.traces.trace import Trace, TraceRequest

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
#: Top key bit: set for request-private tails, clear for block ids.
_TAIL_BIT = 1 << 63


@dataclass(frozen=True)
class Shape:
    """How trace lengths become lengths a small model serves (``LiveConfig`` fields)."""

    input_scale: float = 1.0
    output_scale: float = 1.0
    max_input_tokens: Optional[int] = None
    max_output_tokens: Optional[int] = None

    @property
    def is_identity(self) -> bool:
        return (self.input_scale == 1.0 and self.output_scale == 1.0
                and self.max_input_tokens is None and self.max_output_tokens is None)


@dataclass(frozen=True)
class ShapedTrace:
    """A shaped trace and what shaping left out."""

    trace: Trace
    dropped_too_long: int
    """Requests whose scaled prompt + output exceed ``max_total_tokens``."""
    dropped_followers: int
    """Closed-loop requests dropped because a request they follow was."""
    max_total_tokens: int
    """The fit limit: the most prompt + output tokens a kept request may have."""


class ShapeError(ValueError):
    """A shape the trace cannot take (a config mistake, not a bug)."""


def scaled_block_size(block_size: int, input_scale: float) -> int:
    """Tokens per block after scaling; raises unless it is a whole number >= 1."""
    exact = block_size * input_scale
    size = round(exact)
    if size < 1 or abs(exact - size) > 1e-9 * max(1.0, exact):
        raise ShapeError(f"live.input_scale={input_scale} makes the trace's {block_size}-token "
                         f"blocks {exact:g} tokens; choose a scale giving whole blocks "
                         f"(e.g. {16 / block_size:g} -> 16)")
    return size


def _scaled(n: int, scale: float) -> int:
    # NOTE: ceil (a scaled prompt keeps every block it had); the epsilon keeps
    # exact products such as 1024 * 0.0625 from rounding up on float noise.
    return max(1, math.ceil(n * scale - 1e-9))


def shape_request(r: TraceRequest, shape: Shape, old_bs: int, new_bs: int) -> TraceRequest:
    """``r`` with scaled, capped lengths and its blocks cut to the new prompt."""
    if r.block_ids is not None and old_bs > 0:
        # NOTE: exact integer ceil(input * new/old): every block keeps >= 1 token.
        n_in = max(1, -(-r.input_tokens * new_bs // old_bs))
    else:
        n_in = _scaled(r.input_tokens, shape.input_scale)
    if shape.max_input_tokens is not None:
        n_in = min(n_in, shape.max_input_tokens)
    n_out = _scaled(r.output_tokens, shape.output_scale)
    if shape.max_output_tokens is not None:
        n_out = min(n_out, shape.max_output_tokens)
    blocks = r.block_ids
    if blocks is not None:
        # NOTE: chained ids: a prefix of the list is the prompt prefix's blocks.
        blocks = array("q", blocks[: math.ceil(n_in / new_bs)]) or None
    return replace(r, input_tokens=n_in, output_tokens=n_out, block_ids=blocks)


def shape_trace(trace: Trace, shape: Shape, max_total_tokens: int) -> ShapedTrace:
    """Scale, cap, then drop requests with prompt + output > ``max_total_tokens``
    and every closed-loop request following a dropped one (transitively)."""
    new_bs = scaled_block_size(trace.block_size, shape.input_scale) if trace.block_size else 0
    shaped = [shape_request(r, shape, trace.block_size, new_bs) for r in trace.requests]
    too_long = {r.rid for r in shaped if r.input_tokens + r.output_tokens > max_total_tokens}
    gone = set(too_long)
    followers: dict[str, list[str]] = {}
    for r in shaped:
        if r.after is not None:
            followers.setdefault(r.after, []).append(r.rid)
    stack = list(too_long)
    while stack:
        for f in followers.get(stack.pop(), ()):
            if f not in gone:
                gone.add(f)
                stack.append(f)
    kept = tuple(r for r in shaped if r.rid not in gone)
    note = (f"shaped for live replay: prompts x{shape.input_scale:g}, outputs x{shape.output_scale:g}, "
            f"caps {shape.max_input_tokens}/{shape.max_output_tokens}, block size {new_bs}; "
            f"dropped {len(too_long)} over {max_total_tokens} tokens and "
            f"{len(gone) - len(too_long)} following them")
    out = replace(trace, requests=kept, block_size=new_bs, notes=(*trace.notes, note))
    out.validate()
    return ShapedTrace(out, len(too_long), len(gone) - len(too_long), max_total_tokens)


def _splitmix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer, element-wise on uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        return z ^ (z >> np.uint64(31))


def _rid_key(rid: str) -> int:
    """A stable 63-bit key of a request id (Python's ``hash`` is salted per process)."""
    return int.from_bytes(hashlib.blake2b(rid.encode(), digest_size=8).digest(), "little") >> 1


class PromptSynth:
    """Deterministic token-id prompts for shaped trace requests (see module docs)."""

    def __init__(self, block_size: int, low: int, high: int, seed: int = 0) -> None:
        if not 0 <= low < high:
            raise ValueError(f"empty token id range [{low}, {high})")
        self.block_size = block_size
        self.low, self.span = low, high - low
        self._seed = _splitmix(np.array([seed], dtype=np.uint64))[0]

    def _tokens(self, keys: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Token ids for (uint64 key, position) pairs."""
        with np.errstate(over="ignore"):
            h = _splitmix(_splitmix(keys ^ self._seed) + positions.astype(np.uint64))
        return self.low + (h % np.uint64(self.span)).astype(np.int64)

    def block(self, block_id: int, n: Optional[int] = None) -> np.ndarray:
        """The first ``n`` (default: all) tokens of block ``block_id``."""
        n = self.block_size if n is None else n
        return self._tokens(np.full(n, block_id, dtype=np.uint64), np.arange(n))

    def prompt(self, r: TraceRequest) -> list[int]:
        """The ``r.input_tokens`` token ids of ``r``'s prompt."""
        bs = self.block_size
        n_blocks = len(r.block_ids) if r.block_ids is not None else 0
        covered = min(n_blocks * bs, r.input_tokens)
        pos = np.arange(r.input_tokens, dtype=np.int64)
        keys = np.empty(r.input_tokens, dtype=np.uint64)
        if covered:
            # NOTE: block ids are >= 0 (``Trace.block_id_span``), so their keys
            # have the top bit clear and never meet a tail key.
            ids = np.frombuffer(r.block_ids, dtype=np.int64).astype(np.uint64)
            keys[:covered] = ids[pos[:covered] // bs]
            pos[:covered] %= bs
        if covered < r.input_tokens:
            keys[covered:] = np.uint64(_TAIL_BIT | _rid_key(r.rid))
        return self._tokens(keys, pos).tolist()
