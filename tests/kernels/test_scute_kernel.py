"""The stacked pool, and the Triton kernel under Triton's interpreter on CPU
(``scute_interpreted.py``, in its own process), against the per-adapter torch
reference."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernels.scute.pool import SlotPool, pool_reference
from kernels.scute.slots import AdapterSlots

TYPES = ("lora", "dora", "vera", "oft", "ia3", "ia3_ff")


def random_slots(kind: str, n_in: int, n_out: int, rank: int, block: int, g: torch.Generator) -> AdapterSlots:
    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    if kind == "lora":
        return AdapterSlots(lora_a=r(rank, n_in), lora_b=r(n_out, rank), out_scale=torch.full((n_out,), 0.5))
    if kind == "dora":
        s = 1 + 0.2 * r(n_out)
        return AdapterSlots(scale=s, lora_a=r(rank, n_in), lora_b=r(n_out, rank), out_scale=0.5 * s)
    if kind == "vera":
        return AdapterSlots(lora_a=r(rank, n_in), lora_b=r(n_out, rank), mid_scale=r(rank), out_scale=r(n_out))
    if kind == "oft":
        q = 0.1 * r(n_in // block, block, block)
        return AdapterSlots(blocks=torch.eye(block) + q - q.transpose(1, 2))
    if kind == "ia3":
        return AdapterSlots(scale=1 + 0.2 * r(n_out), shift=0.1 * r(n_out))
    return AdapterSlots(blocks=(1 + 0.2 * r(n_in)).reshape(n_in, 1, 1))


def test_the_triton_kernel_under_the_interpreter():
    """``scute_interpreted.py`` in a fresh process with TRITON_INTERPRET=1 (NOTE:
    Triton reads it when it decorates its own library, at its first import, so
    it cannot be switched on inside this process; nor may it leak into the
    SGLang tests that share it)."""
    here = Path(__file__).resolve().parent
    env = dict(os.environ, TRITON_INTERPRET="1")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          str(here / "scute_interpreted.py")], cwd=here.parents[1], env=env,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and "skipped" not in out.stdout, out.stdout[-2000:]


def test_the_pool_keeps_neutral_slots_exact():
    """Base rows through a pool full of other adapters equal the plain layer bit for bit."""
    g = torch.Generator().manual_seed(0)
    adapters = [random_slots(k, 16, 12, 3, 4, g) for k in TYPES]
    weight, bias = torch.randn(12, 16, generator=g), torch.randn(12, generator=g)
    x = torch.randn(5, 16, generator=g)
    pool = SlotPool.stack(adapters, 16, 12)
    got = pool_reference(x, weight, bias, pool, torch.zeros(5, dtype=torch.int64))
    # NOTE: identity blocks, scale 1, shift 0 and zero low-rank factors add exact zeros
    assert torch.equal(got, torch.nn.functional.linear(x, weight) + bias)


def test_block_sizes_that_do_not_divide_are_refused():
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="block sizes"):
        SlotPool.stack([random_slots("oft", 24, 4, 1, 8, g), random_slots("oft", 24, 4, 1, 3, g)], 24, 4)
