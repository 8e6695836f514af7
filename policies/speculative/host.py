"""The host's side of the speculative contract, one piece for both hosts.

The server's NGRAM worker (``server/sglang/speculative/controller.py``) and
the simulator's decode-step seam (``bench/sim/speculative.py``) both ask the
policy for each decode step's length and report the verified step back; this
is that exchange, so the two hosts cannot drift apart: the view they build,
the checks they run on every decision and outcome, the ``current`` length,
and the step time handed over only when the policy's needs ask for it.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.speculative import (
    ObservesSpecOutcome,
    SpecOutcome,
    SpecStepView,
    SpeculationPolicy,
    TakesStepTable,
    check_decision,
    check_outcome,
    load_step_table,
)


def seed_from_table(policy: SpeculationPolicy, path: str | None) -> None:
    """Hand a policy that ``TakesStepTable`` the table file ``path`` names (``None``:
    nothing); ``ValueError`` naming ``speculative.table_path`` if it cannot be read."""
    table = load_step_table(path)
    if table is not None and isinstance(policy, TakesStepTable):
        policy.seed_step_times(table)


class SpeculationHost:
    """Asks ``policy`` each decode step's length; reports each verified step to it."""

    def __init__(self, policy: SpeculationPolicy, candidates: tuple[int, ...]) -> None:
        self.policy = policy
        self.candidates = candidates
        """The lengths the host can run (``SpeculativeHostConfig.candidates``)."""
        self.current = 0
        """The length of the last verified step (0 before the first)."""
        self._observer = policy if isinstance(policy, ObservesSpecOutcome) else None

    def ask(self, batch_size: int) -> int:
        """The draft length of a decode step of ``batch_size`` requests (checked)."""
        view = SpecStepView(decode_batch_size=batch_size, candidates=self.candidates, current=self.current)
        return check_decision(view, self.policy.needs, self.policy.draft_length(view)).draft_tokens

    def report(self, draft: int, accepted: Sequence[int], seconds: float) -> SpecOutcome:
        """A step of length ``draft`` was verified: ``accepted[i]`` drafts of request ``i``
        kept, after ``seconds``. Returns the outcome the policy saw (checked).

        NOTE: the policy gets the time only if its needs ask for it (the contract)."""
        self.current = draft
        timed = seconds if self.policy.needs.step_timing else 0.0
        outcome = check_outcome(SpecOutcome(len(accepted), draft, tuple(accepted), timed))
        if self._observer is not None:
            self._observer.observe_step(outcome)
        return outcome
