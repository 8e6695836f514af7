"""BENCH-ONLY ORACLE: DWISE's order with the true remaining rounds.

``OracleDwise`` orders exactly as ``policies.scheduling.dwise.DwisePolicy``
(aging first, then least work left, ties by arrival), but its work left is
the hidden truth: prompt blocks left plus the denoising rounds the request
will really take, read from the simulator (``bind_truth``). No host could
know it; it exists to bound what a perfect estimator would give. It lives
here, not under ``policies/``, and no ``+policy=`` option names it: the
bench selects it with ``sim.dllm.oracle=true`` next to ``+policy=dwise``,
whose slots, round capacity and ``max_wait_rounds`` it keeps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from policies.scheduling import OrderDecision, RoundsNeeds, SchedulingNeeds
from policies.scheduling.rounds import RoundRequestView, RoundView


@runtime_checkable
class ReadsHiddenTruth(Protocol):
    """A bench-only policy the simulator hands its hidden truth to."""

    def bind_truth(self, rounds_left: Callable[[str], int]) -> None:
        """``rounds_left(rid)``: the rounds the request still takes, truly."""
        ...


class OracleDwise:
    """DWISE with perfect knowledge of each request's remaining rounds (module docs)."""

    def __init__(self, slots: int, round_blocks: int, max_wait_rounds: int) -> None:
        if slots < 1 or not 1 <= round_blocks <= slots or max_wait_rounds < 1:
            raise ValueError("need slots >= 1, 1 <= round_blocks <= slots and max_wait_rounds >= 1")
        self.needs = SchedulingNeeds(cache_hits=False, queue=False,
                                     rounds=RoundsNeeds(slots=slots, round_blocks=round_blocks))
        self.max_wait_rounds = max_wait_rounds
        self._rounds_left: Callable[[str], int] | None = None

    def bind_truth(self, rounds_left: Callable[[str], int]) -> None:
        self._rounds_left = rounds_left

    def order_round(self, view: RoundView) -> OrderDecision:
        truth = self._rounds_left
        if truth is None:
            raise RuntimeError("OracleDwise runs only inside the dLLM simulator (no truth bound)")

        def key(r: RoundRequestView) -> tuple[int, int, int]:
            # NOTE: the same key shape as DwisePolicy.order_round, truth in place of the estimate
            waited = r.progress.rounds_waited
            if waited >= self.max_wait_rounds:
                return 0, -waited, r.arrival_seq
            return 1, truth(r.rid), r.arrival_seq

        return OrderDecision(tuple(r.rid for r in sorted(view.requests, key=key)))
