"""``+admission=basin``: session admission against a load-adaptive KV reservation budget.

Rules:

* **Sessions.** A request belongs to ``request.session_id`` (a request without
  one is a session of its own that ends when it finishes). A session ends when
  it has been idle (no request in flight) for ``idle_timeout_s`` or when the
  host calls ``end_session``.
* **Reservation.** Admitting a session reserves its predicted maximum context
  (``SessionLifetimePredictor``) from the budget ``kv_capacity * budget_fraction``.
  Each later request of the session corrects the reservation upward if the
  session outgrows it; ending the session releases it and teaches the predictor.
* **Holding new sessions.** Requests of admitted sessions are always admitted.
  A new session's first request is admitted only when its reservation fits and
  no older new session is held; otherwise it is deferred (held) in arrival
  order, up to ``max_held`` of them; beyond that, or after ``max_wait_s`` held,
  it is rejected with ``Retry-After: retry_after_s``. With no session admitted
  at all, a session is admitted whatever its prediction (no deadlock).
* **Adaptive budget.** Every ``adapt_interval_s`` the policy looks at the
  history tokens of admitted sessions' later turns that missed the prefix
  cache (their previous context, minus what was cached at prefill), relative
  to the *reference*: the lowest miss rate of the previous
  ``reference_intervals`` intervals (what this workload's cache achieves at
  best; misses that no admission level avoids, e.g. think times longer than
  any cache residency, are not a signal). More than ``unhealthy_miss_rate``
  above the reference, the fraction shrinks by ``shrink_factor`` (not below
  ``min_budget_fraction``); less than ``healthy_miss_rate`` above it, it grows by
  ``grow_step`` (not above ``max_budget_fraction``), but only if the budget
  turned a session away in that interval (a budget that does not bind has
  nothing to learn from a healthy cache). That is the recompute
  loop Basin breaks: too little cache -> recomputation -> slower turns ->
  longer sessions -> even less cache. A fraction above 1 overcommits: sessions
  rarely sit at their predicted maximum all at once, so while the cache stays
  healthy the budget may grow past the pool.

NOTE: all time is host time from the views; state changes only inside
``decide``/``observe_finished``/``end_session``, deterministically.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import ClassVar

from policies.admission import ADMIT, AdmissionAction, AdmissionDecision, AdmissionNeeds, AdmissionView
from policies.admission.lifetime import SessionLifetimePredictor, SessionSample
from policies.feedback import FinishedView


@dataclass
class _Session:
    first_context: int
    max_context: int
    reserved: int
    last_seen: float
    turns: int = 1
    in_flight: int = 1
    finished_context: int = 0
    """Context after the last finished turn (what the cache should still hold)."""
    single: bool = False
    """A request without a session id: ends when it finishes."""


class BasinPolicy:
    """Basin session admission (see module docs)."""

    needs: ClassVar[AdmissionNeeds] = AdmissionNeeds(defers=True)
    """A new session waits (``DEFER``) while the budget is spent."""

    def __init__(self, budget_fraction: float = 1.5, min_budget_fraction: float = 0.3,
                 max_budget_fraction: float = 3.0, shrink_factor: float = 0.8,
                 grow_step: float = 0.01, unhealthy_miss_rate: float = 0.2,
                 healthy_miss_rate: float = 0.05, adapt_interval_s: float = 10.0,
                 reference_intervals: int = 60,
                 idle_timeout_s: float = 30.0, max_held: int = 256, max_wait_s: float = 5.0,
                 retry_after_s: float = 5.0, quantile: float = 0.8, prior_growth: float = 4.0) -> None:
        if not 0 < min_budget_fraction <= budget_fraction <= max_budget_fraction:
            raise ValueError("need 0 < min_budget_fraction <= budget_fraction <= max_budget_fraction")
        if not 0 < shrink_factor < 1 or healthy_miss_rate > unhealthy_miss_rate:
            raise ValueError("need 0 < shrink_factor < 1 and healthy_miss_rate <= unhealthy_miss_rate")
        self.budget_fraction = budget_fraction
        self.min_fraction, self.max_fraction = min_budget_fraction, max_budget_fraction
        self.shrink_factor, self.grow_step = shrink_factor, grow_step
        self.unhealthy, self.healthy = unhealthy_miss_rate, healthy_miss_rate
        self.adapt_interval_s, self.idle_timeout_s = adapt_interval_s, idle_timeout_s
        self.max_held, self.max_wait_s, self.retry_after_s = max_held, max_wait_s, retry_after_s
        self.predictor = SessionLifetimePredictor(quantile=quantile, prior_growth=prior_growth)
        self.sessions: dict[str, _Session] = {}
        self.held: OrderedDict[str, float] = OrderedDict()  # rid -> first held at
        self.reserved = 0
        self._missed = self._history = 0
        self._last_adapt: float | None = None
        self._limited = False
        """Whether the budget turned a session away since the last adaptation."""
        self._recent_miss: deque[float] = deque(maxlen=max(1, reference_intervals))
        """Miss rates of the previous intervals (the reference is their minimum)."""

    @staticmethod
    def _sid(session_id: str | None, rid: str) -> str:
        return session_id if session_id is not None else f"request:{rid}"

    def decide(self, view: AdmissionView) -> AdmissionDecision:
        now, r = view.now, view.request
        self._expire(now)
        sid = self._sid(r.session_id, r.rid)
        peak = r.num_input_tokens + r.max_new_tokens
        s = self.sessions.get(sid)
        if s is not None:  # NOTE: requests of admitted sessions are never held
            s.turns += 1
            s.in_flight += 1
            s.last_seen = now
            s.max_context = max(s.max_context, peak)
            self._reserve(s, max(s.reserved, self.predictor.predict(s.first_context, peak, s.turns)))
            return ADMIT
        need = self.predictor.predict(peak, peak, 1)
        first_in_line = not self.held or next(iter(self.held)) == r.rid
        fits = self.reserved + need <= view.kv_capacity_tokens * self.budget_fraction
        self._limited |= not fits
        if first_in_line and (fits or not self.sessions):
            self.held.pop(r.rid, None)
            self.sessions[sid] = _Session(peak, peak, 0, now, single=r.session_id is None)
            self._reserve(self.sessions[sid], need)
            return ADMIT
        held_since = self.held.get(r.rid)
        if held_since is None and len(self.held) >= self.max_held:
            return self._reject(f"{len(self.held)} new sessions already held (max_held={self.max_held})")
        if held_since is not None and now - held_since >= self.max_wait_s:
            del self.held[r.rid]
            return self._reject(f"held {now - held_since:.0f} s for KV budget (max_wait_s={self.max_wait_s:g})")
        self.held.setdefault(r.rid, now)
        return AdmissionDecision(AdmissionAction.DEFER, reason="KV reservation budget spent")

    def observe_finished(self, view: FinishedView) -> None:
        self.held.pop(view.rid, None)
        s = self.sessions.get(self._sid(view.session_id, view.rid))
        if s is not None:
            s.in_flight = max(0, s.in_flight - 1)
            s.last_seen = view.now
            if s.finished_context and not view.aborted:
                expected = min(s.finished_context, view.num_input_tokens)
                self._history += expected
                self._missed += max(0, expected - view.num_cached_tokens)
            context = view.num_input_tokens + view.num_output_tokens
            s.finished_context = context
            s.max_context = max(s.max_context, context)
            if s.single:
                self.end_session(self._sid(None, view.rid), view.now)
        self._adapt(view.now)

    def end_session(self, session_id: str, now: float) -> None:
        """The session ended (explicitly or idle): release its reservation, learn from it."""
        s = self.sessions.pop(session_id, None)
        if s is None:
            return
        self.reserved -= s.reserved
        self.predictor.learn(SessionSample(s.first_context, s.max_context, s.turns))

    def _reserve(self, s: _Session, amount: int) -> None:
        self.reserved += amount - s.reserved
        s.reserved = amount

    def _reject(self, reason: str) -> AdmissionDecision:
        return AdmissionDecision(AdmissionAction.REJECT, retry_after_s=self.retry_after_s, reason=reason)

    def _expire(self, now: float) -> None:
        for sid in [sid for sid, s in self.sessions.items()
                    if s.in_flight == 0 and now - s.last_seen > self.idle_timeout_s]:
            self.end_session(sid, now)

    def _adapt(self, now: float) -> None:
        if self._last_adapt is None:
            self._last_adapt = now
        if now - self._last_adapt < self.adapt_interval_s or self._history == 0:
            return
        miss = self._missed / self._history
        excess = miss - (min(self._recent_miss) if self._recent_miss else 0.0)
        self._recent_miss.append(miss)
        if excess > self.unhealthy:
            self.budget_fraction = max(self.min_fraction, self.budget_fraction * self.shrink_factor)
        elif excess < self.healthy and self._limited:
            # NOTE: grow only a budget that binds (as TCP grows only a window
            # the sender fills): a calm period must not bank headroom that the
            # next surge would spend at once.
            self.budget_fraction = min(self.max_fraction, self.budget_fraction + self.grow_step)
        self._missed = self._history = 0
        self._limited = False
        self._last_adapt = now
