"""The stacked pool, and the Triton kernel under Triton's interpreter on CPU
(``scute_interpreted.py``, in its own process), against the per-adapter torch
reference."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernels.scute.pool import SlotPool, pool_reference
from kernels.scute.samples import TYPES, random_slots


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


def test_gpu_benchmark_script_runs_under_the_interpreter(tmp_path):
    """``kernels/scute/gpu_bench.py`` (for a lent GPU) on tiny shapes on CPU:
    it checks the kernel against the reference before timing anything."""
    env = dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-m", "kernels.scute.gpu_bench", "--tiny", "--rows", "7", "--iters", "1",
                          "--out", str(tmp_path / "r.json")], cwd=Path(__file__).resolve().parents[2], env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads((tmp_path / "r.json").read_text())
    assert (r["device"], r["rows"], r["dtype"]) == ("cpu", 7, "torch.float32")
    assert all(math.isfinite(r[k]) and r[k] > 0 for k in ("mixed_s", "lora_s", "base_s"))
    assert r["mixed_vs_lora"] == r["mixed_s"] / r["lora_s"] and r["lora_vs_base"] == r["lora_s"] / r["base_s"]


def test_gpu_benchmark_script_refuses_a_wrong_kernel_before_timing(tmp_path):
    """The script's correctness gate: a kernel off by 0.5 stops it before any timing or output."""
    sabotage = ("import kernels.scute.gpu_bench as g\n"
                "g.scute_linear_triton = lambda x, w, b, p, s: g.pool_reference(x, w, b, p, s) + 0.5\n"
                "def timed(*a, **k):\n    raise SystemExit('timed before the check')\n"
                "g.timed = timed\ng.main()\n")
    out = subprocess.run([sys.executable, "-c", sabotage, "--tiny", "--rows", "7", "--iters", "1",
                          "--out", str(tmp_path / "r.json")], cwd=Path(__file__).resolve().parents[2],
                         env=dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS="1"),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode != 0 and "AssertionError" in out.stderr, out.stderr[-3000:]
    assert "timed before the check" not in out.stderr and not (tmp_path / "r.json").exists()
