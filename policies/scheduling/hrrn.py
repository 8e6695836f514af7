"""``+policy=hrrn``: SGLang's highest-response-ratio-next with token-based aging."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from policies.scheduling import OrderDecision, QueueView, SchedulingNeeds, ordered_by
from policies.views import RequestView


@dataclass(frozen=True)
class HrrnPolicy:
    """Highest ``waited_prefill_tokens / uncached_prompt_tokens`` first.

    Waiting is measured on the host's prefill-token clock, so the ratio is the
    classic ``1 + wait / service`` at constant throughput. Requests with nothing
    to prefill go first, in-batch duplicates last, ties by rid (as SGLang).
    Inside SGLang: ``--schedule-policy hrrn``.
    """

    needs: ClassVar[SchedulingNeeds] = SchedulingNeeds(sglang_native="hrrn")

    def order(self, queue: QueueView) -> OrderDecision:
        def key(r: RequestView) -> tuple[float, str]:
            if r.in_batch_duplicate:
                return (float("inf"), r.rid)
            # SGLang counts the original prompt only here (not resumed output).
            uncached = max(0, r.num_input_tokens - r.num_output_tokens - r.num_cached_tokens)
            if uncached <= 0:
                return (-float("inf"), r.rid)
            waited = max(0, queue.processed_tokens - r.arrival_processed_tokens)
            return (-waited / uncached, r.rid)

        return ordered_by(queue, key)
