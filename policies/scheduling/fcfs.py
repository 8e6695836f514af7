"""``+policy=fcfs``: SGLang's default first-come-first-served order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from policies.scheduling import OrderDecision, QueueView, RoundsNeeds, SchedulingNeeds


@dataclass(frozen=True)
class FcfsPolicy:
    """The host's queue order, untouched: new arrivals join the back, and so do
    retracted requests (SGLang's fcfs does not sort; a retracted request goes
    behind the ones already waiting). Inside SGLang: ``--schedule-policy fcfs``.
    For a diffusion LM it is SGLang's stock dLLM scheduling (arrival order into
    the slots, prompt blocks before denoising blocks)."""

    needs: ClassVar[SchedulingNeeds] = SchedulingNeeds(sglang_native="fcfs", rounds=RoundsNeeds())
    """SGLang's own order of the queue and of a diffusion LM's rounds (its slots, its budget)."""

    def order(self, queue: QueueView) -> OrderDecision:
        return OrderDecision(tuple(r.rid for r in queue.requests))
