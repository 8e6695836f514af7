"""The replayable workload: requests, their prefix blocks and session links.

A ``Trace`` is what every loader produces and every transform and the
simulator consume. Two kinds of request live in it:

* *roots* (``after is None``) arrive open-loop at ``arrival_s``;
* *followers* (``after`` names another request) are closed-loop: the client
  sends them ``delay_s`` after the request named by ``after`` completed (a
  conversation turn after the previous turn's answer plus think time).

Prefix information is a list of block ids per request (``block_ids``), one per
``block_size`` tokens of the prompt, in order. Block ids are *prefix-chained*:
an id determines the whole prefix up to and including its block (Mooncake's
and kv-cache-tester's hashes are; loaders keep it so). Block ``i`` of a request
covers tokens ``[i*bs, min((i+1)*bs, input_tokens))``; a prompt may be longer
than its blocks cover (an unhashed tail, never cacheable).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True, eq=False)
class TraceRequest:
    """One request of a trace."""

    rid: str
    """Unique id within the trace."""
    arrival_s: float
    """Open-loop arrival time in seconds from the trace start (roots); for
    followers the recorded time, kept for reference only."""
    input_tokens: int
    """Prompt tokens."""
    output_tokens: int
    """Tokens to generate (the request's ``max_new_tokens``)."""
    block_ids: array[int] | None = None
    """Prefix-chained block ids (``array('q')``), or ``None`` without prefix
    information."""
    session_id: str | None = None
    """Conversation/agent session, when the trace has one."""
    after: str | None = None
    """For closed-loop requests: the rid whose completion releases this one."""
    delay_s: float = 0.0
    """For closed-loop requests: client think time after ``after`` completed."""
    priority: int | None = None
    """User priority, when the trace has one."""

    def block_tokens(self, block_size: int, index: int) -> int:
        """Tokens block ``index`` covers (only a prompt's last block may be short)."""
        return min(block_size, self.input_tokens - index * block_size)


@dataclass(frozen=True)
class Trace:
    """A workload ready to replay (see module docs)."""

    name: str
    """Human-readable name (the config's ``trace.name``)."""
    requests: tuple[TraceRequest, ...]
    """All requests; roots sorted by ``arrival_s``."""
    block_size: int = 0
    """Tokens per prefix block; 0 when the trace carries no prefix blocks."""
    block_id_span: int = 0
    """Every block id lies in ``[0, block_id_span)`` (fresh ids start here)."""
    session_scoped_blocks: bool = False
    """Whether block ids are private to a session (kv-cache-tester) rather
    than shared by the whole trace (Mooncake)."""
    source: str = ""
    """Where the requests came from (file or folder)."""
    notes: tuple[str, ...] = field(default=())
    """Loader remarks worth reporting (skipped rows, synthesized times)."""

    def roots(self) -> Iterator[TraceRequest]:
        """Open-loop requests, in arrival order."""
        return (r for r in self.requests if r.after is None)

    @property
    def duration_s(self) -> float:
        """Span of the open-loop arrivals, in seconds."""
        times = [r.arrival_s for r in self.roots()]
        return max(times) - min(times) if times else 0.0

    def validate(self) -> None:
        """Raise ``ValueError`` unless ids are unique, links resolve and block
        lists fit their prompts."""
        rids: set[str] = set()
        last_arrival = -math.inf
        for r in self.requests:
            if r.rid in rids:
                raise ValueError(f"trace {self.name}: duplicate rid {r.rid!r}")
            rids.add(r.rid)
            if r.input_tokens < 1 or r.output_tokens < 1:
                raise ValueError(f"trace {self.name}: {r.rid} needs >= 1 input and output token")
            if r.after is None:
                if r.arrival_s < last_arrival:
                    raise ValueError(f"trace {self.name}: roots are not sorted by arrival ({r.rid})")
                last_arrival = r.arrival_s
            if r.block_ids is not None:
                if self.block_size < 1:
                    raise ValueError(f"trace {self.name}: {r.rid} has blocks but block_size is 0")
                if len(r.block_ids) > math.ceil(r.input_tokens / self.block_size):
                    raise ValueError(f"trace {self.name}: {r.rid} has more blocks than its prompt")
        for r in self.requests:
            if r.after is not None and r.after not in rids:
                raise ValueError(f"trace {self.name}: {r.rid} follows unknown rid {r.after!r}")
