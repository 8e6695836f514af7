"""``+speculative=static``: one draft length for every decode step (SGLang's own
``--speculative-num-draft-tokens``, the fixed-length baseline)."""

from __future__ import annotations

from policies.speculative import DraftDecision, SpecStepView, SpeculativeNeeds


class StaticPolicy:
    """Draft ``draft_tokens`` tokens in every decode step, whatever the load."""

    def __init__(self, draft_tokens: int = 3) -> None:
        if draft_tokens < 0:
            raise ValueError(f"draft_tokens must be >= 0, got {draft_tokens}")
        self.draft_tokens = draft_tokens
        """Tokens drafted per request and step (0: speculation installed, never used)."""
        self.needs = SpeculativeNeeds(draft_lengths=(draft_tokens,))
        """The one length it answers; no step timing."""
        self._decision = DraftDecision(draft_tokens, "static")

    def draft_length(self, view: SpecStepView) -> DraftDecision:
        return self._decision
