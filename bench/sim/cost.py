"""Iteration time from an accelerator spec and a model's architecture.

A roofline per forward iteration, plus a fixed overhead::

    time = overhead + max(FLOPs / (peak * mfu), bytes / (bandwidth * efficiency))

FLOPs (a multiply-add is 2 FLOPs; ``P`` = parameters of the linear layers in
the transformer blocks, ``L`` layers, ``H`` query heads of size ``d``)::

    prefill  2*P*sum(extend) + 2*hidden*vocab*requests
             + 4*L*H*d * sum(extend*prefix + extend*(extend+1)/2)   causal attention,
                                                                     cached context included
    decode   2*P*batch + 2*hidden*vocab*batch + 4*L*H*d * sum(context)

Bytes: the weights once per iteration (``P`` + the vocab projection, at
``dtype_bytes``), plus the KV cache read (prefill: the cached prefixes; decode:
every running request's context) and written (the new tokens). KV bytes per
token: ``2 * L * kv_heads * d * dtype_bytes``.

Six accelerator fields extend the form for devices where the roofline alone
does not fit (the CPU server); their defaults give the roofline above exactly,
so GPU profiles are unchanged::

    time = overhead + requests * request_overhead_s
           + (decode iterations: requests * decode_request_overhead_s)
           + (gemm_overhead_s if new tokens >= gemm_min_tokens > 0)
           + combine(FLOPs / (peak * mfu), weight bytes / bw + KV bytes / kv_bw)

``combine`` is ``max`` (``overlap_compute_memory: true``) or ``+`` (false: one
CPU core streams the weights, then computes); ``kv_bw`` is the peak bandwidth
times ``kv_bandwidth_efficiency`` (null: ``bandwidth_efficiency``). Measured on
the CPU server (``bench/scripts/calibrate_cpu.py``): iteration time grows with
compute *plus* weight streaming; KV traffic is several times slower than weight
streaming (SGLang's torch-native attention gathers and repeats each request's
KV); each request adds a fixed cost (per-request attention calls); and an
iteration jumps by a constant once it has ``gemm_min_tokens`` new tokens (the
BLAS switches from matrix-vector to packed matrix-matrix products). Under
serving load a decode step costs more per request than isolated probes show:
``decode_request_overhead_s`` is fitted from SGLang's own decode-step counters
on a loaded trace window (``calibrate_cpu --loaded``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from bench.schema import AcceleratorConfig, ModelProfileConfig

GIB = 1024 ** 3


@dataclass(frozen=True)
class ModelShape:
    """Derived sizes of a model profile."""

    linear_params: float
    """Parameters of all transformer-block matmuls (attention + MLP)."""
    embed_params: float
    """Vocabulary projection (input embedding, and the LM head if untied)."""
    head_params: float
    """The LM head's parameters (read once per iteration)."""
    attn_width: int
    """Query heads times head size, summed over layers (``L*H*d``)."""
    kv_elems_per_token: int
    """K and V elements per token over all layers (``2*L*kv_heads*d``)."""

    @classmethod
    def of(cls, m: ModelProfileConfig) -> ModelShape:
        q = m.num_attention_heads * m.head_dim
        kv = m.num_kv_heads * m.head_dim
        attn = m.hidden_size * (q + 2 * kv) + q * m.hidden_size
        mlp = 3 * m.hidden_size * m.intermediate_size
        head = m.vocab_size * m.hidden_size
        embed = head if m.tie_word_embeddings else 2 * head
        return cls(linear_params=float(m.num_layers * (attn + mlp)), embed_params=float(embed),
                   head_params=float(head), attn_width=m.num_layers * q,
                   kv_elems_per_token=2 * m.num_layers * kv)

    @property
    def total_params(self) -> float:
        """Parameters the architecture implies (norms and biases ignored)."""
        return self.linear_params + self.embed_params


class IterationCost(Protocol):
    """What the simulator reads of its cost model: ``CostModel``, or a wrapper
    around one (``overlap.IterationLog``)."""

    @property
    def kv_bytes_per_token(self) -> float: ...

    def prefill_time(self, extends: list[tuple[int, int]], gaps: Sequence[tuple[int, int]] = (),
                     extra_s: float = 0.0, /) -> float: ...

    def decode_time(self, batch: int, context_tokens: int) -> float: ...

    def verify_time(self, batch: int, draft: int, context_tokens: int, extra_s: float = 0.0, /) -> float: ...


class CostModel:
    """Seconds per prefill or decode iteration (see module docs)."""

    def __init__(self, accel: AcceleratorConfig, model: ModelProfileConfig) -> None:
        self.accel = accel
        self.model = model
        self.shape = ModelShape.of(model)
        published = float(model.num_params)
        if abs(self.shape.total_params - published) > 0.02 * published:
            raise ValueError(
                f"model_profile {model.name}: architecture gives {self.shape.total_params:.4g} "
                f"parameters, published num_params is {published:.4g} (check the numbers)")
        b = accel.dtype_bytes
        self.weight_bytes = (self.shape.linear_params + self.shape.head_params) * b
        self.kv_bytes_per_token = self.shape.kv_elems_per_token * b
        self.prefill_flops_per_s = accel.peak_tflops * 1e12 * accel.prefill_mfu
        self.decode_flops_per_s = accel.peak_tflops * 1e12 * accel.decode_mfu
        self.bytes_per_s = accel.memory_bandwidth_gbs * 1e9 * accel.bandwidth_efficiency
        kv_eff = accel.kv_bandwidth_efficiency
        self.kv_bytes_per_s = None if kv_eff is None else accel.memory_bandwidth_gbs * 1e9 * kv_eff
        """None: KV traffic streams at ``bytes_per_s`` like the weights."""
        self.overhead = accel.iteration_overhead_s
        self.request_overhead = accel.request_overhead_s
        self.overlap = accel.overlap_compute_memory
        self.gemm_min_tokens = accel.gemm_min_tokens
        self.gemm_overhead = accel.gemm_overhead_s
        self.decode_request_overhead = accel.decode_request_overhead_s

    def kv_capacity_tokens(self) -> int:
        """KV pool size SGLang would allocate: ``memory * mem_fraction_static -
        weights``, in tokens (or the accelerator's fixed ``max_total_tokens``)."""
        if self.accel.max_total_tokens is not None:
            return int(self.accel.max_total_tokens)
        static = self.accel.memory_gib * GIB * self.accel.mem_fraction_static
        all_weights = (self.shape.total_params) * self.accel.dtype_bytes
        tokens = int((static - all_weights) // self.kv_bytes_per_token)
        if tokens <= 0:
            raise ValueError(f"{self.model.name} does not fit on {self.accel.name}: "
                             f"no memory left for the KV cache")
        return tokens

    def prefill_time(self, extends: list[tuple[int, int]],
                     gaps: Sequence[tuple[int, int]] = (), extra_s: float = 0.0) -> float:
        """One prefill iteration over ``(extend, prefix)`` pairs, one per request.

        ``gaps``: ``(tokens, start)`` segments of those requests' cached paths
        recomputed in the same pass at their original positions (each token
        attends to everything before it); they add linear, attention and KV
        traffic, but no per-request cost (no request or LM-head row of their own).
        ``extra_s``: seconds added to the iteration, not overlapped with it
        (restoring host-tier KV before the pass)."""
        s = self.shape
        new = sum(e for e, _ in extends) + sum(e for e, _ in gaps)
        pairs = sum(e * p + e * (e + 1) / 2 for e, p in extends) \
            + sum(e * p + e * (e + 1) / 2 for e, p in gaps)
        flops = 2 * s.linear_params * new + 2 * s.head_params * len(extends) \
            + 4 * s.attn_width * pairs
        kv_read = sum(p for _, p in extends) + sum(p for _, p in gaps)
        t = self._time(len(extends), new, flops / self.prefill_flops_per_s, kv_read + new)
        return t + extra_s if extra_s else t

    def decode_time(self, batch: int, context_tokens: int) -> float:
        """One decode iteration: ``batch`` requests over ``context_tokens`` in total."""
        return self.verify_time(batch, 0, context_tokens)

    def verify_time(self, batch: int, draft: int, context_tokens: int, extra_s: float = 0.0) -> float:
        """One decode step in which each of ``batch`` requests computes ``draft + 1``
        positions (its drafts and the bonus position; ``draft=0``: plain decode),
        every one attending to its request's context and the positions before it;
        ``extra_s``: drafting, serial with the forward."""
        s = self.shape
        width = draft + 1
        new = batch * width
        pairs = context_tokens * width + batch * width * (width - 1) // 2
        flops = 2 * (s.linear_params + s.head_params) * new + 4 * s.attn_width * pairs
        t = self._time(batch, new, flops / self.decode_flops_per_s, context_tokens + new)
        if extra_s:
            t += extra_s
        # NOTE: added only when set, so profiles without it keep their exact float times.
        return t + batch * self.decode_request_overhead if self.decode_request_overhead else t

    def _time(self, requests: int, new_tokens: int, compute_s: float, kv_tokens: int) -> float:
        """Overheads plus compute and memory time combined (see module docs)."""
        kv_bytes = kv_tokens * self.kv_bytes_per_token
        if self.kv_bytes_per_s is None:
            # NOTE: the original roofline's expression, so default profiles keep their exact times.
            memory_s = (self.weight_bytes + kv_bytes) / self.bytes_per_s
        else:
            memory_s = self.weight_bytes / self.bytes_per_s + kv_bytes / self.kv_bytes_per_s
        busy = max(compute_s, memory_s) if self.overlap else compute_s + memory_s
        fixed = self.overhead + requests * self.request_overhead
        if 0 < self.gemm_min_tokens <= new_tokens:
            fixed += self.gemm_overhead
        return fixed + busy
