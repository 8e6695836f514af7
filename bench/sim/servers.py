"""The simulated deployment: one entry, ``simulate``, for every simulated run.

What runs is chosen by the plan and the bindings, never by a kind's name:

* the gateway's record (``Scope.gateway``) may carry a ``deployment``: the
  kind that fronts several servers (``+router``, ``cluster_run.py``) replays
  the trace over its replicas, each built by ``one_server``'s engine;
* otherwise one server replays it, and the *served model* (the plan's model
  kind, ``sim.dllm.enabled``) picks the server's loop: SGLang's autoregressive
  scheduler (``engine.Simulator``) or its diffusion-LM block rounds
  (``bench.sim.dllm``).

Every path returns the same triple: the records, the timeline and the run's
meta (``meta.iterations`` and ``meta.simulated_s`` always; the rest by path).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from bench.metrics import RequestRecord, Timeline
from bench.sim import CostModel, SimSettings, TimelineSampler, build_simulator, records_of
from bench.sim.arrivals import paced
from bench.sim.binding import Scope, counter_names, sim_parts
from bench.sim.hybrid import HybridCache
from bench.sim.overlap import IterationLog, client_visible, overlap_charged
from bench.traces import Trace
from compose.config import ConfigError

if TYPE_CHECKING:
    from bench.config import BenchSettings

log = logging.getLogger("switchboard.bench")

Result = tuple[list[RequestRecord], Timeline, dict[str, Any]]
"""What a simulated run gives: records, timeline, meta."""


def simulate(settings: BenchSettings, trace: Trace, cost: CostModel, sim_settings: SimSettings,
             on_final: Callable[[Any], None]) -> Result:
    """Replay ``trace`` on the simulated deployment ``settings`` describe (module docs)."""
    if settings.sim.replicas < 1:
        raise ConfigError(f"sim.replicas must be >= 1, got {settings.sim.replicas}")
    try:
        # NOTE: every path below (a gateway's, a diffusion LM's) replays the paced trace
        trace = paced(trace, sim_settings.send_interval_s)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    gateway = sim_parts(settings, Scope.gateway)
    if gateway.deployment is not None:
        return gateway.deployment(settings, trace, cost, sim_settings, on_final)
    if settings.sim.replicas != 1:
        raise ConfigError(f"sim.replicas={settings.sim.replicas} needs +router=<option> (the gateway's routing policy)")
    return one_server(settings, trace, cost, sim_settings, on_final)


def one_server(settings: BenchSettings, trace: Trace, cost: CostModel, sim_settings: SimSettings,
               on_final: Callable[[Any], None]) -> Result:
    """One simulated SGLang server, its loop the served model's (module docs)."""
    # NOTE: the model kind, not a policy kind: SGLang runs a diffusion LM in its own loop
    if settings.sim.dllm.enabled:
        return _diffusion_server(settings, trace, cost, sim_settings, on_final)
    return _autoregressive_server(settings, trace, cost, sim_settings, on_final)


def _autoregressive_server(settings: BenchSettings, trace: Trace, cost: CostModel, sim_settings: SimSettings,
                           on_final: Callable[[Any], None]) -> Result:
    log.info("bench: KV pool %d tokens, %d request slots", sim_settings.capacity,
             sim_settings.max_running_requests)
    parts = sim_parts(settings, Scope.replica)
    charged, sync = overlap_charged(cost, settings.accelerator, parts.overlap_off)
    # NOTE: logged on a synchronous device with or without the overlap loop's lag (``sync``
    # implies a synchronous device): SGLang's own step counters (meta.engine_counters) are
    # rebuilt from the log either way
    iterations = IterationLog(charged, lagged=sync) if settings.accelerator.synchronous_forward else None
    sim = build_simulator(trace, iterations if iterations is not None else charged, sim_settings, parts)
    if iterations is not None:
        iterations.clock = lambda: sim.now
    sampler = TimelineSampler(settings.metrics.timeline_dt_s)
    sim.on_sample, sim.on_final = sampler, on_final
    sim.run()
    records = records_of(sim)
    if iterations is not None and sync:
        records = client_visible(records, iterations)
    meta = {
        "sim": asdict(sim_settings), "iterations": sim.num_iterations,
        "decode_steps": sim.running.step, "simulated_s": sim.now,
        "evicted_tokens": sim.cache.num_evicted_tokens,
        "evicted_recomputed_tokens": sim.evicted_recomputed_tokens,
        "reusable_tokens": sim.reusable_tokens,
        "gap_recomputed_tokens": sim.gap_recomputed_tokens,
        # NOTE: every kind's counters, 0 where it is not chosen (SimBinding.counters)
        **dict.fromkeys(counter_names(), 0), **sim.counters(),
        "restored_tokens": sim.restored_tokens,
        **({"overlap_off": list(parts.overlap_off)} if parts.overlap_off else {}),
        "token_times": "as clients see them (synchronous forward: one iteration late)" if sync
        else "iteration ends",
    }
    if isinstance(sim.cache, HybridCache):
        meta["hybrid"] = sim.cache.report()
    if iterations is not None:
        # NOTE: SGLang's own accounting, comparable with a live run's (bench.counters).
        meta["engine_counters"] = iterations.engine_counters().to_dict()
    return records, sampler.timeline(sim_settings.capacity), meta


def _diffusion_server(settings: BenchSettings, trace: Trace, cost: CostModel, sim_settings: SimSettings,
                      on_final: Callable[[Any], None]) -> Result:
    """A diffusion LM's block rounds (``sim.dllm.enabled``; ``bench/sim/dllm``)."""
    from bench.sim.dllm import simulate as simulate_rounds

    order = sim_parts(settings, Scope.replica).rounds
    records, timeline, meta, _ = simulate_rounds(trace, settings.sim.dllm, cost, order,
                                                 settings.sim.max_running_requests, settings.metrics.timeline_dt_s,
                                                 sim_settings.capacity, on_final=on_final)
    log.info("bench: dLLM %s: %d slots, %d blocks per round, %d rounds", meta["order"], meta["slots"],
             meta["round_blocks"], meta["rounds"])
    # NOTE: "iterations" are dLLM rounds here (the summary's wording is shared)
    return records, timeline, {"dllm": meta, "iterations": meta["rounds"], "simulated_s": meta["simulated_s"]}
