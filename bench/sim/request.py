"""A request's mutable state inside the simulator.

Lifecycle (``Phase``; the only transitions the engine makes)::

    PENDING --arrive--> WAITING --prefill (last chunk)--> RUNNING --last token--> FINISHED
                │          │  └-prefill (not last)--> PREFILLING --last chunk--> RUNNING
                │          └<-----------------retract (KV full)------------------ RUNNING
                └-admission REJECT--> REJECTED      (also from WAITING, while deferred)
    WAITING/RUNNING --can never fit--> ABORTED;  WAITING (deferred) --drain timeout--> UNSERVED

KV it holds (``NOTE``: the engine keeps ``sum(private_tokens)`` in step)::

    | prefix blocks in the tree (locked) | own blocks in the tree (locked) | private tokens |
      cached at admission                  inserted after its prefill        partial block,
                                                                             unhashed tail, output
"""

from __future__ import annotations

import enum
from array import array

from bench.sim.cache import Node
from bench.traces.trace import TraceRequest
from policies.views import RequestView


class Phase(enum.Enum):
    """Where a request is (see module docs)."""

    PENDING = "pending"
    WAITING = "waiting"
    PREFILLING = "prefilling"
    RUNNING = "running"
    FINISHED = "finished"
    REJECTED = "rejected"
    ABORTED = "aborted"
    UNSERVED = "unserved"


#: Phases a request never leaves.
FINAL = frozenset({Phase.FINISHED, Phase.REJECTED, Phase.ABORTED, Phase.UNSERVED})


class SimRequest:
    """One request's state (see module docs)."""

    __slots__ = (
        "trace", "rid", "input_len", "output_len", "blocks", "arrival_s", "seq", "queue_time",
        "arrival_processed_tokens", "phase", "deferred", "num_output", "match_blocks",
        "match_node", "match_tokens", "dirty", "lock_node", "inserted_blocks", "computed",
        "private_tokens", "decode_from", "first_token_s", "finish_s", "cached_first",
        "prefill_tokens", "retractions", "segments", "view", "dup", "path", "waiter_node",
        "reject_reason", "features", "row", "adapter", "extra_tokens",
    )

    def __init__(self, trace: TraceRequest, arrival_s: float) -> None:
        self.trace = trace
        self.rid = trace.rid
        self.input_len = trace.input_tokens
        self.output_len = trace.output_tokens
        self.adapter: str | None = None
        """The adapter the request uses (``None``: the base model)."""
        self.blocks: array[int] | None = trace.block_ids
        self.arrival_s = arrival_s
        """When the client sent it (for closed-loop requests: release time)."""
        self.seq = -1
        """Arrival order, stamped once at the first queue entry."""
        self.queue_time = arrival_s
        """Last entry into the waiting queue (SGLang ``wait_queue_entry_time``)."""
        self.arrival_processed_tokens = 0
        self.phase = Phase.PENDING
        self.deferred = False
        self.num_output = 0
        # prefix match (kept current while waiting)
        self.match_blocks = 0
        self.match_node: Node | None = None
        self.match_tokens = 0
        self.dirty = True
        self.waiter_node: Node | None = None
        # while prefilling / running
        self.lock_node: Node | None = None
        self.inserted_blocks = 0
        self.computed = 0
        self.private_tokens = 0
        self.decode_from = 0
        # results
        self.first_token_s: float | None = None
        self.finish_s: float | None = None
        self.cached_first: int | None = None
        self.prefill_tokens = 0
        self.retractions = 0
        self.segments: list[tuple[float, int, int]] = []
        """Per prefill: (time its token came out, first decode step, end step)."""
        self.extra_tokens: list[tuple[int, int]] = []
        """``(decode step, tokens)``: accepted drafts, beyond the step's one token."""
        self.view: RequestView | None = None
        self.dup = False
        self.path: tuple[int, ...] = ()
        self.reject_reason = ""
        self.features: tuple[float, ...] | None = None
        """What a LEAP host captures at prefill (simulated: settings.length_signal)."""
        self.row = -1
        """Its row in the queue's column store while waiting (``bench/sim/columns.py``)."""

    @property
    def fill_len(self) -> int:
        """Tokens a prefill must cover: the prompt plus output generated so far."""
        return self.input_len + self.num_output

    def cached_tokens(self) -> int:
        """SGLang's ``num_matched_prefix_tokens``: the match, at most fill - 1."""
        return min(self.match_tokens, self.fill_len - 1)

    def make_view(self) -> RequestView:
        """The ``RequestView`` policies see (cached until a field changes)."""
        if self.view is None:
            self.view = RequestView(
                rid=self.rid, arrival_seq=self.seq, arrival_time=self.queue_time,
                num_input_tokens=self.fill_len, num_cached_tokens=self.cached_tokens(),
                max_new_tokens=self.output_len, num_output_tokens=self.num_output,
                arrival_processed_tokens=self.arrival_processed_tokens,
                in_batch_duplicate=self.dup, priority=self.trace.priority,
                session_id=self.trace.session_id, prefix_path=self.path,
                features=self.features,
            )
        return self.view
