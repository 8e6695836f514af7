"""How many rounds a generation block takes: the hidden per-block truth.

A block with ``k`` masks takes ``s`` denoising steps (each unmasks >= 1 mask)
plus one confirming round (FDFO reports ``done`` before its step), so
``2 <= rounds <= k + 1`` (docs/dwise-notes.md §3.1). A model returns the
block's *trajectory*: the masks left at the start of each of its rounds,
``(k, ..., 0)``; its length is the block's rounds.

=============== ===============================================================
model           what it is based on
=============== ===============================================================
``tiny_live``   measured: the random tiny SDAR model unmasks exactly one mask
                per step (no confidence reaches the 0.95 threshold), so every
                block takes ``k + 1`` rounds, deterministically (§3.1, 20 of 20
                requests and every block of the §3.2 probe)
``confidence``  an ASSUMPTION with the mechanics of SGLang's ``LowConfidence``:
                each step unmasks every mask above the threshold, else the
                single most confident one; here each remaining mask clears the
                threshold independently with probability ``q`` per step. ``q=0``
                is ``tiny_live``; ``q=1`` is the measured ``threshold: 0`` run
                (2 rounds per block, §3.1). No trained-model rate is measured.
``table``       an ASSUMPTION given in config: weights of 2, 3, ..., ``B + 1``
                rounds for a full block; a block with ``k < B`` masks keeps the
                weights of 2..k+1, renormalized; its ``k`` masks are spread over
                the steps as evenly as possible, earlier steps taking more
=============== ===============================================================

NOTE: every draw comes from the request's own generator (``request_rng``):
the same request has the same truth under every policy, so runs pair.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Protocol

import numpy as np


class RoundsModel(Protocol):
    """Draws one generation block's trajectory (module docs)."""

    def trajectory(self, masks: int, rng: np.random.Generator) -> tuple[int, ...]:
        """Masks left at the start of each round of a block with ``masks`` masks;
        the last entry is 0 (the confirming round)."""
        ...


def request_rng(seed: int, rid: str) -> np.random.Generator:
    """The generator of one request's truth (stable across runs and policies)."""
    return np.random.default_rng([seed, zlib.crc32(rid.encode())])


class TinyLive:
    """One mask per step: ``k + 1`` rounds (measured on the random tiny SDAR)."""

    def trajectory(self, masks: int, rng: np.random.Generator) -> tuple[int, ...]:
        return tuple(range(masks, -1, -1))


class Confidence:
    """Each remaining mask clears the threshold with probability ``q`` per step,
    at least one unmasks (``LowConfidence``'s fallback); an assumption."""

    def __init__(self, q: float) -> None:
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"confidence must be in [0, 1], got {q}")
        self.q = q

    def trajectory(self, masks: int, rng: np.random.Generator) -> tuple[int, ...]:
        left, out = masks, [masks]
        while left > 0:
            left -= max(1, int(rng.binomial(left, self.q)))
            out.append(left)
        return tuple(out)


class Table:
    """Rounds per block drawn from configured weights (module docs); an assumption."""

    def __init__(self, weights: Sequence[float], block_size: int) -> None:
        w = np.asarray(weights, dtype=float)
        if w.ndim != 1 or not 1 <= len(w) <= block_size or (w < 0).any() or w.sum() <= 0:
            raise ValueError(f"rounds_table needs 1..{block_size} non-negative weights (of 2.."
                             f"{block_size + 1} rounds) with a positive sum, got {list(weights)}")
        self.weights = w

    def trajectory(self, masks: int, rng: np.random.Generator) -> tuple[int, ...]:
        w = self.weights[:masks]  # NOTE: rounds 2..masks+1 are the possible ones
        if w.sum() <= 0:
            w = np.zeros(masks)
            w[-1] = 1.0  # no weight where it is possible: one mask per step
        steps = 1 + int(rng.choice(len(w), p=w / w.sum()))
        left, out = masks, [masks]
        for i in range(steps):
            left -= masks // steps + (1 if i < masks % steps else 0)
            out.append(left)
        return tuple(out)
