"""The trace-replay simulator: SGLang's scheduler loop, prefix cache and KV pool
over a roofline cost model, driven by the same pure policies as the server.

========================= =====================================================
module                    mirrors (SGLang 0.5.23)
========================= =====================================================
``engine.Simulator``      ``Scheduler.get_next_batch_to_run`` / event loop
``queue.WaitingQueue``    ``SchedulePolicy.calc_priority`` (+ Switchboard seam)
``prefill.PrefillAdder``  ``PrefillAdder`` / ``PrefillBudget``
``running.RunningBatch``  ``ScheduleBatch`` decode + ``retract_decode`` order
``cache.PrefixCache``     ``RadixCache`` (match, insert, lock, evict)
``cost.CostModel``        the GPU (roofline per forward pass)
``cluster.Cluster``       SMG, the gateway, in front of N replicas (``+router``)
``speculative``           NGRAM/EAGLE draft-and-verify decode steps (``+speculative``)
``tiers.TierLevels``      HiCache's host memory and storage below the device (``+tier``)
========================= =====================================================

Each kind attaches its policy through its simulator binding
(``compose.kinds.Kind.sim_binding``; the contract in ``binding.py``, the
server-side kinds in ``bindings.py``, the gateway's in ``cluster_run.py``,
speculation's in ``speculative.py``, the tiers' in ``tiers.py``).
"""

from __future__ import annotations

from array import array

import numpy as np

from bench.metrics import RequestRecord, Timeline
from bench.sim.binding import SimParts
from bench.sim.cache import PrefixCache
from bench.sim.cost import CostModel, IterationCost
from bench.sim.engine import SimulationError, Simulator
from bench.sim.hybrid import HybridCache
from bench.sim.queue import WaitingQueue
from bench.sim.request import Phase, SimRequest
from bench.sim.settings import SimSettings
from bench.traces.trace import Trace
from policies.cache import EvictionPolicy
from policies.cache.lru import LruPolicy
from policies.feedback import ObservesFinished

__all__ = ["CostModel", "SimParts", "SimSettings", "Simulator", "SimulationError", "TimelineSampler",
           "build_simulator", "records_of"]


def build_simulator(trace: Trace, cost: IterationCost, settings: SimSettings, parts: SimParts | None = None,
                    ) -> Simulator:
    """A simulator for ``trace`` with the chosen kinds' ``parts`` (``binding.sim_parts``);
    a part left empty behaves as stock SGLang (queue kept in arrival order, LRU
    eviction, no seam on any event: every request admitted, no adapters). The
    cache gets a host tier of ``parts.host_tier_tokens`` (the cache kind's) or
    ``settings.host_tier_tokens`` (SGLang's own, modelled), whichever is set, or
    a kind's levels (``parts.host_levels``), bound to the simulator's clock.
    The order is told of every finished request first, then ``parts.observers``."""
    parts = parts if parts is not None else SimParts()
    order, eviction = parts.order, parts.eviction
    # NOTE: LruPolicy satisfies EvictionPolicy at run time; mypy refuses it only because it declares
    # `needs` as a ClassVar where the Protocol (policies/cache) declares an instance attribute.
    policy: EvictionPolicy = eviction if eviction is not None else LruPolicy()  # type: ignore[assignment]
    # NOTE: at most one is set (compose/compat.py, the cache binding's HiCache refusal)
    tier = parts.host_tier_tokens or settings.host_tier_tokens
    built: list[Simulator] = []
    levels = None
    if parts.host_levels is not None:
        # NOTE: a kind's levels replace the token-count tier (compose/compat.py refuses both)
        unit = max(trace.block_size, 1)
        host = parts.host_levels.bind(lambda: built[0].now, settings.capacity, cost.kv_bytes_per_token, unit)
        levels = (parts.host_levels, host)
    cache: PrefixCache
    if settings.hybrid is not None:
        # NOTE: the model's kind, not a policy's: KV tiers beside it are refused before (bench/config.py)
        cache = HybridCache(max(trace.block_size, 1), policy, settings.hybrid, cost.kv_bytes_per_token,
                            parts.snapshot_store_bytes, parts.snapshot_read_tokens, settings.host_bandwidth_gbs,
                            host_kv_tokens=settings.host_tier_tokens)
    else:
        cache = PrefixCache(max(trace.block_size, 1), policy, host_tier_tokens=tier,
                            host_bandwidth_gbs=settings.host_bandwidth_gbs, levels=levels)
    queue = WaitingQueue(cache, order, in_batch_threshold=settings.in_batch_threshold,
                         native_queue_limit=settings.native_queue_limit,
                         touch=settings.touch_waiting, refresh_waiting=policy.needs.refresh_waiting)
    cache.touch_waiting = queue.touch_every_pass
    # NOTE: the order's feedback first, then the others' in binding order, as the server's scheduler feeds them
    # NOTE: `is not None` first: mypy takes isinstance(Optional[Protocol], other Protocol) to be never true.
    told: list[ObservesFinished] = [order] if order is not None and isinstance(order, ObservesFinished) else []
    sim = Simulator(trace, cost, settings, queue=queue, cache=cache, seams=parts.seams,
                    observers=told + list(parts.observers))
    built.append(sim)
    return sim


class TimelineSampler:
    """Samples queue length and KV use at most every ``dt`` simulated seconds."""

    def __init__(self, dt: float) -> None:
        self.dt = dt
        self._next = 0.0
        self._rows = array("d")

    def __call__(self, sim: Simulator) -> None:
        if sim.now < self._next:
            return
        self._next = sim.now + self.dt
        used = sim.cache.tree_tokens + sim.private_tokens
        self._rows.extend((sim.now, len(sim.queue), len(sim.running), used, sim.cache.tree_tokens))

    def timeline(self, capacity: int) -> Timeline:
        rows = np.frombuffer(self._rows, dtype=np.float64).reshape(-1, 5)
        return Timeline(t=rows[:, 0].copy(), waiting=rows[:, 1].astype(int),
                        running=rows[:, 2].astype(int), kv_used=rows[:, 3].astype(np.int64),
                        kv_cached=rows[:, 4].astype(np.int64), capacity=capacity)


def _token_times(r: SimRequest, step_end_times: np.ndarray) -> np.ndarray:
    parts = []
    for t, start, end in r.segments:
        parts.append(np.array([t]))
        parts.append(step_end_times[start:end])
    for step, tokens in r.extra_tokens:  # accepted drafts come out with their step's token
        parts.append(np.full(tokens, step_end_times[step]))
    if not parts:
        return np.empty(0)
    times = np.concatenate(parts)
    return np.sort(times, kind="stable") if r.extra_tokens else times


def records_of(sim: Simulator, with_token_times: bool = True) -> list[RequestRecord]:
    """One ``RequestRecord`` per request the simulator saw, in arrival order."""
    steps = np.frombuffer(sim.running.step_end_times, dtype=np.float64)
    out = []
    for r in sorted(sim.requests.values(), key=lambda r: (r.arrival_s, r.seq)):
        status = r.phase.value if r.phase in (Phase.FINISHED, Phase.REJECTED, Phase.ABORTED,
                                              Phase.UNSERVED) else "unserved"
        out.append(RequestRecord(
            rid=r.rid, arrival_s=r.arrival_s, status=status, input_tokens=r.input_len,
            output_tokens=r.num_output, cached_tokens=r.cached_first,
            prefill_tokens=r.prefill_tokens, first_token_s=r.first_token_s, finish_s=r.finish_s,
            token_times=_token_times(r, steps) if with_token_times and r.segments else None,
            retractions=r.retractions, session_id=r.trace.session_id, reason=r.reject_reason,
        ))
    return out
