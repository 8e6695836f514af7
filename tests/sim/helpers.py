"""Small builders for simulator tests: hand-made traces and a linear cost model."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from bench.sim import SimParts, SimSettings, Simulator, build_simulator
from bench.sim.admission import add_gate
from bench.traces.trace import Trace, TraceRequest


@dataclass(frozen=True)
class LinearCost:
    """Prefill: ``overhead + per_token * new tokens``; decode: a constant step."""

    overhead: float = 0.01
    per_token: float = 0.001
    decode_step: float = 0.02

    def prefill_time(self, extends: list[tuple[int, int]]) -> float:
        return self.overhead + self.per_token * sum(e for e, _ in extends)

    def decode_time(self, batch: int, context_tokens: int) -> float:
        return self.decode_step


def req(rid: str, t: float, n_in: int, n_out: int, blocks: Sequence[int] | None = None,
        **kw) -> TraceRequest:
    """A trace request; ``blocks`` are prefix-chained ids (caller's duty)."""
    return TraceRequest(rid=rid, arrival_s=t, input_tokens=n_in, output_tokens=n_out,
                        block_ids=array("q", blocks) if blocks is not None else None, **kw)


def trace_of(requests: Sequence[TraceRequest], block_size: int = 0, span: int | None = None) -> Trace:
    roots = sorted((r for r in requests if r.after is None), key=lambda r: r.arrival_s)
    rest = [r for r in requests if r.after is not None]
    ids = [b for r in requests for b in (r.block_ids or ())]
    t = Trace(name="test", requests=tuple(roots + rest), block_size=block_size,
              block_id_span=span if span is not None else (max(ids) + 1 if ids else 0))
    t.validate()
    return t


def settings(**kw) -> SimSettings:
    base = dict(capacity=1_000_000, max_running_requests=64, chunked_prefill_size=None,
                max_prefill_tokens=16384, prefill_max_requests=None, context_length=1_000_000)
    base.update(kw)
    return SimSettings(**base)


def parts_of(order=None, eviction=None, admission=None) -> SimParts:
    """The simulator parts the bindings would build for these policies (``None``: stock)."""
    parts = SimParts(order=order, eviction=eviction)
    if admission is not None:
        add_gate(parts, admission)
    return parts


def simulate(trace: Trace, cost=None, order=None, eviction=None, admission=None,
             **kw) -> Simulator:
    sim = build_simulator(trace, cost or LinearCost(), settings(**kw), parts_of(order, eviction, admission))
    sim.run()
    return sim


def chain(prefix: Sequence[int], n: int, start: int) -> list[int]:
    """``prefix`` extended by ``n`` fresh ids from ``start`` (chained by construction)."""
    return list(prefix) + list(range(start, start + n))
