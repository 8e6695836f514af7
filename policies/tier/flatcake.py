"""``+tier=flatcake``: host memory and SSD as one level; each session's home chosen once.

Rules, at a block's first backup below the device:

* **Shared prefixes** (a path another session already used: system prompts,
  shared documents) live in host memory: they are read by many sessions.
* **A session's private blocks** all share one home, chosen at the session's
  first private block and never changed (its blocks stay together and never
  move): SSD when the session is predicted to grow past ``ssd_session_tokens``
  (the session-lifetime predictor Basin uses, learned from finished sessions),
  else host memory while it has room for the block, else SSD.
* **A request without a session** is a short exchange: host memory while it has
  room, else SSD.
* Without an SSD level everything is memory; a level without room is never the
  answer when the other has it.

Sessions are learned from finished requests (``ObservesFinished``): the first
prompt, the largest context (prompt + reply) and the number of turns. A session
idle for ``idle_timeout_s`` has ended: it teaches the predictor and is dropped.

NOTE: all time is host time from the views; state changes only inside
``place``/``observe_finished``, deterministically.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import ClassVar

from policies.admission.lifetime import SessionLifetimePredictor, SessionSample
from policies.feedback import FinishedView
from policies.tier import Home, PlacementView, TierNeeds


@dataclass
class _Session:
    first_context: int
    max_context: int
    turns: int
    last_seen: float
    home: Home | None = None


class FlatCakePolicy:
    """One level of memory and SSD; a session's home is chosen once (see module docs)."""

    needs: ClassVar[TierNeeds] = TierNeeds(ssd=True, segments=True, sessions=True)

    def __init__(self, ssd_session_tokens: int = 262144, idle_timeout_s: float = 600.0, quantile: float = 0.8,
                 history: int = 512, min_history: int = 8, prior_growth: float = 4.0,
                 max_sessions: int = 65536) -> None:
        """
        Args:
            ssd_session_tokens: a session predicted to reach this context lives on SSD
                (262144: chosen from 32768..262144 by ``bench.scripts.tiers``' rule on its tuning
                instance, session-start seed 0 on the tuning half of the sessions, never on its
                evaluation seeds; the sweep's edge).
            idle_timeout_s: a session with no request for this long has ended.
            quantile, history, min_history, prior_growth: the session-lifetime
                predictor's (``policies/admission/lifetime.py``).
            max_sessions: sessions tracked at most; the least recently seen go first.
        """
        if ssd_session_tokens < 1 or idle_timeout_s <= 0 or max_sessions < 1:
            raise ValueError("need ssd_session_tokens >= 1, idle_timeout_s > 0 and max_sessions >= 1")
        self.ssd_session_tokens = ssd_session_tokens
        self.idle_timeout_s = idle_timeout_s
        self.max_sessions = max_sessions
        self.predictor = SessionLifetimePredictor(quantile, history, min_history, prior_growth)
        # NOTE: least recently seen first (expiry walks from the front)
        self.sessions: OrderedDict[str, _Session] = OrderedDict()

    def place(self, view: PlacementView) -> Home:
        self._expire(view.now)
        if view.ssd_capacity_tokens == 0:
            return Home.MEMORY
        if view.shared:
            return Home.MEMORY
        if view.session_id is None:
            return self._while_room(view)
        session = self._seen(view.session_id, view.now, max(1, view.session_tokens))
        if session.home is None:
            context = max(view.session_tokens, view.prefix_tokens + view.tokens)
            predicted = self.predictor.predict(session.first_context, context, view.session_turns)
            big = predicted >= self.ssd_session_tokens and view.ssd_free_tokens >= view.tokens
            session.home = Home.SSD if big else self._while_room(view)
        return session.home

    def observe_finished(self, view: FinishedView) -> None:
        self._expire(view.now)
        if view.session_id is None or view.aborted:
            return
        session = self._seen(view.session_id, view.now, max(1, view.num_input_tokens))
        session.turns += 1
        session.max_context = max(session.max_context, view.num_input_tokens + view.num_output_tokens)

    @staticmethod
    def _while_room(view: PlacementView) -> Home:
        """Memory while it has room for the block, else SSD (memory if neither has room)."""
        if view.host_free_tokens >= view.tokens or view.ssd_free_tokens < view.tokens:
            return Home.MEMORY
        return Home.SSD

    def _seen(self, session_id: str, now: float, context: int) -> _Session:
        session = self.sessions.get(session_id)
        if session is None:
            session = self.sessions[session_id] = _Session(context, context, 0, now)
            while len(self.sessions) > self.max_sessions:
                self._end(next(iter(self.sessions)))
        session.last_seen = now
        self.sessions.move_to_end(session_id)
        return session

    def _expire(self, now: float) -> None:
        while self.sessions:
            oldest = next(iter(self.sessions))
            if now - self.sessions[oldest].last_seen < self.idle_timeout_s:
                return
            self._end(oldest)

    def _end(self, session_id: str) -> None:
        session = self.sessions.pop(session_id)
        if session.turns:
            self.predictor.learn(SessionSample(session.first_context, session.max_context, session.turns))
