"""Token-id prompts for shaped trace requests (``bench.traces.shape``).

``PromptSynth`` turns a shaped request into the token ids a live replay sends:

* prefix block ``b`` is ``block_size`` tokens drawn from ``hash(seed, b)``, so
  equal block ids give equal token blocks and, block ids being prefix-chained,
  equal leading blocks give equal prompt prefixes: the server's prefix cache
  sees the trace's sharing, no more and no less;
* the part of a prompt no block covers (an unhashed tail, or a whole prompt of a
  trace without blocks) is drawn from ``hash(seed, rid)``: private to its request;
* every token id lies in ``[token_id_low, token_id_high)``, away from special tokens.

Tokens come from a counter-based hash (SplitMix64), not a stateful generator:
a token depends only on the seed, its block (or request) and its position.
"""

from __future__ import annotations

import hashlib

import numpy as np

from bench.traces.trace import TraceRequest

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
#: Top key bit: set for request-private tails, clear for block ids.
_TAIL_BIT = 1 << 63


def _splitmix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer, element-wise on uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        return z ^ (z >> np.uint64(31))


def _rid_key(rid: str) -> int:
    """A stable 63-bit key of a request id (Python's ``hash`` is salted per process)."""
    return int.from_bytes(hashlib.blake2b(rid.encode(), digest_size=8).digest(), "little") >> 1


class PromptSynth:
    """Deterministic token-id prompts for shaped trace requests (see module docs)."""

    def __init__(self, block_size: int, low: int, high: int, seed: int = 0) -> None:
        if not 0 <= low < high:
            raise ValueError(f"empty token id range [{low}, {high})")
        self.block_size = block_size
        self.low, self.span = low, high - low
        self._seed = _splitmix(np.array([seed], dtype=np.uint64))[0]

    def _tokens(self, keys: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Token ids for (uint64 key, position) pairs."""
        with np.errstate(over="ignore"):
            h = _splitmix(_splitmix(keys ^ self._seed) + positions.astype(np.uint64))
        return self.low + (h % np.uint64(self.span)).astype(np.int64)

    def block(self, block_id: int, n: int | None = None) -> np.ndarray:
        """The first ``n`` (default: all) tokens of block ``block_id``."""
        n = self.block_size if n is None else n
        return self._tokens(np.full(n, block_id, dtype=np.uint64), np.arange(n))

    def prompt(self, r: TraceRequest) -> list[int]:
        """The ``r.input_tokens`` token ids of ``r``'s prompt."""
        bs = self.block_size
        blocks = r.block_ids
        n_blocks = len(blocks) if blocks is not None else 0
        covered = min(n_blocks * bs, r.input_tokens)
        pos = np.arange(r.input_tokens, dtype=np.int64)
        keys = np.empty(r.input_tokens, dtype=np.uint64)
        if blocks is not None and covered:  # (covered > 0 only with blocks)
            # NOTE: block ids are >= 0 (``Trace.block_id_span``), so their keys
            # have the top bit clear and never meet a tail key.
            ids = np.frombuffer(blocks, dtype=np.int64).astype(np.uint64)
            keys[:covered] = ids[pos[:covered] // bs]
            pos[:covered] %= bs
        if covered < r.input_tokens:
            keys[covered:] = np.uint64(_TAIL_BIT | _rid_key(r.rid))
        tokens: list[int] = self._tokens(keys, pos).tolist()
        return tokens
