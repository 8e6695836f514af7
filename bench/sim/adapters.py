"""The adapters seam, as SGLang's LoRA scheduling and memory pool apply it.

* Each request carries an adapter (``AdapterMix``: drawn per session, or per
  request without sessions, from a stable hash of its id, so every policy sees
  the same assignment; a live client names it in the request just the same).
* Prefill (``Scheduler.can_schedule_lora_req``): a waiting request whose
  adapter is not in the batch and would bring the distinct adapters of the
  running batch plus this pass past ``max_per_batch`` is skipped, not a stop.
* Every forward batch (``LoRAMemoryPool.prepare_lora_batch``): the batch's
  adapters are marked used; each that is not resident takes a free slot or
  evicts the candidate the policy picks (never one the batch uses, the base
  model's slot last) and costs ``load_s``.

NOTE: SGLang keys its prefix cache by adapter as well; the simulator's cache
does not, which matters only for prefixes shared across adapters (with
per-session adapters: across sessions).

``AdapterSeam`` is the adapters kind's seam on the simulator's events
(``events.py``): it tags arrivals, filters the walk and loads each batch's
adapters; ``bindings.py`` puts it on the replica's record.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from policies.adapters import AdaptersPolicy
from policies.adapters.history import SlotHistory

if TYPE_CHECKING:
    from bench.sim.request import SimRequest


@dataclass(frozen=True)
class AdapterMix:
    """Which adapter each request uses."""

    count: int
    """Adapters in the deployment (named ``a0`` .. ``a{count-1}``)."""
    zipf_s: float = 1.0
    """Popularity skew: adapter of rank ``k`` is drawn with weight ``1 / (k+1)^s``."""
    base_share: float = 0.0
    """Share of sessions that use the base model (no adapter)."""
    seed: int = 0

    def __post_init__(self) -> None:
        if self.count < 1 or not 0.0 <= self.base_share < 1.0 or self.zipf_s < 0:
            raise ValueError(f"adapter mix needs count >= 1, 0 <= base_share < 1, zipf_s >= 0: {self}")

    @functools.cached_property
    def _weights(self) -> list[float]:
        """Popularity weight of each rank (computed once, not per request)."""
        return [1.0 / (k + 1) ** self.zipf_s for k in range(self.count)]

    def adapter_of(self, key: str) -> str | None:
        """The adapter of the session (or request) ``key``."""
        digest = hashlib.blake2b(f"{self.seed}:{key}".encode(), digest_size=16).digest()
        u_base = int.from_bytes(digest[:8], "big") / 2**64
        if u_base < self.base_share:
            return None
        u = int.from_bytes(digest[8:], "big") / 2**64 * sum(self._weights)
        for k, w in enumerate(self._weights):
            u -= w
            if u < 0:
                return f"a{k}"
        return f"a{self.count - 1}"


class AdapterSlotTable:
    """Resident adapters, at most ``max_per_batch`` (base model's slot included)."""

    def __init__(self, policy: AdaptersPolicy, max_per_batch: int, load_s: float) -> None:
        if max_per_batch < 2:
            raise ValueError(f"max_per_batch must be >= 2, got {max_per_batch}")
        self.policy = policy
        self.max_per_batch = max_per_batch
        self.load_s = load_s
        self.history = SlotHistory()
        self.resident: set[str | None] = {None}
        """NOTE: SGLang loads the base model into a slot when it builds the pool."""
        self.loads = 0
        """Adapters loaded into a slot so far (the base model's not counted)."""
        self.evictions = 0

    def admits(self, adapter: str | None, batch_adapters: set[str | None]) -> bool:
        """``Scheduler.can_schedule_lora_req``: may a request for ``adapter``
        join a batch already holding ``batch_adapters``?"""
        return adapter in batch_adapters or len(batch_adapters) + 1 <= self.max_per_batch

    def prepare(self, adapters: Iterable[str | None]) -> float:
        """A forward batch uses ``adapters``: load the missing ones; the load time."""
        uids = sorted(set(adapters), key=lambda u: (u is not None, u or ""))
        if len(uids) > self.max_per_batch:
            raise ValueError(f"a batch with {len(uids)} adapters exceeds max_per_batch={self.max_per_batch}")
        self.history.next_batch()
        for uid in uids:
            self.history.mark_used(uid)
        loaded = 0
        for uid in uids:
            if uid in self.resident:
                continue
            if len(self.resident) >= self.max_per_batch:
                candidates = self.resident - set(uids)
                # NOTE: SGLang evicts the base model's slot only when nothing else may go.
                victim = self.history.choose(self.policy, (candidates - {None}) or candidates)
                self.history.remove(victim)
                self.resident.discard(victim)
                self.evictions += 1
            self.resident.add(uid)
            loaded += uid is not None
        self.loads += loaded
        return loaded * self.load_s


class NamesAdapter(Protocol):
    """Which adapter a session (or request) names (``AdapterMix``, or a test's fixed map)."""

    def adapter_of(self, key: str) -> str | None:
        """The adapter of the session (or request) ``key``."""
        ...


class AdapterSeam:
    """The adapters kind in one simulator (module docs): ``TagsArrival``,
    ``FiltersWalk``, ``OnBatchFormed`` and ``CountsWork`` of ``events.py``."""

    def __init__(self, table: AdapterSlotTable, mix: NamesAdapter | None = None) -> None:
        self.table = table
        self.mix = mix
        """``None``: the trace's requests name no adapter (all use the base model)."""
        self._batch: set[str | None] = set()
        """Adapters of the running batch and of this pass's walk so far."""

    def tag(self, r: SimRequest) -> None:
        if self.mix is not None:
            r.adapter = self.mix.adapter_of(r.trace.session_id or r.rid)

    def walk_started(self, running: Iterable[SimRequest], batch: Iterable[SimRequest]) -> None:
        self._batch = {r.adapter for r in running} | {r.adapter for r in batch}

    def admits(self, r: SimRequest) -> bool:
        return self.table.admits(r.adapter, self._batch)

    def walked(self, r: SimRequest) -> None:
        self._batch.add(r.adapter)

    def batch_formed(self, requests: Sequence[SimRequest], prefill: bool) -> float:
        return self.table.prepare(r.adapter for r in requests)

    def counters(self) -> dict[str, int]:
        return {ADAPTER_LOADS: self.table.loads, ADAPTER_EVICTIONS: self.table.evictions}


#: The run meta's counters of the adapters kind (``AdapterSeam.counters``; 0 without it).
ADAPTER_LOADS, ADAPTER_EVICTIONS = "adapter_loads", "adapter_evictions"
