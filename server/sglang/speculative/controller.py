"""The host's side of the speculative contract inside SGLang's scheduler process.

One ``DraftLengthHost`` per SGLang scheduler: the NGRAM worker asks it for
each decode step's length (``ask``), tells it the step's requests and wall
time when the forward returns (``stepped``), and SGLang's result processor
reports each request's accepted drafts (``verified``, from
``on_verify_complete_cpu``), which completes the ``SpecOutcome`` the policy
observes (``policies.speculative.host.SpeculationHost``, the simulator's
exchange too) and, with ``speculative.step_log``, a JSONL row with the step's
request ids and its measured time.

NOTE: overlap scheduling is off with ``+speculative`` (``binding.py``), so the
forward of step ``t`` and the report of its results come before step ``t+1``
is asked: one step pending at most.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from policies.speculative import SpeculationPolicy
from policies.speculative.host import SpeculationHost


@dataclass
class _Pending:
    rids: tuple[str, ...]
    draft: int
    seconds: float


class DraftLengthHost:
    """Asks the policy, remembers the step, reports its outcome (see module docs)."""

    def __init__(self, policy: SpeculationPolicy, candidates: tuple[int, ...], step_log: str | None = None) -> None:
        self.host = SpeculationHost(policy, candidates)
        self.log = open(step_log, "a", buffering=1) if step_log else None
        self._pending: _Pending | None = None

    def ask(self, batch_size: int) -> int:
        """The draft length of a decode step of ``batch_size`` requests."""
        return self.host.ask(batch_size)

    def stepped(self, rids: tuple[str, ...], draft: int, seconds: float) -> None:
        """The decode step of requests ``rids`` (drafting and verify) returned after ``seconds``."""
        self._pending = _Pending(rids, draft, seconds)

    def verified(self, accepted: list[int]) -> None:
        """SGLang processed the step's results: ``accepted[i]`` drafts of request ``i`` kept."""
        step, self._pending = self._pending, None
        if step is None or len(accepted) != len(step.rids):
            return  # NOTE: a result without a decode step of ours (an extend batch)
        self.host.report(step.draft, accepted, step.seconds)
        if self.log is not None:  # NOTE: the log always has the measured time
            self.log.write(json.dumps({"rids": step.rids, "draft": step.draft, "accepted": accepted,
                                       "step_time_s": step.seconds}) + "\n")
