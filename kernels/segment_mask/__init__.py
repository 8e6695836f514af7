"""Segment-masked attention: many short questions over one shared context in one pass (Flide).

A *packed* sequence is one shared context followed by the questions, each
question's tokens contiguous, questions in order. ``segment_ids`` names each
token's part (0: the context, ``s >= 1``: question ``s``; an empty question
simply has no tokens)::

    tokens        c0 c1 c2 c3 | a0 a1 | b0 | d0 d1 d2
    segment_ids    0  0  0  0 |  1  1 |  2 |  3  3  3
    positions      0  1  2  3 |  4  5 |  4 |  4  5  6     (packed_positions)

Mask rule: query ``i`` attends to key ``j`` iff ``j <= i`` (causal in packed
order) and ``segment_ids[j]`` is 0 or ``segment_ids[i]``: the whole context up
to it, and its own question, never another question. With positions restarting
at ``C`` (the context's length) for every question, each question's outputs
equal a separate causal pass over ``context + question_s`` with positions
``0..C+q-1`` (rope is applied by position before attention), so one forward
pass answers every question exactly. ``readout_indices`` gives each question's
last token, where its answer is read.

The queries may be only the last tokens of the sequence (``num_queries``): the
context already sits in the KV cache and the pass computes the questions only.
The same attention serves a tree-masked speculative verify: ``prefix_mask``
lets ``d`` new tokens see a whole cached prefix, then each other as a ``d x d``
tree mask allows (``server/sglang/speculative/verify_attention.py``).

=================  ==========================================================
``reference``      masks, positions, readouts; ``masked_attention`` in torch
                   (SDPA with a bool mask, GQA) and its ragged batch form:
                   the CPU path and the GPU path's oracle
``flashinfer``     the GPU path: FlashInfer's prefill with a custom mask
                   (imported lazily; not yet run on a GPU)
``gpu_check``      ``python -m kernels.segment_mask.gpu_check``: FlashInfer vs
                   the reference, timed against separate and causal passes
=================  ==========================================================
"""

from kernels.segment_mask.reference import (
    CONTEXT,
    causal_mask,
    check_segment_ids,
    masked_attention,
    packed_positions,
    packed_segment_ids,
    prefix_mask,
    ragged_masked_attention,
    readout_indices,
    segment_attention,
    segment_mask,
)

__all__ = ["CONTEXT", "causal_mask", "check_segment_ids", "masked_attention", "packed_positions",
           "packed_segment_ids", "prefix_mask", "ragged_masked_attention", "readout_indices", "segment_attention",
           "segment_mask"]
