"""The Triton kernel on CPU under Triton's interpreter, against the per-adapter
torch reference on random shapes: ranks, segment lengths (empty ones too), block
sizes, bias or not, and all five adapter types mixed with base rows.

Run by ``test_scute_kernel.py`` in a process started with TRITON_INTERPRET=1
(not collected by the main run: its name does not start with ``test_``).
"""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.fail("run with TRITON_INTERPRET=1 (see test_scute_kernel.py)", pytrace=False)

from kernels.scute.pool import SlotPool, pool_reference, row_slots
from kernels.scute.reference import scute_linear_segments
from kernels.scute.samples import TYPES, random_slots
from kernels.scute.triton import scute_linear_triton


@st.composite
def batches(draw):
    n_in = draw(st.sampled_from([8, 16, 24]))
    n_out = draw(st.integers(1, 40))
    kinds = draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=7))
    ranks = [draw(st.integers(1, 9)) for _ in kinds]
    blocks = [draw(st.sampled_from([1, 2, 4, 8])) for _ in kinds]
    n_seg = draw(st.integers(1, 8))
    seg_lens = [draw(st.integers(0, 4)) for _ in range(n_seg)]
    seg_slot = [draw(st.integers(0, len(kinds))) for _ in range(n_seg)]  # 0: base
    seed = draw(st.integers(0, 2**31 - 1))
    bias = draw(st.booleans())
    return n_in, n_out, kinds, ranks, blocks, seg_lens, seg_slot, seed, bias


@settings(max_examples=60, deadline=None)
@given(batches())
def test_kernel_and_pool_equal_the_reference(case):
    n_in, n_out, kinds, ranks, blocks, seg_lens, seg_slot, seed, with_bias = case
    g = torch.Generator().manual_seed(seed)
    adapters = [random_slots(k, n_in, n_out, r, b, g) for k, r, b in zip(kinds, ranks, blocks)]
    weight, bias = torch.randn(n_out, n_in, generator=g), torch.randn(n_out, generator=g) if with_bias else None
    x = torch.randn(sum(seg_lens), n_in, generator=g)
    # reference: each segment with its own adapter (slot 0 = base, None)
    want = scute_linear_segments(x, weight, bias, [None, *adapters], seg_lens, seg_slot)
    pool = SlotPool.stack(adapters, n_in, n_out)
    slots = row_slots(seg_lens, seg_slot)
    torch.testing.assert_close(pool_reference(x, weight, bias, pool, slots), want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(scute_linear_triton(x, weight, bias, pool, slots), want, rtol=1e-4, atol=1e-4)


