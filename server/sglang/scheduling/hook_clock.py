"""Time spent in Switchboard's hooks inside SGLang's scheduler, by hook (issue 26, item 6).

Every place where the scheduler runs Switchboard code on SGLang's hot path
adds its own time here (``HOOK_CLOCK.add(hook, seconds)``): arrival checks,
the queue order, the per-batch events, finished-request feedback, the
eviction order's ranks, the dLLM round decisions. The scheduler subclass
marks iteration boundaries (each call of SGLang's ``get_next_batch_to_run``);
a busy iteration is the time from one boundary to the next when the first
produced a batch. The totals go to ``/metrics`` at most once a second, and
when the scheduler turns idle:

- ``switchboard_hook_seconds_total{hook=...}`` and ``switchboard_hook_calls_total{hook=...}``,
- ``switchboard_scheduler_busy_seconds_total`` and ``switchboard_scheduler_busy_iterations_total``.

Hooks' share of the scheduler's time = the sum of hook seconds / busy
seconds (under a saturating load idle iterations are rare; hook time spent
while idle, an arrival into an empty server, is counted too, so the share
errs high). What is not separated: a prefill adder a kind wraps around
SGLang's (its own checks run inside SGLang's adder calls), SGLang's batch
building inside the dLLM round host, and the tree work of a cache that
replaces SGLang's radix tree whole (the gap cache, HiState's), which SGLang's
tree would do too. Every ``eviction`` rank is timed: through SGLang's
strategy registry (``cache/eviction.py``) or, in those caches, through
``cache/timed_ranks.py``.

NOTE: one scheduler per process, so one clock per process (module level).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from server.sglang.cache.metrics import prometheus_counter

#: The hooks' names on ``/metrics`` (the ``hook`` label), in the order they are reported.
HOOKS = ("arrival", "order", "batch_formed", "batch_finished", "finished", "eviction", "dllm_rounds")
FLUSH_EVERY_S = 1.0
"""At most one push of the totals to prometheus_client per this many seconds."""


@dataclass
class HookClock:
    """Accumulated hook time and busy iterations of one scheduler process."""

    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(HOOKS, 0.0))
    calls: dict[str, int] = field(default_factory=lambda: dict.fromkeys(HOOKS, 0))
    busy_s: float = 0.0
    busy_iterations: int = 0
    _boundary: float | None = None
    _busy: bool = False
    _flushed: dict[str, float] = field(default_factory=dict)
    _last_flush: float = 0.0
    _pending: bool = False
    """Something grew since the last push."""
    metered: bool = True
    """Push the totals to prometheus_client (off in unit tests that only read the totals)."""

    def add(self, hook: str, seconds: float) -> None:
        """``seconds`` more spent in ``hook`` (one call)."""
        # NOTE: a plain float add per call; prometheus is pushed at boundaries only
        self.seconds[hook] = self.seconds.get(hook, 0.0) + seconds
        self.calls[hook] = self.calls.get(hook, 0) + 1
        self._pending = True

    def boundary(self, now: float | None = None) -> None:
        """An iteration boundary: SGLang is about to pick the next batch."""
        now = time.perf_counter() if now is None else now
        if self._busy and self._boundary is not None:
            self.busy_s += now - self._boundary
            self.busy_iterations += 1
            self._pending = True
        self._boundary, self._busy = now, False
        if self.metered and now - self._last_flush >= FLUSH_EVERY_S:
            self._last_flush = now
            self.flush()

    def picked(self, batch: Any) -> None:
        """What the iteration that began at the last boundary picked (``None``: idle)."""
        self._busy = bool(batch)  # NOTE: as SGLang's loops: ``if batch:`` runs it
        if not self._busy and self.metered and self._pending:
            # NOTE: the server may now sleep until the next request (--sleep-on-idle):
            # push the burst's last figures before it does
            self._last_flush = self._boundary or 0.0
            self.flush()

    def totals(self) -> dict[str, float]:
        """The counters' values as ``/metrics`` will show them, by metric key."""
        out = {f"seconds:{h}": s for h, s in self.seconds.items()}
        out |= {f"calls:{h}": float(n) for h, n in self.calls.items()}
        return out | {"busy_seconds": self.busy_s, "busy_iterations": float(self.busy_iterations)}

    def flush(self) -> None:
        """Push what grew since the last push to the process's counters."""
        for key, value in self.totals().items():
            delta = value - self._flushed.get(key, 0.0)
            if delta > 0:
                _counter(key).inc(delta)
                self._flushed[key] = value
        self._pending = False


def _counter(key: str) -> Any:
    """The prometheus counter (or its labelled child) behind a ``totals`` key."""
    if key == "busy_seconds":
        return prometheus_counter("switchboard_scheduler_busy_seconds",
                                  "Wall time of scheduler iterations that ran a batch")
    if key == "busy_iterations":
        return prometheus_counter("switchboard_scheduler_busy_iterations", "Scheduler iterations that ran a batch")
    what, hook = key.split(":", 1)
    name, doc = (("switchboard_hook_seconds", "Time spent in Switchboard's hooks in the scheduler, by hook")
                 if what == "seconds" else
                 ("switchboard_hook_calls", "Calls of Switchboard's hooks in the scheduler, by hook"))
    return prometheus_counter(name, doc, ("hook",)).labels(hook=hook)


HOOK_CLOCK = HookClock()
"""This process's clock (one SGLang scheduler per process)."""
