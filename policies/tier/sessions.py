"""What a host knows of each session when it places a block: the facts behind ``PlacementView``.

Both hosts keep one ``SessionStats`` from the requests they have seen arrive
and finish, nothing later (finished ones through ``SessionFeedback``, which
also tells a policy that learns): the simulator from its arrivals and finished
requests (``bench/sim/tiers.py``), the server from SGLang's admitted and
finished requests (``server/sglang/hicache/tier_cache.py``).

NOTE: pure (no clock): it only counts what it is told.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.feedback import FinishedView, ObservesFinished
from policies.tier import TierPolicy


@dataclass
class _Seen:
    tokens: int = 0
    turns: int = 0
    last_reply: int = 0


class SessionStats:
    """Per session: its context so far, its turns and its last reply (see module docs)."""

    def __init__(self) -> None:
        self._seen: dict[str, _Seen] = {}

    def arrived(self, session: str | None, prompt_tokens: int) -> None:
        """A request of ``session`` arrived with a ``prompt_tokens`` prompt."""
        if session is None:
            return
        seen = self._seen.setdefault(session, _Seen())
        seen.turns += 1
        seen.tokens = max(seen.tokens, prompt_tokens)

    def finished(self, session: str | None, prompt_tokens: int, output_tokens: int) -> None:
        """A request of ``session`` finished: its reply is the session's last."""
        if session is None:
            return
        seen = self._seen.setdefault(session, _Seen())
        seen.last_reply = output_tokens
        seen.tokens = max(seen.tokens, prompt_tokens + output_tokens)

    def of(self, session: str | None) -> tuple[int, int, int]:
        """``(context tokens, turns, last reply tokens)`` of ``session`` (zeros if unknown or ``None``)."""
        seen = self._seen.get(session) if session is not None else None
        return (0, 0, 0) if seen is None else (seen.tokens, seen.turns, seen.last_reply)

    def forget(self, session: str) -> None:
        """``session`` ended (closed, or idle past the host's horizon): drop what was kept of it."""
        self._seen.pop(session, None)

    def __len__(self) -> int:
        return len(self._seen)


class SessionFeedback:
    """Keeps ``stats`` from finished requests and tells ``policy`` of each one when it learns
    (``ObservesFinished``); each host adds how it hears of arrivals."""

    def __init__(self, stats: SessionStats, policy: TierPolicy) -> None:
        self.stats = stats
        self.learns = policy if isinstance(policy, ObservesFinished) else None

    def observe_finished(self, view: FinishedView) -> None:
        if not view.aborted:
            self.stats.finished(view.session_id, view.num_input_tokens, view.num_output_tokens)
        if self.learns is not None:
            self.learns.observe_finished(view)
