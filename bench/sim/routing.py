"""What a simulated client sends the gateway: routing text, routing key, draws.

Traces carry prefix block ids, not text, so each request gets a deterministic
*routing text* standing in for SMG's extracted text (``docs/router.md``):

* block ``i`` (id ``b``) becomes ``4 * tokens(i)`` characters: the 16 lowercase
  hex digits of ``xxh3_64(b as 8 bytes little-endian)``, repeated and cut;
* the prompt's tokens past its blocks (an unhashed tail, or the whole prompt
  of a request without blocks) become ``4 *`` that many characters from the
  request's own id, so they never match anything else.

Block ids are prefix-chained, so two texts share a character prefix exactly
as long as their prompts share blocks (up to a few characters where two
blocks' digits happen to start alike), and 4 characters stand for one token
as in SMG's ``prefix_hash`` (``CHARS_PER_TOKEN``): its first 1024 characters
are the first 256 tokens.

The routing key (``sim.routing_key``) is what the client puts in SMG's
``x-smg-routing-key`` header: nothing, or the request's session id (its own
id when it has none).
"""

from __future__ import annotations

import xxhash

from bench.schema import RoutingKey
from bench.traces.trace import TraceRequest

#: Characters per token of routing text (SMG ``prefix_hash``'s ``CHARS_PER_TOKEN``).
CHARS_PER_TOKEN = 4


def _digits(data: bytes) -> str:
    return f"{xxhash.xxh3_64_intdigest(data):016x}"


def _run(pattern: str, n: int) -> str:
    return (pattern * (n // len(pattern) + 1))[:n]


def routing_text(r: TraceRequest, block_size: int) -> str:
    """The request's routing text (see module docs)."""
    parts: list[str] = []
    covered = 0
    if r.block_ids is not None and block_size > 0:
        for i, b in enumerate(r.block_ids):
            tokens = r.block_tokens(block_size, i)
            parts.append(_run(_digits(int(b).to_bytes(8, "little", signed=True)), CHARS_PER_TOKEN * tokens))
            covered += tokens
    if r.input_tokens > covered:
        parts.append(_run(_digits(f"tail:{r.rid}".encode()), CHARS_PER_TOKEN * (r.input_tokens - covered)))
    return "".join(parts)


def routing_key(r: TraceRequest, mode: RoutingKey) -> str | None:
    """The request's ``x-smg-routing-key`` header under ``mode`` (``sim.routing_key``)."""
    if mode is RoutingKey.none:
        return None
    return r.session_id or r.rid


def replica_url(index: int) -> str:
    """Replica ``index``'s URL as the gateway registers it. NOTE: stable per
    index, so the fleet of N + 1 replicas keeps the first N's ring arcs."""
    return f"http://127.0.0.1:{30001 + index}"
