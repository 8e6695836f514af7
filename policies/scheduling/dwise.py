"""``+policy=dwise``: DWISE for diffusion LMs: least estimated work left first,
counted in block rounds, prompt and denoising blocks sharing each round.

* **Work.** A request's work left is its prompt blocks still to prefill plus
  its denoising rounds still to run (``policies.scheduling.rounds``: a prompt
  block and a denoising step are one block-forward each, so they count the
  same).
* **Estimates.** The denoising rounds a request needs are unknown at arrival.
  They are estimated from the prompt's word, line and token counts
  (``ArrivalRoundsRegression``, learned online from every finished request, or
  loaded), and re-estimated once, after the request's first denoising round,
  from the mean final hidden state of that round's block (``RoundsRefiner``,
  a fitted two-layer network; only when ``refiner_path`` is given). An
  estimate never exceeds what ``max_new_tokens`` allows (unless
  ``cap_by_max_new_tokens`` is off) and never falls below one round while the
  request is unfinished.
* **Order.** Each round, least estimated work left first (ties: arrival
  order), over waiting and admitted requests together; the host fills the
  round's ``round_blocks`` blocks from the front, admitting waiting requests
  into free ``slots`` as it goes.
* **Aging.** A request passed over for ``max_wait_rounds`` rounds in a row goes
  to the front, longest-waiting first. NOTE: the bound: such a request runs
  within ``ceil(slots / round_blocks)`` further rounds once it holds a slot;
  a waiting one gets a slot at the latest when the ``slots`` requests admitted
  ahead of it have finished.

NOTE: the slots hold KV for ``slots`` requests while a round runs
``round_blocks`` of them: with ``slots > round_blocks`` a short arrival starts
at once instead of waiting for a slot behind long requests. Stock SGLang runs
every admitted request each round (capacity = slots = ``max_running_requests``,
default 1); compare with stock at its best ``max_running_requests`` and at equal round
capacity (``round_blocks``), as bench/results/dwise.md does.
"""

from __future__ import annotations

from pathlib import Path

from policies.feedback import FinishedView
from policies.predictors.rounds import ArrivalRoundsRegression, RoundsRefiner
from policies.scheduling import OrderDecision, RoundsNeeds, SchedulingNeeds
from policies.scheduling.rounds import RoundRequestView, RoundView, denoise_rounds_bound
from policies.views import DllmView, RequestView


class DwisePolicy:
    """DWISE scheduling of a diffusion LM's block rounds (see module docs)."""

    def __init__(self, slots: int = 32, round_blocks: int = 16, max_wait_rounds: int = 8,
                 prior_rounds: float = 128.0, forgetting: float = 0.999, online: bool = True,
                 arrival_head_path: str | None = None, refiner_path: str | None = None,
                 record_hidden_state: bool = False, cap_by_max_new_tokens: bool = True) -> None:
        if slots < 1 or not 1 <= round_blocks <= slots or max_wait_rounds < 1:
            raise ValueError("need slots >= 1, 1 <= round_blocks <= slots and max_wait_rounds >= 1")
        self.needs = SchedulingNeeds(
            cache_hits=False, queue=False,
            rounds=RoundsNeeds(slots=slots, round_blocks=round_blocks,
                               denoise_hidden_state=refiner_path is not None or record_hidden_state))
        """Rounds only (no prefill queue); no prefix matching; the hidden-state
        capture only when a refiner is loaded or the features are recorded for
        fitting one."""
        self.max_wait_rounds = max_wait_rounds
        self.cap_by_max_new_tokens = cap_by_max_new_tokens
        self.online = online
        self.arrival = ArrivalRoundsRegression(prior_rounds, forgetting, head_path=arrival_head_path)
        self.refiner = RoundsRefiner.load(Path(refiner_path)) if refiner_path else None

    def estimate_denoise_rounds(self, request: RequestView, dllm: DllmView) -> float:
        """The request's total denoising rounds, as estimated now."""
        if self.refiner is not None and request.features is not None:
            return self.refiner.predict(request.features)
        prompt_tokens = request.num_input_tokens - request.num_output_tokens
        return self.arrival.predict(dllm.prompt_words, dllm.prompt_lines, prompt_tokens)

    def work_left(self, entry: RoundRequestView) -> float:
        """Estimated rounds left: prompt blocks + denoising rounds (>= 1 each part)."""
        request, dllm = entry.request, entry.progress
        denoise = max(self.estimate_denoise_rounds(request, dllm) - dllm.denoise_rounds, 1.0)
        if self.cap_by_max_new_tokens:
            denoise = min(denoise, denoise_rounds_bound(request, dllm))
        return dllm.prompt_blocks_left + denoise

    def order_round(self, view: RoundView) -> OrderDecision:
        def key(r: RoundRequestView) -> tuple[int, float, int]:
            waited = r.progress.rounds_waited
            if waited >= self.max_wait_rounds:
                return 0, -waited, r.arrival_seq
            return 1, self.work_left(r), r.arrival_seq

        return OrderDecision(tuple(r.rid for r in sorted(view.requests, key=key)))

    def observe_finished(self, view: FinishedView) -> None:
        if not self.online or view.aborted or view.dllm is None:
            return
        d = view.dllm
        self.arrival.update(d.prompt_words, d.prompt_lines, view.num_input_tokens, d.denoise_rounds)
