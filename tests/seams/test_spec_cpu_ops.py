"""The pure-torch speculative ops (server/sglang/speculative/cpu_ops.py) against SGLang's own kernels.

Reference: the Triton kernels SGLang 0.5.23 runs on a GPU in place of each op (the ones next to its CPU call
site: ``cache_locs.assign_draft_cache_locs_contiguous`` / ``assign_extend_cache_locs``,
``eagle.fill_accept_out_cache_loc`` / ``fill_bonus_tokens``, ``spec_tree.sgl_build_tree_kernel_triton`` /
``verify_tree_greedy_triton`` and ``reconstruct_tree.reconstruct_indices_from_tree_mask_triton``), run on CPU by
Triton's interpreter (``TRITON_INTERPRET=1``) in one fresh interpreter: the flag must be set before those modules
are imported, which other seams tests may already have done here. Both sides get identical seeded inputs,
pre-filled outputs included, and every tensor argument must come back equal (dtype and values, exactly), so
entries an op must leave alone are checked too. Cases cover a batch of 1, nothing / everything accepted, chain
trees (``topk=1``; NGRAM with ``speculative_ngram_max_bfs_breadth=1``), NGRAM's zero-padded trees and random
trees. Hand-written expectations pin NGRAM's chain and padded layouts, and a last test runs SGLang's own CPU
``*_func`` wrappers (``SGLANG_USE_CPU_ENGINE=1``, fresh interpreter) on the ops, put where those look them up:
the signatures fit SGLang's calls.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import torch

from server.sglang.launch.stub import PROVIDED
from server.sglang.speculative.cpu_ops import CPU_OPS, SPECULATIVE_OPS
from tests.conftest import REPO
from tests.interpreted import run_interpreted

OPS: dict[str, Callable[..., None]] = {**CPU_OPS, **SPECULATIVE_OPS}

#: Runs in a fresh interpreter: each op name -> SGLang's Triton kernel, called with the op's arguments.
_REFERENCE = r"""
import sys, types
from server.sglang.launch.stub import install_sgl_kernel_stub
install_sgl_kernel_stub()
import torch
# reconstruct_tree imports this name at module level off CUDA/XPU; its Triton kernel needs nothing from it.
stand_in = types.ModuleType("sgl_kernel.speculative")
stand_in.reconstruct_indices_from_tree_mask = None
sys.modules["sgl_kernel.speculative"] = stand_in
from sglang.kernels.ops.speculative import cache_locs, eagle, reconstruct_tree, spec_tree
from sglang.srt.utils import next_power_of_2

def draft(rpi, rtt, seq, out, pool_len, topk, steps):
    cache_locs.assign_draft_cache_locs_contiguous[(rpi.numel(),)](rpi, rtt, seq, out, pool_len, topk, steps)

def extend(rpi, rtt, start, end, out, pool_len):
    cache_locs.assign_extend_cache_locs[(rpi.numel(),)](rpi, rtt, start, end, out, pool_len,
                                                        next_power_of_2(rpi.numel()))

def accept(index, locs, out):
    eagle.fill_accept_out_cache_loc[(index.numel(),)](index, locs, out, next_power_of_2(index.numel()))

def bonus(tokens, lens, out, stride):
    eagle.fill_bonus_tokens[(lens.numel(),)](tokens, lens, out, stride)

REFERENCES = {
    "assign_draft_cache_locs_contiguous_cpu": draft, "assign_extend_cache_locs_cpu": extend,
    "fill_accept_out_cache_loc_cpu": accept, "fill_bonus_tokens_cpu": bonus,
    "build_tree_kernel_efficient_cpu": spec_tree.sgl_build_tree_kernel_triton,
    "verify_tree_greedy_cpu": spec_tree.verify_tree_greedy_triton,
    "reconstruct_indices_from_tree_mask": reconstruct_tree.reconstruct_indices_from_tree_mask_triton,
}
cases = torch.load(sys.argv[1])
for case in cases.values():
    REFERENCES[case["op"]](*case["args"])
torch.save(cases, sys.argv[2])
"""


#: Runs in a fresh CPU-engine interpreter: the ops put where SGLang's CPU branches look them up (module globals bound
#: by ``from sgl_kernel import ...``; spec_tree binds them under ``sgl_*`` aliases), then SGLang's wrappers called.
_CALL_SITES = r"""
import json, sys, types
from server.sglang.launch.stub import install_sgl_kernel_stub
install_sgl_kernel_stub()
import torch
from server.sglang.speculative.cpu_ops import CPU_OPS, SPECULATIVE_OPS
sys.modules["sgl_kernel.speculative"] = types.ModuleType("sgl_kernel.speculative")
sys.modules["sgl_kernel.speculative"].__dict__.update(SPECULATIVE_OPS)
from sglang.kernels.ops.speculative import cache_locs, eagle, reconstruct_tree, spec_tree
assert cache_locs._is_cpu and eagle._is_cpu and spec_tree._is_cpu
for module, attr, op in [(cache_locs, "", "assign_draft_cache_locs_contiguous_cpu"),
                         (cache_locs, "", "assign_extend_cache_locs_cpu"), (eagle, "", "fill_accept_out_cache_loc_cpu"),
                         (eagle, "", "fill_bonus_tokens_cpu"), (spec_tree, "sgl_", "build_tree_kernel_efficient_cpu"),
                         (spec_tree, "sgl_", "verify_tree_greedy_cpu")]:
    assert type(getattr(module, attr + op)).__name__ == "StandInKernel"
    setattr(module, attr + op, CPU_OPS[op])
bs, n, seq, rows = 2, 4, torch.tensor([5, 9]), torch.tensor([2, 0])
table = torch.arange(4 * 32, dtype=torch.int32).view(4, 32)
draft = torch.empty(bs * 3, dtype=torch.int64)
cache_locs.assign_draft_cache_locs_contiguous_func(rows, table, seq, draft, 1, 3)
locs = cache_locs.assign_extend_cache_locs_func(req_pool_indices=rows, req_to_token=table, start_offset=seq,
                                                end_offset=seq + n, batch_size=bs, draft_token_num=n, device="cpu")
mask = torch.tensor([[j <= i for j in range(n)] for i in range(n)]).flatten().repeat(bs)
positions, (index, first, sibling) = torch.empty(bs * n, dtype=torch.int64), torch.empty((3, bs, n), dtype=torch.int64)
reconstruct_tree.reconstruct_indices_from_tree_mask_func(mask, seq, positions, index, first, sibling, bs, n)
predict, accept, accepted = spec_tree.verify_tree_greedy_func(
    predicts=torch.zeros(bs * n, dtype=torch.int32), accept_index=torch.full((bs, n), -1, dtype=torch.int32),
    accept_token_num=torch.empty(bs, dtype=torch.int32), candidates=torch.tensor([[1, 2, 3, 4], [1, 5, 6, 7]]),
    retrieve_index=index, retrieve_next_token=first, retrieve_next_sibling=sibling,
    target_predict=torch.tensor([[2, 3, 9, 9], [8, 8, 8, 8]]), topk=-1)
front, kept = torch.zeros(bs * n, dtype=torch.int64), torch.zeros(bs * n, dtype=torch.int64)
cache_locs.fill_front_out_cache_loc_func(accepted + 1, locs, front)
eagle.fill_accept_out_cache_loc_func(accept, locs, kept, bs * n)
bonus = torch.empty(bs, dtype=torch.int32)
eagle.fill_bonus_tokens_func(predict[accept], accepted + 1, bonus, n, bs)
tree_mask, tree = torch.ones(bs * n * n, dtype=torch.bool), torch.full((4, bs, n), -1)
spec_tree.build_tree_kernel_efficient_func(torch.tensor([[-1, 0, 1]] * bs), torch.tensor([[0, 1, 2]] * bs), seq,
                                           tree_mask, tree[0].view(-1), tree[1], tree[2], tree[3], 1, 3, n,
                                           spec_tree.TreeMaskMode.QLEN_ONLY)
assert torch.equal(tree_mask, mask) and torch.equal(tree[0].view(-1), positions)
assert torch.equal(tree[1:], torch.stack([index, first, sibling]))
print(json.dumps({k: v.tolist() for k, v in dict(draft=draft, locs=locs, positions=positions, first=first,
                  predict=predict, accept=accept, accepted=accepted, front=front, kept=kept, bonus=bonus).items()}))
"""


def _i32(values: Any) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


def _i64(values: Any) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


def _links(parent: list[int]) -> tuple[list[int], list[int]]:
    """First child and next sibling of each node (children in ascending order), from parents (parent < node)."""
    first, sibling = [-1] * len(parent), [-1] * len(parent)
    for node in range(len(parent) - 1, 0, -1):
        sibling[node], first[parent[node]] = first[parent[node]], node
    return first, sibling


def _mask(parent: list[int]) -> list[list[bool]]:
    """Row i: node i's ancestors and itself (parent -1: none)."""
    rows = [[False] * len(parent) for _ in parent]
    for node in range(len(parent)):
        rows[node][node] = True
        if parent[node] >= 0:
            rows[node][:node] = [a or b for a, b in zip(rows[node][:node], rows[parent[node]][:node])]
    return rows


def _chain(n: int) -> list[int]:
    return [-1] + list(range(n - 1))


def _ngram(n: int, matched: int) -> list[int]:
    """NGRAM with breadth 1: a chain of ``matched`` nodes, the rest zero padding hung off the root."""
    return [-1] + [i - 1 if i <= matched else 0 for i in range(1, n)]


def _random_tree(rng: random.Random, n: int) -> list[int]:
    return [-1] + [rng.randrange(i) for i in range(1, n)]


def _eagle_picks(rng: random.Random, topk: int, depth: int, n: int) -> tuple[list[int], list[int]]:
    """One request's ``parent_list`` and ``selected_index`` as EAGLE's draft loop and ``organize_draft_results``
    make them: step 0 scores ids 0..topk-1; step i >= 1 scores ``topk * topk`` children of the ``topk`` nodes
    expanded at step i-1 (ids from ``topk + (i-1) * topk**2``); the best ``n - 1`` ids overall, sorted."""
    score = {c: rng.uniform(0.05, 1.0) for c in range(topk)}
    parents, expanded = [-1, *range(topk)], list(range(topk))
    for step in range(1, depth):
        base = topk + (step - 1) * topk * topk
        for row, node in enumerate(expanded):
            for col in range(topk):
                score[base + row * topk + col] = score[node] * rng.uniform(0.05, 0.95)
        expanded = sorted(range(base, base + topk * topk), key=lambda c: -score[c])[:topk]
        if step < depth - 1:
            parents += expanded
    return parents, sorted(sorted(score, key=lambda c: -score[c])[:n - 1])


def _cases() -> dict[str, dict[str, Any]]:
    rng, gen = random.Random(0), torch.Generator().manual_seed(0)
    cases: dict[str, dict[str, Any]] = {}

    def add(name: str, op: str, *args: Any) -> None:
        cases[f"{op}-{name}"] = {"op": op, "args": list(args)}

    pool = torch.randperm(4096, generator=gen)[:8 * 64].view(8, 64).to(torch.int32)
    for name, bs, topk, steps, dtype in [("bs1-chain", 1, 1, 3, torch.int64), ("topk2", 4, 2, 3, torch.int64),
                                         ("topk4", 3, 4, 1, torch.int64), ("int32", 3, 2, 2, torch.int32)]:
        rows = torch.randperm(8, generator=gen)[:bs].to(dtype)
        seq = torch.randint(0, 64 - topk * steps + 1, (bs,), generator=gen).to(dtype)
        add(name, "assign_draft_cache_locs_contiguous_cpu", rows, pool.clone(), seq,
            torch.full((bs * topk * steps,), -9), 64, topk, steps)

    for name, lengths in [("bs1", [5]), ("uniform", [4, 4, 4]), ("ragged-with-empty", [3, 0, 6, 1])]:
        bs = len(lengths)
        rows = torch.randperm(8, generator=gen)[:bs]
        start = _i64([rng.randrange(64 - n + 1) for n in lengths])
        add(name, "assign_extend_cache_locs_cpu", rows, pool.clone(), start, start + _i64(lengths),
            torch.full((sum(lengths) + 3,), -9), 64)
    window = torch.randperm(1000, generator=gen)[:4 * 6].view(4, 6).to(torch.int32)  # fill_front_out_cache_loc
    front = _i32([1, 6, 3, 2])
    add("fill-front", "assign_extend_cache_locs_cpu", torch.arange(4), window, torch.zeros_like(front), front,
        torch.zeros(24, dtype=torch.int64), 6)

    for name, bs, n, width, dtype in [("bs1", 1, 4, 4, torch.int32), ("mixed", 4, 5, 5, torch.int32),
                                      ("int64", 3, 6, 3, torch.int64)]:
        accept = torch.full((bs, width), -1, dtype=dtype)
        taken_per_request = [0] if bs == 1 else [width - 1, 0] + [rng.randrange(width) for _ in range(bs - 2)]
        for b, taken in enumerate(taken_per_request):
            accept[b, :taken + 1] = _i64(sorted(rng.sample(range(b * n, b * n + n), taken + 1)))
        add(name, "fill_accept_out_cache_loc_cpu", accept, torch.randperm(10_000, generator=gen)[:bs * n],
            torch.zeros(bs * width, dtype=torch.int64))

    for name, lens in [("bs1-none", [1]), ("bs1-all", [4]), ("mixed", [1, 4, 2, 3, 4])]:
        tokens = torch.randint(0, 32_000, (len(lens), 4), generator=gen, dtype=torch.int32)
        add(name, "fill_bonus_tokens_cpu", tokens, _i32(lens), torch.full((len(lens),), -3, dtype=torch.int32), 4)

    for name, bs, topk, depth, n in [("bs1-chain", 1, 1, 4, 5), ("chain-short", 3, 1, 3, 3), ("depth1", 2, 3, 1, 3),
                                     ("topk2", 2, 2, 3, 6), ("topk4", 3, 4, 4, 8), ("topk8", 2, 8, 2, 10)]:
        picks = [_eagle_picks(rng, topk, depth, n) for _ in range(bs)]
        seq = _i64([rng.randrange(1, 9) for _ in range(bs)])
        for mode, size in [(1, bs * n * n + 5), (0, int(seq.sum()) * n + bs * n * n)]:
            mask = torch.rand(size, generator=gen) < 0.5 if mode == 0 else torch.ones(size, dtype=torch.bool)
            add(f"{name}-{'qlen' if mode else 'full'}", "build_tree_kernel_efficient_cpu",
                _i64([p for p, _ in picks]).view(bs, -1), _i64([s for _, s in picks]).view(bs, n - 1), seq, mask,
                torch.full((bs * n,), -7), *torch.full((3, bs, n), -1).unbind(0), topk, depth, n, mode)

    def verify(name: str, trees: list[list[int]], width: int, vocab: int, target: str) -> None:
        bs, n = len(trees), len(trees[0])
        candidates = torch.randint(0, vocab, (bs, n), generator=gen)
        predict = torch.randint(0, vocab, (bs, n), generator=gen)
        for b, parent in enumerate(trees):
            first, _ = _links(parent)
            if target == "all":  # along the first children; on a chain, every draft matches
                node = 0
                while first[node] != -1:
                    predict[b, node], node = candidates[b, first[node]], first[node]
            elif target == "none":
                predict[b, 0] = vocab
        links = [_links(parent) for parent in trees]
        add(name, "verify_tree_greedy_cpu", torch.zeros(bs * n, dtype=torch.int32),
            torch.full((bs, width), -1, dtype=torch.int32), torch.full((bs,), -5, dtype=torch.int32), candidates,
            torch.arange(bs * n).view(bs, n), _i64([f for f, _ in links]), _i64([s for _, s in links]), predict)

    verify("bs1-chain-all", [_chain(5)], 5, 50, "all")
    verify("bs1-chain-none", [_chain(5)], 5, 50, "none")
    verify("chain-partial", [_chain(6)] * 3, 6, 2, "random")
    verify("chain-width3-all", [_chain(6)] * 2, 3, 50, "all")
    verify("ngram-padded", [_ngram(6, 3), _ngram(6, 0), _ngram(6, 5)], 6, 2, "random")
    verify("random-trees", [_random_tree(rng, 8) for _ in range(4)], 8, 3, "random")
    verify("random-trees-all", [_random_tree(rng, 8) for _ in range(3)], 8, 50, "all")

    for name, trees in [("bs1-chain", [_chain(5)]), ("ngram-padded", [_ngram(6, 4), _ngram(6, 1), _ngram(6, 0)]),
                        ("random-trees", [_random_tree(rng, 8) for _ in range(4)]),
                        ("forest", [[-1] + [rng.randrange(-1, i) for i in range(1, 7)] for _ in range(3)])]:
        bs, n = len(trees), len(trees[0])
        mask = torch.tensor([_mask(parent) for parent in trees]).flatten()
        add(name, "reconstruct_indices_from_tree_mask", mask, _i64([rng.randrange(20) for _ in trees]),
            torch.full((bs * n,), -7), *torch.full((3, bs, n), -7).unbind(0), bs, n)
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return run_interpreted(_REFERENCE, CASES, tmp_path_factory.mktemp("spec_cpu_ops"),  # type: ignore[no-any-return]
                           timeout=600)


@pytest.mark.parametrize("case", sorted(CASES))
def test_op_matches_sglang_triton_kernel(case: str, reference: dict[str, dict[str, Any]]) -> None:
    args = [a.clone() if isinstance(a, torch.Tensor) else a for a in CASES[case]["args"]]
    assert OPS[CASES[case]["op"]](*args) is None
    for position, (ours, theirs) in enumerate(zip(args, reference[case]["args"])):
        if isinstance(ours, torch.Tensor):
            assert ours.dtype == theirs.dtype and torch.equal(ours, theirs), f"argument {position}"


def test_every_stand_in_has_a_real_op_installed_where_sglang_bound_it() -> None:
    """With +speculative, no stand-in kernel stays: each has a torch op, and the installer
    patches every SGLang module that bound one (the module PROVIDED names)."""
    from server.sglang.speculative.cpu_ops import SPECULATIVE_OPS
    from server.sglang.speculative.kernels import KERNEL_IMPORTERS

    assert set(CPU_OPS) == set(PROVIDED["sgl_kernel"])
    assert set(SPECULATIVE_OPS) == set(PROVIDED["sgl_kernel.speculative"])
    bound = {(module, op) for module, names in KERNEL_IMPORTERS.items() for op in names.values()}
    wanted = {(module, op) for key in ("sgl_kernel", "sgl_kernel.speculative") for op, module in PROVIDED[key].items()}
    assert bound == wanted
    assert all(op.__name__ == name for name, op in OPS.items())


def test_ngram_breadth1_chain_end_to_end() -> None:
    """NGRAM's chain (breadth 1), 2 requests of 4 nodes: request 0 accepts all 3 drafts, request 1 none."""
    n, mask = 4, torch.tensor([[j <= i for j in range(4)] for i in range(4)]).flatten().repeat(2)
    positions, index, first, sibling = torch.empty(8, dtype=torch.int64), *torch.empty((3, 2, 4), dtype=torch.int64)
    OPS["reconstruct_indices_from_tree_mask"](mask, _i64([10, 3]), positions, index, first, sibling, 2, n)
    assert positions.tolist() == [10, 11, 12, 13, 3, 4, 5, 6]
    assert index.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert first.tolist() == [[1, 2, 3, -1]] * 2 and sibling.tolist() == [[-1] * 4] * 2

    candidates, target = _i64([[7, 11, 12, 13], [7, 21, 22, 23]]), _i64([[11, 12, 13, 14], [99, 22, 23, 24]])
    predict, accept = torch.zeros(8, dtype=torch.int32), torch.full((2, 4), -1, dtype=torch.int32)
    accepted = torch.empty(2, dtype=torch.int32)
    CPU_OPS["verify_tree_greedy_cpu"](predicts=predict, accept_index=accept, accept_token_num=accepted,
                                      candidates=candidates, retrive_index=index, retrive_next_token=first,
                                      retrive_next_sibling=sibling, target_predict=target)
    assert accept.tolist() == [[0, 1, 2, 3], [4, -1, -1, -1]] and accepted.tolist() == [3, 0]
    assert predict.tolist() == [11, 12, 13, 14, 99, 0, 0, 0]

    out = torch.zeros(8, dtype=torch.int64)
    CPU_OPS["fill_accept_out_cache_loc_cpu"](accept, torch.arange(100, 108), out)
    assert out.tolist() == [100, 101, 102, 103, 104, 0, 0, 0]
    bonus = torch.empty(2, dtype=torch.int32)
    CPU_OPS["fill_bonus_tokens_cpu"](predict[accept], accepted + 1, bonus, 4)
    assert bonus.tolist() == [14, 99]


def test_ngram_padded_tree_and_eagle_chain_layouts() -> None:
    """NGRAM pads a short match with token-0 children of the root; EAGLE's topk=1 tree is a chain."""
    positions, index, first, sibling = torch.empty(5, dtype=torch.int64), *torch.empty((3, 1, 5), dtype=torch.int64)
    mask = torch.tensor(_mask(_ngram(5, 2))).flatten()
    OPS["reconstruct_indices_from_tree_mask"](mask, _i64([4]), positions, index, first, sibling, 1, 5)
    assert positions.tolist() == [4, 5, 6, 5, 5]
    assert first.tolist() == [[1, 2, -1, -1, -1]] and sibling.tolist() == [[-1, 3, -1, 4, -1]]

    tree_mask, positions = torch.ones(16, dtype=torch.bool), torch.empty(4, dtype=torch.int64)
    index, first, sibling = torch.full((3, 1, 4), -1).unbind(0)
    CPU_OPS["build_tree_kernel_efficient_cpu"](_i64([[-1, 0, 1]]), _i64([[0, 1, 2]]), _i64([9]), tree_mask,
                                               positions, index, first, sibling, 1, 3, 4, 1)
    assert tree_mask.view(4, 4).tolist() == [[j <= i for j in range(4)] for i in range(4)]
    assert positions.tolist() == [9, 10, 11, 12] and index.tolist() == [[0, 1, 2, 3]]
    assert first.tolist() == [[1, 2, 3, -1]] and sibling.tolist() == [[-1] * 4]
    with pytest.raises(NotImplementedError):
        CPU_OPS["build_tree_kernel_efficient_cpu"](_i64([[-1, 0, 1]]), _i64([[0, 1, 2]]), _i64([9]), tree_mask,
                                                   positions, index, first, sibling, 1, 3, 4, 2)


def test_sglang_cpu_call_sites_take_the_ops() -> None:
    """With ``SGLANG_USE_CPU_ENGINE=1``, SGLang's own ``*_func`` wrappers run the ops: signatures fit its calls."""
    env = {**os.environ, "SGLANG_USE_CPU_ENGINE": "1", "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-c", _CALL_SITES], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["draft"] == [69, 70, 71, 9, 10, 11] and got["locs"] == [69, 70, 71, 72, 9, 10, 11, 12]
    assert got["positions"] == [5, 6, 7, 8, 9, 10, 11, 12] and got["first"] == [[1, 2, 3, -1]] * 2
    assert got["predict"] == [2, 3, 9, 0, 8, 0, 0, 0] and got["accept"] == [[0, 1, 2, -1], [4, -1, -1, -1]]
    assert got["accepted"] == [2, 0] and got["bonus"] == [9, 8]
    assert got["front"] == got["kept"] == [69, 70, 71, 9, 0, 0, 0, 0]


def test_copy_all_layer_kv_cache_moves_every_buffers_rows_gather_then_scatter() -> None:
    """Against plain indexing (``buf[tgt] = buf[src]``, which reads every source first)."""
    from server.sglang.speculative.cpu_ops import copy_all_layer_kv_cache_cpu

    g = torch.Generator().manual_seed(5)
    buffers = [torch.randn((12, 2, 4), generator=g), torch.randn((12, 3), generator=g).to(torch.float64)]
    want = [b.clone() for b in buffers]
    src, tgt = _i64([1, 2, 3, 7]), _i64([2, 3, 9, 0])  # overlapping: row 2 is read before it is written
    for w in want:
        w[tgt] = w[src].clone()
    ptrs = torch.tensor([b.data_ptr() for b in buffers], dtype=torch.uint64)
    strides = torch.tensor([b.stride(0) * b.dtype.itemsize for b in buffers])
    copy_all_layer_kv_cache_cpu(ptrs, strides, tgt, src)
    assert all(torch.equal(b, w) for b, w in zip(buffers, want, strict=True))
    copy_all_layer_kv_cache_cpu(ptrs, strides, _i64([]), _i64([]))  # SGLang's warm-up shape: nothing to move


def test_assign_req_to_token_pool_writes_each_requests_slots_in_its_row() -> None:
    """Against a loop over requests written from SGLang's Triton kernel (``allocation.assign_req_to_token_pool``)."""
    from server.sglang.speculative.cpu_ops import assign_req_to_token_pool_cpu

    g = torch.Generator().manual_seed(11)
    table = torch.randint(0, 1000, (6, 40), generator=g, dtype=torch.int32)
    want = table.clone()
    rows, starts, ends = _i64([4, 0, 2]), _i64([10, 3, 7]), _i64([14, 3, 9])  # the second reserves nothing
    locs = torch.randint(0, 5000, (6,), generator=g, dtype=torch.int64)
    taken = 0
    for r, s, e in zip(rows.tolist(), starts.tolist(), ends.tolist(), strict=True):
        for j in range(e - s):
            want[r, s + j] = int(locs[taken + j])
        taken += e - s
    assign_req_to_token_pool_cpu(rows, table, starts, ends, locs, table.shape[1])
    assert torch.equal(table, want)
