"""The host's side of the speculative contract inside SGLang's scheduler process.

One ``DraftLengthHost`` per SGLang scheduler: the NGRAM worker asks it for
each decode step's length (``ask``), tells it the step's wall time when the
forward returns (``stepped``), and SGLang's result processor reports each
request's accepted drafts (``verified``, from ``on_verify_complete_cpu``),
which completes the ``SpecOutcome`` the policy observes (and, with
``speculative.step_log``, a JSONL row with the step's request ids).

NOTE: overlap scheduling is off with ``+speculative`` (``binding.py``), so the
forward of step ``t`` and the report of its results come before step ``t+1``
is asked: one step pending at most.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from policies.speculative import (
    ObservesSpecOutcome,
    SpecOutcome,
    SpecStepView,
    SpeculationPolicy,
    check_decision,
    check_outcome,
)

log = logging.getLogger("switchboard.speculative")


@dataclass
class _Pending:
    rids: tuple[str, ...]
    draft: int
    seconds: float


class DraftLengthHost:
    """Asks the policy, remembers the step, reports its outcome (see module docs)."""

    def __init__(self, policy: SpeculationPolicy, longest: int, step_log: str | None = None) -> None:
        self.policy = policy
        self.log = open(step_log, "a", buffering=1) if step_log else None
        self.candidates = tuple(range(longest + 1))
        self.observer = policy if isinstance(policy, ObservesSpecOutcome) else None
        self.current = 0
        self._pending: _Pending | None = None
        self.observed: list[SpecOutcome] = []
        """Every outcome handed to the policy (bounded: the last ``KEEP``), for tests and logs."""

    KEEP = 4096

    def ask(self, batch_size: int) -> int:
        """The draft length of a decode step of ``batch_size`` requests."""
        view = SpecStepView(decode_batch_size=batch_size, candidates=self.candidates, current=self.current)
        return check_decision(view, self.policy.needs, self.policy.draft_length(view)).draft_tokens

    def stepped(self, rids: tuple[str, ...], draft: int, seconds: float) -> None:
        """The decode step of requests ``rids`` (drafting and verify) returned after ``seconds``."""
        self.current = draft
        self._pending = _Pending(rids, draft, seconds)

    def verified(self, accepted: list[int]) -> None:
        """SGLang processed the step's results: ``accepted[i]`` drafts of request ``i`` kept."""
        step, self._pending = self._pending, None
        if step is None or len(accepted) != len(step.rids):
            return  # NOTE: a result without a decode step of ours (an extend batch)
        # NOTE: the policy gets the time only if its needs ask (the contract); the log always has it
        timed = step.seconds if self.policy.needs.step_timing else 0.0
        outcome = check_outcome(SpecOutcome(len(step.rids), step.draft, tuple(accepted), timed))
        if self.log is not None:
            self.log.write(json.dumps({"rids": step.rids, "draft": step.draft, "accepted": accepted,
                                       "step_time_s": step.seconds}) + "\n")
        self.observed.append(outcome)
        if len(self.observed) > self.KEEP:
            del self.observed[: len(self.observed) - self.KEEP]
        if self.observer is not None:
            self.observer.observe_step(outcome)
