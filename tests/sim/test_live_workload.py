"""Shaping traces for a small model and synthesizing their token-id prompts."""

from __future__ import annotations

import numpy as np
import pytest

from bench.live.workload import PromptSynth
from bench.traces.shape import Shape, scaled_block_size, shape_request, shape_trace
from tests.sim.helpers import req, trace_of

LOW, HIGH = 17, 49152


def synth(seed: int = 0, bs: int = 16) -> PromptSynth:
    return PromptSynth(bs, LOW, HIGH, seed)


def test_equal_block_ids_give_equal_token_blocks_and_prefixes():
    s = synth()
    a = req("a", 0, 40, 1, blocks=[7, 8, 9])      # 16 + 16 + 8 tokens
    b = req("b", 0, 64, 1, blocks=[7, 8, 9, 10])  # block 9 full here
    c = req("c", 0, 48, 1, blocks=[7, 5, 6])
    pa, pb, pc = s.prompt(a), s.prompt(b), s.prompt(c)
    assert len(pa) == 40 and len(pb) == 64
    assert pa == pb[:40]                  # shared blocks, and a's partial block 9 is b's block 9 cut
    assert pa[:16] == pc[:16]             # one shared leading block
    assert pa[16:32] != pc[16:32]         # different ids, different tokens
    assert list(s.block(9)) == pb[32:48] and list(s.block(9, 8)) == pa[32:40]


def test_tails_and_blockless_prompts_are_private_to_their_request():
    s = synth()
    x = req("x", 0, 50, 1, blocks=[1, 2])       # 32 block tokens + an 18-token unhashed tail
    y = req("y", 0, 50, 1, blocks=[1, 2])
    px, py = s.prompt(x), s.prompt(y)
    assert px[:32] == py[:32] and px[32:] != py[32:]
    u, v = s.prompt(req("u", 0, 30, 1)), s.prompt(req("v", 0, 30, 1))
    assert u[0] != v[0] and sum(p == q for p, q in zip(u, v)) <= 1
    # NOTE: a tail never equals a block with the same numeric key.
    assert s.prompt(req("z", 0, 16, 1))[:16] != list(s.block(0))


def test_prompts_are_deterministic_per_seed():
    r = req("a", 0, 70, 1, blocks=[3, 4, 5, 6])
    assert synth(1).prompt(r) == synth(1).prompt(r)
    assert synth(1).prompt(r) != synth(2).prompt(r)


def test_tokens_stay_in_the_safe_range_and_cover_it():
    s = PromptSynth(16, LOW, HIGH, 0)
    ids = np.array(s.prompt(req("big", 0, 200_000, 1)))
    assert ids.min() >= LOW and ids.max() < HIGH
    assert ids.min() < LOW + 50 and ids.max() > HIGH - 50
    counts = np.bincount(ids - LOW, minlength=HIGH - LOW)
    # NOTE: uniform draws give multinomial counts: variance / mean (dispersion) ~ 1.
    assert 0.9 < counts.var() / counts.mean() < 1.1
    tiny = PromptSynth(4, 5, 8, 0)
    assert set(tiny.prompt(req("t", 0, 300, 1, blocks=[1, 2]))) == {5, 6, 7}


def test_scaling_keeps_the_block_structure():
    r = req("m", 0, 10_000, 300, blocks=list(range(20)))  # 19 full 512-token blocks + 272
    s = shape_request(r, Shape(input_scale=1 / 32, output_scale=0.125), 512, 16)
    assert s.input_tokens == 19 * 16 + 9 and s.output_tokens == 38
    assert list(s.block_ids) == list(range(20))
    capped = shape_request(r, Shape(1 / 32, 0.125, max_input_tokens=100, max_output_tokens=10), 512, 16)
    assert capped.input_tokens == 100 and capped.output_tokens == 10
    assert list(capped.block_ids) == list(range(7))  # ceil(100 / 16) leading blocks
    assert shape_request(req("s", 0, 3, 1), Shape(0.01, 0.01), 0, 0).input_tokens == 1


def test_block_scale_must_give_whole_blocks():
    assert scaled_block_size(512, 0.03125) == 16
    with pytest.raises(ValueError, match="whole blocks"):
        scaled_block_size(512, 0.03)


def test_too_long_requests_and_their_followers_are_dropped():
    t = trace_of([
        req("ok", 0.0, 100, 10),
        req("long", 1.0, 900, 50),
        req("f1", 0.0, 100, 10, session_id="s", after="long", delay_s=1.0),
        req("f2", 0.0, 100, 10, session_id="s", after="f1", delay_s=1.0),
        req("f3", 0.0, 100, 10, session_id="t", after="ok", delay_s=1.0),
    ])
    shaped = shape_trace(t, Shape(), max_total_tokens=500)
    assert [r.rid for r in shaped.trace.requests] == ["ok", "f3"]
    assert (shaped.dropped_too_long, shaped.dropped_followers) == (1, 2)
    same = shape_trace(t, Shape(), max_total_tokens=10_000).trace
    assert [(r.rid, r.input_tokens, r.output_tokens) for r in same.requests] == \
        [(r.rid, r.input_tokens, r.output_tokens) for r in t.requests]


def test_shaped_trace_has_the_scaled_block_size():
    t = trace_of([req("a", 0, 1024, 64, blocks=[1, 2]), req("b", 1, 1100, 64, blocks=[1, 2, 3])],
                 block_size=512)
    shaped = shape_trace(t, Shape(input_scale=1 / 32, output_scale=0.5), max_total_tokens=8191)
    assert shaped.trace.block_size == 16
    assert [r.input_tokens for r in shaped.trace.requests] == [32, 35]
