"""``+toy=hold``: hold every ``every``-th scheduler pass; count finished requests."""

from __future__ import annotations

from policies.feedback import FinishedView
from tests.toykind import ToyDecision, ToyNeeds, ToyView


class HoldPolicy:
    """Holds every ``every``-th pass (0: never) and counts the requests seen finishing."""

    def __init__(self, every: int = 0, conservativeness: float = 1.0) -> None:
        if every < 0:
            raise ValueError("every must be >= 0")
        self.every = every
        self.needs = ToyNeeds(conservativeness=conservativeness)
        self.decided = 0
        self.finished: list[str] = []

    def decide(self, view: ToyView) -> ToyDecision:
        self.decided += 1
        return ToyDecision(run=not (self.every and view.passes % self.every == 0))

    def observe_finished(self, view: FinishedView) -> None:
        self.finished.append(view.rid)
