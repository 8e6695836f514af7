"""Segment-masked attention (``kernels/segment_mask``): one packed pass over a context
and its questions equals the separate ``context + question`` passes, through a tiny
rope + GQA attention layer; the masks, positions and readouts; bad segment ids."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.segment_mask import (
    causal_mask,
    masked_attention,
    packed_positions,
    packed_segment_ids,
    prefix_mask,
    ragged_masked_attention,
    readout_indices,
    reference,
    segment_attention,
    segment_mask,
)
from kernels.segment_mask.gpu_check import main as gpu_check_main

TOL = {"atol": 1e-5, "rtol": 1e-5}


@dataclass
class Layer:
    """One causal attention layer: q/k/v projections, rope by position, GQA."""

    wq: torch.Tensor
    wk: torch.Tensor
    wv: torch.Tensor
    heads: int
    kv_heads: int
    dim: int

    @staticmethod
    def random(hidden: int, heads: int, kv_heads: int, dim: int, g: torch.Generator) -> Layer:
        def w(h: int) -> torch.Tensor:
            return torch.randn(h * dim, hidden, generator=g) / hidden ** 0.5
        return Layer(w(heads), w(kv_heads), w(kv_heads), heads, kv_heads, dim)

    def qkv(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        n = x.shape[0]
        q = rope((x @ self.wq.T).view(n, self.heads, self.dim), positions)
        k = rope((x @ self.wk.T).view(n, self.kv_heads, self.dim), positions)
        return q, k, (x @ self.wv.T).view(n, self.kv_heads, self.dim)


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float = 10000.0) -> torch.Tensor:
    """Rotary embedding (rotate-half, as Llama), ``x``: ``[n, heads, dim]``."""
    half = x.shape[-1] // 2
    inv = theta ** (-torch.arange(half, dtype=torch.float32) / half)
    ang = positions.to(torch.float32)[:, None] * inv[None, :]
    cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
    a, b = x[..., :half], x[..., half:]
    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)


def naive_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Plain causal attention (an oracle independent of SDPA): the last ``len(q)`` of ``len(k)`` tokens."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) * q.shape[-1] ** -0.5
    keep = torch.ones(q.shape[0], k.shape[0], dtype=torch.bool).tril(k.shape[0] - q.shape[0])
    return torch.einsum("hqk,khd->qhd", scores.masked_fill(~keep, float("-inf")).softmax(-1), v)


def separate_outputs(layer: Layer, x_ctx: torch.Tensor, x_q: torch.Tensor) -> torch.Tensor:
    """``context + question`` as its own sequence, positions ``0..C+q-1``: the question's rows."""
    x = torch.cat((x_ctx, x_q))
    q, k, v = layer.qkv(x, torch.arange(x.shape[0]))
    return naive_causal(q[x_ctx.shape[0]:], k, v)


def split(x: torch.Tensor, qlens: list[int]) -> list[torch.Tensor]:  # each question's rows
    return list(torch.split(x, qlens)) if qlens else []


layers = st.sampled_from([(4, 4), (4, 2), (4, 1), (2, 1)])  # (query heads, kv heads)
questions = st.lists(st.integers(0, 9), min_size=0, max_size=12)


@settings(max_examples=30, deadline=None)
@given(context_len=st.integers(0, 300), qlens=questions, heads=layers, seed=st.integers(0, 2**16))
def test_packed_pass_equals_the_separate_passes(context_len, qlens, heads, seed):
    g = torch.Generator().manual_seed(seed)
    layer = Layer.random(24, heads[0], heads[1], 8, g)
    x_ctx = torch.randn(context_len, 24, generator=g)
    xs = [torch.randn(m, 24, generator=g) for m in qlens]
    seg = packed_segment_ids(context_len, qlens)
    if seg.numel() == 0:
        return
    q, k, v = layer.qkv(torch.cat((x_ctx, *xs)), packed_positions(seg))
    out = masked_attention(q, k, v, segment_mask(seg))
    for got, x_q in zip(split(out[context_len:], qlens), xs):
        torch.testing.assert_close(got, separate_outputs(layer, x_ctx, x_q), **TOL)
    # the context rows are the context's own causal pass
    qc, kc, vc = layer.qkv(x_ctx, torch.arange(context_len))
    torch.testing.assert_close(out[:context_len], naive_causal(qc, kc, vc), **TOL)


@settings(max_examples=25, deadline=None)
@given(context_len=st.integers(1, 200), qlens=questions, heads=layers, seed=st.integers(0, 2**16))
def test_a_cached_context_gives_the_same(context_len, qlens, heads, seed):
    """The context's K/V from its own pass (the cache); queries: the questions only."""
    g = torch.Generator().manual_seed(seed)
    layer = Layer.random(16, heads[0], heads[1], 8, g)
    x_ctx = torch.randn(context_len, 16, generator=g)
    xs = [torch.randn(m, 16, generator=g) for m in qlens]
    seg = packed_segment_ids(context_len, qlens)
    nq = sum(qlens)
    _, kc, vc = layer.qkv(x_ctx, torch.arange(context_len))
    qn, kn, vn = layer.qkv(torch.cat((x_ctx[:0], *xs)), packed_positions(seg)[context_len:])
    allowed = segment_mask(seg, num_queries=nq)
    out = masked_attention(qn, torch.cat((kc, kn)), torch.cat((vc, vn)), allowed)
    assert out.shape == (nq, heads[0], 8)
    for got, x_q in zip(split(out, qlens), xs):
        torch.testing.assert_close(got, separate_outputs(layer, x_ctx, x_q), **TOL)
    # the same mask, as a verify would build it: the whole prefix, then block-causal questions
    inner = torch.block_diag(*[torch.ones(m, m, dtype=torch.bool).tril() for m in [0, *qlens]])
    assert torch.equal(allowed, prefix_mask(context_len, inner))


@settings(max_examples=40, deadline=None)
@given(context_len=st.integers(0, 120), qlens=questions, heads=layers, seed=st.integers(0, 2**16),
       data=st.data())
def test_the_blockwise_form_equals_the_dense_mask(context_len, qlens, heads, seed, data):
    """``segment_attention`` (the CPU path) = ``masked_attention`` under ``segment_mask``, for
    every number of queries a pass can have (a cached prefix of the context, or none)."""
    seg = packed_segment_ids(context_len, qlens)
    n = int(seg.numel())
    if n == 0:
        return
    nq = data.draw(st.integers(1, n), label="queries")  # NOTE: fewer than the questions': a cached question part
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(nq, heads[0], 8, generator=g)
    k, v = torch.randn(n, heads[1], 8, generator=g), torch.randn(n, heads[1], 8, generator=g)
    dense = masked_attention(q, k, v, segment_mask(seg, num_queries=nq))
    torch.testing.assert_close(segment_attention(q, k, v, seg), dense, **TOL)
    # the per-question loop (a device or dtype without PyTorch's CPU flash kernel) is the same too
    flash = reference._FLASH_DTYPES
    try:
        reference._FLASH_DTYPES = ()
        torch.testing.assert_close(segment_attention(q, k, v, seg), dense, **TOL)
    finally:
        reference._FLASH_DTYPES = flash


@settings(max_examples=40, deadline=None)
@given(context_len=st.integers(0, 12), qlens=questions, data=st.data())
def test_mask_positions_and_readouts_match_their_definitions(context_len, qlens, data):
    seg = packed_segment_ids(context_len, qlens)
    n = seg.numel()
    nq = data.draw(st.integers(0, n))
    s = seg.tolist()
    want = [[j <= i and s[j] in (0, s[i]) for j in range(n)] for i in range(n - nq, n)]
    assert segment_mask(seg, nq).tolist() == want
    start = data.draw(st.integers(0, 50))
    pos = [start + i for i in range(context_len)]
    for m in qlens:
        pos += range(start + context_len, start + context_len + m)
    assert packed_positions(seg, start).tolist() == pos
    ends = torch.tensor([context_len + sum(qlens[:i + 1]) - 1 for i, m in enumerate(qlens) if m], dtype=torch.long)
    assert torch.equal(readout_indices(seg), ends)
    assert seg[ends].tolist() == [i + 1 for i, m in enumerate(qlens) if m]


@settings(max_examples=20, deadline=None)
@given(prefix=st.integers(0, 60), d=st.integers(1, 12), seed=st.integers(0, 2**16))
def test_prefix_mask_with_a_lower_triangle_is_causal_attention(prefix, d, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(d, 4, 8, generator=g)
    k, v = torch.randn(prefix + d, 2, 8, generator=g), torch.randn(prefix + d, 2, 8, generator=g)
    allowed = prefix_mask(prefix, torch.ones(d, d, dtype=torch.bool).tril())
    assert torch.equal(allowed, causal_mask(d, prefix + d))
    torch.testing.assert_close(masked_attention(q, k, v, allowed), naive_causal(q, k, v), **TOL)


def test_a_tree_mask_gives_the_verify_pass():
    """The CPU verify (``tree_verify_attention``: ``prefix_mask`` + ``masked_attention``) on a
    draft tree (root 0, children 1 and 2 of 0, 3 of 1; two requests, prefixes 5 and 9): each
    node's output is plain causal attention over the prefix and its own root path."""
    from server.sglang.speculative.verify_attention import tree_verify_attention

    g = torch.Generator().manual_seed(1)
    d, prefixes = 4, [5, 9]
    paths = [[0], [0, 1], [0, 2], [0, 1, 3]]
    tree = torch.zeros(d, d, dtype=torch.bool)
    for node, path in enumerate(paths):
        tree[node, path] = True
    k_cache, v_cache = torch.randn(40, 2, 8, generator=g), torch.randn(40, 2, 8, generator=g)
    req_to_token = torch.randperm(40, generator=g).view(2, 20)
    query = torch.randn(2 * d, 4, 8, generator=g)
    got = tree_verify_attention(query, k_cache, v_cache, req_to_token, torch.tensor([0, 1]), torch.tensor(prefixes),
                                tree.repeat(2, 1).flatten(), d, None)
    for i, p in enumerate(prefixes):
        for node, path in enumerate(paths):
            slots = torch.cat((req_to_token[i, :p], req_to_token[i, p + torch.tensor(path)]))
            row = i * d + node
            want = naive_causal(query[row:row + 1], k_cache[slots], v_cache[slots])
            torch.testing.assert_close(got[row:row + 1], want, **TOL)


def test_the_ragged_batch_is_each_request_on_its_own():
    g = torch.Generator().manual_seed(2)
    segs = [packed_segment_ids(7, [3, 0, 1]), packed_segment_ids(0, [2, 2])]
    masks = [segment_mask(segs[0], num_queries=4), segment_mask(segs[1])]
    qo, kv = [4, 4], [11, 4]
    q, k, v = torch.randn(8, 2, 8, generator=g), torch.randn(15, 1, 8, generator=g), torch.randn(15, 1, 8, generator=g)
    out = ragged_masked_attention(q, k, v, qo, kv, masks)
    torch.testing.assert_close(out[:4], masked_attention(q[:4], k[:11], v[:11], masks[0]), **TOL)
    torch.testing.assert_close(out[4:], masked_attention(q[4:], k[11:], v[11:], masks[1]), **TOL)
    causal = ragged_masked_attention(q, k, v, qo, kv)
    torch.testing.assert_close(causal[:4], naive_causal(q[:4], k[:11], v[:11]), **TOL)


def test_edge_cases():
    one = packed_segment_ids(0, [1])  # no context, one one-token question
    assert one.tolist() == [1] and packed_positions(one, 3).tolist() == [3]
    assert segment_mask(one).tolist() == [[True]] and readout_indices(one).tolist() == [0]
    ctx = packed_segment_ids(3, [0, 0])  # a context and only empty questions: plain causal
    assert torch.equal(segment_mask(ctx), torch.ones(3, 3, dtype=torch.bool).tril())
    assert readout_indices(ctx).numel() == 0 and packed_positions(ctx).tolist() == [0, 1, 2]
    empty = packed_segment_ids(0, [])
    assert segment_mask(empty).shape == (0, 0) and packed_positions(empty).numel() == readout_indices(empty).numel() == 0
    seg = torch.tensor([0, 0, 2, 2, 5])  # questions 1, 3, 4 empty: ids may skip
    assert packed_positions(seg).tolist() == [0, 1, 2, 3, 2] and readout_indices(seg).tolist() == [3, 4]
    assert segment_mask(seg, 1).tolist() == [[True, True, False, False, True]]
    q = torch.randn(0, 2, 4)
    assert masked_attention(q, torch.randn(3, 1, 4), torch.randn(3, 1, 5), segment_mask(ctx, 0)).shape == (0, 2, 5)


@pytest.mark.parametrize(("ids", "match"), [
    ([0, 0, 1, 2, 1], r"must not decrease.*token 4 has 1 after 2"),
    ([0, 2, 1], r"must not decrease"),
    ([1, 1, 0, 0], r"must not decrease.*token 2 has 0 after 1"),
    ([0, -1, 1], r">= 0.*token 1 has -1"),
])
def test_bad_segment_ids_are_refused(ids, match):
    seg = torch.tensor(ids)
    for fn in (segment_mask, packed_positions, readout_indices):
        with pytest.raises(ValueError, match=match):
            fn(seg)


def test_bad_shapes_and_masks_are_refused():
    with pytest.raises(ValueError, match="integers"):
        segment_mask(torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="1-D"):
        segment_mask(torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="num_queries"):
        segment_mask(torch.tensor([0, 1]), num_queries=3)
    with pytest.raises(ValueError, match=">= 0"):
        packed_segment_ids(2, [1, -1])
    with pytest.raises(ValueError, match="square"):
        prefix_mask(2, torch.ones(2, 3, dtype=torch.bool))
    q, k = torch.randn(2, 3, 4), torch.randn(2, 2, 4)
    with pytest.raises(ValueError, match="multiple of kv heads"):
        masked_attention(q, k, k, torch.ones(2, 2, dtype=torch.bool))
    k = torch.randn(2, 1, 4)
    with pytest.raises(ValueError, match="row 1 allows no key"):
        masked_attention(q, k, k, torch.tensor([[True, False], [False, False]]))
    with pytest.raises(ValueError, match="bool"):
        masked_attention(q, k, k, torch.ones(2, 2))


def test_the_gpu_check_runs_its_cpu_smoke(tmp_path, capsys):
    """``gpu_check --cpu-smoke``: the torch twins of every checked and timed path, tiny shapes."""
    assert gpu_check_main(["--cpu-smoke", "--out", str(tmp_path / "r.json")]) == 0
    assert "| packed_vs_separate |" in capsys.readouterr().out.replace("| float32 ", "")
    assert (tmp_path / "r.json").exists()


class _FakeFlashInfer:
    """Records the calls ``kernels/segment_mask/flashinfer.py`` makes (no GPU here)."""

    def __init__(self) -> None:
        calls: list[tuple[str, tuple[object, ...], dict[str, object]]] = []
        self.calls = calls

        class Wrapper:
            def __init__(self, *args: object, **kwargs: object) -> None:
                calls.append(("__init__", (self, *args), kwargs))

            def plan(self, *args: object, **kwargs: object) -> None:
                calls.append(("plan", (self, *args), kwargs))

        self.BatchPrefillWithRaggedKVCacheWrapper = Wrapper
        self.single_prefill_with_kv_cache = lambda *args, **kwargs: calls.append(("single", args, kwargs))


def test_the_flashinfer_calls_fit_flashinfer_0_7_2(monkeypatch):
    """The GPU path's calls, recorded on a fake and bound to the installed FlashInfer's own
    signatures (keyword typos fail here); the ragged plan's flattened mask is each request's
    mask row-major, requests in order; no causal flag or rope under a custom mask."""
    import inspect

    from kernels.segment_mask import flashinfer as gpu

    flashinfer = pytest.importorskip("flashinfer")
    fake = _FakeFlashInfer()
    monkeypatch.setattr(gpu, "_flashinfer", lambda: fake)
    masks = [segment_mask(packed_segment_ids(5, [2, 0, 3]), num_queries=5), segment_mask(packed_segment_ids(1, [1]))]
    prefill = gpu.RaggedPrefill("cpu", workspace_bytes=16)
    prefill.plan([5, 2], [10, 2], 4, 2, 8, masks=masks, dtype=torch.bfloat16)
    prefill.plan([3], [7], 4, 2, 8)
    q, k = torch.randn(5, 4, 8), torch.randn(10, 2, 8)
    gpu.single_masked_prefill(q, k, k, masks[0], scale=0.5)
    real = flashinfer.BatchPrefillWithRaggedKVCacheWrapper
    sigs = {"__init__": inspect.signature(real.__init__), "plan": inspect.signature(real.plan),
            "single": inspect.signature(flashinfer.single_prefill_with_kv_cache)}
    bound = [sigs[name].bind(*args, **kwargs).arguments for name, args, kwargs in fake.calls]
    assert [name for name, _, _ in fake.calls] == ["__init__", "plan", "plan", "single"]
    assert bound[0]["kv_layout"] == "NHD"
    masked, causal, single = bound[1], bound[2], bound[3]
    assert masked["qo_indptr"].tolist() == [0, 5, 7] and masked["kv_indptr"].tolist() == [0, 10, 12]
    assert masked["qo_indptr"].dtype == masked["kv_indptr"].dtype == torch.int32
    assert torch.equal(masked["custom_mask"], torch.cat([m.flatten() for m in masks]))
    assert masked["causal"] is False and masked["pos_encoding_mode"] == "NONE" and masked["sm_scale"] is None
    assert masked["q_data_type"] == masked["kv_data_type"] == torch.bfloat16
    assert causal["custom_mask"] is None and causal["causal"] is True
    assert torch.equal(single["custom_mask"], masks[0]) and single["causal"] is False and single["sm_scale"] == 0.5
    with pytest.raises(ValueError, match="mask 1 must be bool"):
        prefill.plan([5, 2], [10, 3], 4, 2, 8, masks=masks)
    with pytest.raises(ValueError, match="allowed must be bool"):
        gpu.single_masked_prefill(q, k, k, masks[1])
