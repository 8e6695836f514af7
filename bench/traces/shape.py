"""Trace requests as a small model can serve them: scaled lengths, capped and dropped.

``shape_trace`` scales a trace's prompt and output lengths (and its prefix
block size with the prompts), caps them, and drops what still cannot fit; the
simulator and a live replay both run the shaped trace, so they see the same
requests (``bench.live.workload.PromptSynth`` turns a shaped request into the
token ids a live replay sends).
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, replace

from bench.traces.trace import Trace, TraceRequest


@dataclass(frozen=True)
class Shape:
    """How trace lengths become lengths a small model serves (``LiveConfig`` fields)."""

    input_scale: float = 1.0
    output_scale: float = 1.0
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None

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
