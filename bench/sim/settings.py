"""Resolved simulator settings: config defaults filled the way SGLang fills them."""

from __future__ import annotations

from dataclasses import dataclass

from bench.schema import AcceleratorConfig, HybridSimConfig, ModelProfileConfig, SimConfig, TouchMode
from bench.sim.cost import CostModel
from bench.sim.signal import LengthSignal


@dataclass(frozen=True)
class SimSettings:
    """Every number the simulator loop reads (see ``SimConfig`` for meanings)."""

    capacity: int
    """KV pool size in tokens (SGLang ``max_total_num_tokens``)."""
    max_running_requests: int
    chunked_prefill_size: int | None
    """None: chunked prefill off."""
    max_prefill_tokens: int
    prefill_max_requests: int | None
    context_length: int
    ignore_eos: bool = True
    clip_max_new_tokens: int = 4096
    init_new_token_ratio: float = 0.7
    min_new_token_ratio: float = 0.098
    new_token_ratio_decay: float = (0.7 - 0.098) / 600
    retract_decode_steps: int = 20
    in_batch_threshold: int = 32
    native_queue_limit: bool = True
    touch_waiting: bool = True
    idle_poll_s: float = 0.05
    drain_timeout_s: float = 600.0
    send_interval_s: float = 0.0
    length_signal: LengthSignal | None = None
    host_tier_tokens: int = 0
    """SGLang's own host tier, modelled (``sim.hicache_tokens``); 0 = none. The cache
    kind's own (``cache.host_tier_tokens``) comes with its parts (``SimParts.host_tier_tokens``)."""
    host_bandwidth_gbs: float = 50.0
    hybrid: HybridSimConfig | None = None
    """A hybrid model's snapshots (``sim.hybrid``); ``None``: attention only."""

    @classmethod
    def resolve(cls, sim: SimConfig, accel: AcceleratorConfig, model: ModelProfileConfig,
                cost: CostModel) -> SimSettings:
        """SGLang's derivations: pool size from memory, request slots from the
        pool (``clamp(pool / context * 512, 2048, 4096)``) unless the simulation
        or the device's deployment fixes them, chunk size per device,
        new-token ratio schedule from ``schedule_conservativeness``."""
        capacity = sim.max_total_tokens if sim.max_total_tokens is not None else cost.kv_capacity_tokens()
        if capacity < 2:
            raise ValueError(f"sim.max_total_tokens must be >= 2, got {capacity}")
        slots = sim.max_running_requests if sim.max_running_requests is not None else accel.max_running_requests
        if slots is None:
            slots = max(min(int(capacity / model.context_length * 512), 4096), 2048)
        chunk = accel.chunked_prefill_size if sim.chunked_prefill_size is None else sim.chunked_prefill_size
        init = min(sim.init_new_token_ratio * sim.schedule_conservativeness, 1.0)
        low = min(init * sim.min_new_token_ratio_factor, 1.0)
        return cls(
            capacity=int(capacity), max_running_requests=int(slots),
            chunked_prefill_size=int(chunk) if chunk and chunk > 0 else None,
            max_prefill_tokens=sim.max_prefill_tokens, prefill_max_requests=sim.prefill_max_requests,
            context_length=model.context_length, ignore_eos=sim.ignore_eos,
            clip_max_new_tokens=sim.clip_max_new_tokens, init_new_token_ratio=init,
            min_new_token_ratio=low, new_token_ratio_decay=(init - low) / sim.new_token_ratio_decay_steps,
            retract_decode_steps=sim.retract_decode_steps,
            in_batch_threshold=sim.in_batch_prefix_threshold,
            native_queue_limit=sim.native_queue_limit,
            touch_waiting=TouchMode(sim.touch_waiting_prefixes) is TouchMode.auto,
            idle_poll_s=sim.idle_poll_s, drain_timeout_s=sim.drain_timeout_s, send_interval_s=sim.send_interval_s,
            length_signal=(None if sim.length_signal_log_std is None else LengthSignal(
                sim.length_signal_log_std, sim.length_signal_log_mean, sim.length_signal_seed)),
            host_tier_tokens=sim.hicache_tokens, host_bandwidth_gbs=sim.host_bandwidth_gbs,
            hybrid=sim.hybrid if sim.hybrid.enabled else None,
        )
