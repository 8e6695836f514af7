"""The torch conv kernels a CPU server runs for hybrid models (kernels/causal_conv1d) against SGLang's Triton ones.

SGLang's Triton kernels (``causal_conv1d_fn``, ``causal_conv1d_update`` of
``sglang.kernels.ops.mamba.causal_conv1d_triton``) run in a fresh interpreter under
``TRITON_INTERPRET=1`` (``tests/interpreted.py``); the torch kernels run here, through
SGLang's own serving wrapper's compiled-kernel branch as the server runs them. Outputs and
the whole state pool must come back bit-identical in float32 (outputs too, but for SiLU's
exp: a few ulp).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from kernels.causal_conv1d.reference import causal_conv1d_fwd, causal_conv1d_update
from tests.interpreted import run_interpreted

_TRITON = r"""
import sys
from server.sglang.launch.stub import install_sgl_kernel_stub
install_sgl_kernel_stub()
import torch
from sglang.kernels.ops.mamba.causal_conv1d_triton import causal_conv1d_fn, causal_conv1d_update

cases = torch.load(sys.argv[1])
for c in cases.values():
    pool = c["pool"].clone()
    if c["op"] == "fwd":
        c["out"] = causal_conv1d_fn(c["x"].clone(), c["w"], c["b"], conv_states=pool, query_start_loc=c["cu"],
                                    cache_indices=c["slots"], has_initial_state=c["init"], activation=c["act"],
                                    seq_lens_cpu=c["lens"]).clone()
    else:
        c["out"] = causal_conv1d_update(c["x"].clone(), pool, c["w"], c["b"], activation=c["act"],
                                        conv_state_indices=c["slots"]).clone()
    c["pool_after"] = pool

# The server's install: SGLang's wrapper now runs the torch kernels, and never Triton.
import sglang.srt.layers.attention.mamba.causal_conv1d as wrapper
from server.sglang.launch import conv_kernels
conv_kernels.install()
def _refuse(*args, **kwargs):
    raise AssertionError("the wrapper called a Triton kernel after install")
wrapper._causal_conv1d_fn_triton = wrapper._causal_conv1d_update_triton = _refuse
for c in cases.values():
    pool = c["pool"].clone()
    if c["op"] == "fwd":
        out = wrapper.causal_conv1d_fn(c["x"].clone(), c["w"], c["b"], query_start_loc=c["cu"],
                                       cache_indices=c["slots"], has_initial_state=c["init"], conv_states=pool,
                                       activation=c["act"])
    else:
        x = c["x"].clone()
        out = wrapper.causal_conv1d_update(x[..., 0] if x.shape[-1] == 1 else x, pool, c["w"], c["b"],
                                           activation=c["act"], conv_state_indices=c["slots"])
        out = out.unsqueeze(-1) if out.dim() == 2 else out
    c["wrapped_out"], c["wrapped_pool"] = out.clone(), pool
torch.save(cases, sys.argv[2])
"""

#: Sequence lengths of the varlen prefill: shorter than the state, one token, long.
LENS = [5, 1, 2, 17, 3, 9]
N_SLOTS = 10


def _cases() -> dict[str, dict[str, Any]]:
    g = torch.Generator().manual_seed(0)
    cases: dict[str, dict[str, Any]] = {}
    for width in (3, 4):
        for bias in (True, False):
            for act in (None, "silu"):
                dim = 24
                w = torch.randn(dim, width, generator=g)
                b = torch.randn(dim, generator=g) if bias else None
                pool = torch.randn(N_SLOTS, dim, width - 1, generator=g)
                # NOTE: slot -1 is SGLang's pad slot: that sequence is skipped
                slots = torch.tensor([7, 2, -1, 0, 9, 4], dtype=torch.int32)
                init = torch.tensor([True, False, True, True, False, True])
                cu = torch.tensor([0, *torch.tensor(LENS).cumsum(0).tolist()], dtype=torch.int32)
                name = f"w{width}-{'bias' if bias else 'nobias'}-{act}"
                cases[f"fwd-{name}"] = {"op": "fwd", "x": torch.randn(dim, sum(LENS), generator=g), "w": w, "b": b,
                                        "pool": pool, "slots": slots, "init": init, "cu": cu, "lens": LENS,
                                        "act": act}
                dec = torch.tensor([3, -1, 8, 1], dtype=torch.int32)
                for seqlen in (1, 2):
                    cases[f"update{seqlen}-{name}"] = {"op": "update", "x": torch.randn(4, dim, seqlen, generator=g),
                                                       "w": w, "b": b, "pool": pool, "slots": dec, "act": act}
    return cases


def _torch(case: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """The torch kernels, called as SGLang's wrapper calls the compiled ones (in place)."""
    x, pool, silu = case["x"].clone(), case["pool"].clone(), case["act"] == "silu"
    if case["op"] == "fwd":
        causal_conv1d_fwd(x, case["w"], case["b"], pool, case["cu"], case["slots"], case["init"], silu, -1)
    else:
        causal_conv1d_update(x, pool, case["w"], case["b"], silu, None, case["slots"], -1)
    return x, pool


@pytest.fixture(scope="module")
def triton_results(tmp_path_factory):
    return run_interpreted(_TRITON, _cases(), tmp_path_factory.mktemp("conv"), timeout=600)


@pytest.mark.parametrize("name", sorted(_cases()))
def test_torch_kernels_equal_sglangs_triton_kernels_bit_for_bit(name, triton_results):
    case = triton_results[name]
    out, pool = _torch(case)
    skipped = case["op"] == "fwd" and (case["slots"] == -1).any()
    if skipped:
        # NOTE: the pad slot's sequence is not processed: neither kernel's output there is read
        keep = torch.ones(out.shape[-1], dtype=torch.bool)
        i = int(torch.nonzero(case["slots"] == -1)[0])
        keep[sum(LENS[:i]):sum(LENS[:i + 1])] = False
        out, ref = out[:, keep], case["out"][:, keep]
    else:
        ref = case["out"]
    if case["op"] == "update":
        rows = case["slots"] != -1
        out, ref = out[rows], ref[rows]
    if case["act"] is None:  # LFM2's short conv: no activation
        assert torch.equal(out, ref), (out - ref).abs().max()
    else:
        # NOTE: SiLU's exp is numpy's under the interpreter and torch's here: a few ulp apart
        torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-7)
    assert torch.equal(pool, case["pool_after"])  # every slot: used ones moved on, the others untouched


@pytest.mark.parametrize("name", sorted(_cases()))
def test_the_installed_wrapper_runs_the_torch_kernels(name, triton_results):
    """After ``conv_kernels.install()`` SGLang's serving wrapper (2-D decode input included) gives
    what the torch kernels give, and calls no Triton kernel (the child replaced them with ones that raise)."""
    case = triton_results[name]
    out, pool = _torch(case)
    assert torch.equal(case["wrapped_out"], out) and torch.equal(case["wrapped_pool"], pool)


def test_a_circular_state_buffer_is_refused_not_approximated():
    x, pool = torch.zeros(1, 4, 1), torch.zeros(2, 4, 2)
    with pytest.raises(NotImplementedError, match="cache_seqlens"):
        causal_conv1d_update(x, pool, torch.zeros(4, 3), None, False, torch.tensor([0]), None, -1)
