"""Packed rows through LFM2's short conv (server/sglang/decisions/conv.py) against stock per-question runs.

The hook's core (``restarted_conv``) and the reference both run SGLang's real varlen kernel
(``causal_conv1d_fn``, Triton) on CPU under Triton's interpreter, in one fresh interpreter: the flag
(``TRITON_INTERPRET=1``) must be set before SGLang's kernel modules are imported, which other seams
tests may already have done here. The reference is SGLang's stock pass with every ``context + question``
(from the row's cached prefix), every context alone and every ordinary row as its own request, each
from a copy of the row's slot. Outputs, the rows' slots and every other slot must come back bit-identical.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from server.sglang.decisions import layout
from server.sglang.decisions.conv import forward_with_restart, restarted_conv
from server.sglang.decisions.layout import PackedLayout, PackedRow
from tests.interpreted import run_interpreted

#: Runs in a fresh interpreter: each run through the hook's core and through SGLang's stock kernel.
_RUN = r"""
import sys
from server.sglang.launch.stub import install_sgl_kernel_stub
install_sgl_kernel_stub()
from types import SimpleNamespace
import torch
from sglang.srt.layers.attention.mamba.causal_conv1d import causal_conv1d_fn
from server.sglang.decisions.conv import restarted_conv
from server.sglang.decisions.layout import PackedLayout, PackedRow

runs = torch.load(sys.argv[1])
for run in runs.values():
    pool = run["pool0"].clone()
    meta = SimpleNamespace(layer_cache=SimpleNamespace(conv=[pool]), cache_indices=run["slots"],
                           has_initial_state=run["has_init"])
    rows = {r: PackedRow(PackedLayout(c, tuple(qs)), p) for r, (c, qs, p) in run["rows"].items()}
    x = run["x"].clone()
    run["out"] = restarted_conv(x, run["w"], run["b"], meta, rows, run["lens"])
    run["pool"], run["x_after"] = pool, x
    ref_pool = run["ref_pool0"].clone()
    n = len(run["ref_lens"])
    run["ref_out"] = causal_conv1d_fn(
        run["ref_x"].contiguous(), run["w"], run["b"],
        query_start_loc=torch.tensor([0, *torch.tensor(run["ref_lens"]).cumsum(0).tolist()], dtype=torch.int32),
        cache_indices=torch.arange(n), has_initial_state=run["ref_has_init"], conv_states=ref_pool, activation=None)
    run["ref_pool"] = ref_pool
torch.save(runs, sys.argv[2])
"""

#: The batch: ordinary rows ``("n", tokens, prefix)`` and packed rows ``("p", context, questions, prefix)``.
#: Covers ordinary rows with and without a prefix (a 1-token one, as a MIXED batch's decode row), packed
#: rows from no prefix, a prefix inside the context (>= K-1 and 1 uncached token, < K-1), a prefix equal to
#: the context, a 1-token context (< K-1, with and without its prefix), one-token questions.
BATCH: list[tuple[Any, ...]] = [("n", 5, 0), ("p", 10, (4, 1, 6), 0), ("n", 1, 7), ("p", 9, (3, 2), 4),
                                ("p", 6, (2, 5), 5), ("p", 8, (1, 1, 3), 8), ("n", 12, 3), ("p", 1, (2,), 0),
                                ("p", 1, (1, 3), 1)]
SLOTS = [11, 3, 7, 0, 9, 4, 2, 5, 13]
N_SLOTS = 16


@dataclass
class Spans:
    """Where each expectation lives: (hook span, reference sequence) pairs, and each row's end state."""

    outputs: list[tuple[str, int, int, int]] = field(default_factory=list)
    """(what, hook start, tokens, reference sequence): the hook's output there is the sequence's last tokens."""
    slot_ref: dict[int, int | None] = field(default_factory=dict)
    """Row -> the reference sequence whose end state its slot must hold (``None``: left as it was)."""


def _build(pool_dtype: torch.dtype, width: int, bias: bool, seed: int) -> tuple[dict[str, Any], Spans]:
    g = torch.Generator().manual_seed(seed)
    dim = 40
    lens, has_init, rows = [], [], {}
    for r, spec in enumerate(BATCH):
        if spec[0] == "n":
            lens.append(spec[1])
            has_init.append(spec[2] > 0)
        else:
            _, c, qs, p = spec
            rows[r] = (c, list(qs), p)
            lens.append(c - p + sum(qs))
            has_init.append(p > 0)
    x = torch.randn(dim, sum(lens), generator=g)
    pool0 = torch.randn(N_SLOTS, dim, width - 1, generator=g).to(pool_dtype)
    starts = [0, *torch.tensor(lens).cumsum(0).tolist()]
    spans = Spans()
    ref_x: list[torch.Tensor] = []
    ref_lens: list[int] = []
    ref_slots: list[int] = []
    ref_init: list[bool] = []

    def ref(r: int, *parts: tuple[int, int]) -> int:
        ref_x.extend(x[:, a:b] for a, b in parts)
        ref_lens.append(sum(b - a for a, b in parts))
        ref_slots.append(SLOTS[r])
        ref_init.append(has_init[r])
        return len(ref_lens) - 1

    for r in range(len(BATCH)):
        s = starts[r]
        if r not in rows:
            k = ref(r, (s, s + lens[r]))
            spans.outputs.append((f"ordinary row {r}", s, lens[r], k))
            spans.slot_ref[r] = k
            continue
        c, qs, p = rows[r]
        ctx = (s, s + c - p)
        spans.slot_ref[r] = None  # prefix == context: the cached state, untouched
        if c > p:
            k = ref(r, ctx)
            spans.outputs.append((f"row {r} context", s, c - p, k))
            spans.slot_ref[r] = k
        q0 = s + c - p
        for i, q in enumerate(qs):  # stock: context + this question alone, from the same cached prefix
            spans.outputs.append((f"row {r} question {i}", q0, q, ref(r, ctx, (q0, q0 + q))))
            q0 += q
    run = {"x": x, "w": torch.randn(dim, width, generator=g) * width ** -0.5,
           "b": torch.randn(dim, generator=g) if bias else None, "pool0": pool0,
           "slots": torch.tensor(SLOTS), "has_init": torch.tensor(has_init), "rows": rows, "lens": lens,
           "ref_x": torch.cat(ref_x, dim=1), "ref_lens": ref_lens, "ref_has_init": torch.tensor(ref_init),
           "ref_pool0": pool0[ref_slots].clone()}
    return run, spans


#: fp32 pool, LFM2's shape (K=3, no bias); a bf16 pool with K=4 and a bias.
RUNS = {"fp32-k3": _build(torch.float32, 3, False, 0),
        "bf16-k4-bias": _build(torch.bfloat16, 4, True, 1)}


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return run_interpreted(_RUN, {name: run for name, (run, _) in RUNS.items()},  # type: ignore[no-any-return]
                           tmp_path_factory.mktemp("decisions_conv"), timeout=300)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_every_output_equals_its_stock_per_question_run(name: str, ran: dict[str, dict[str, Any]]) -> None:
    run, spans = ran[name], RUNS[name][1]
    ref_starts = [0, *torch.tensor(run["ref_lens"]).cumsum(0).tolist()]
    for what, start, n, k in spans.outputs:
        want = run["ref_out"][:, ref_starts[k + 1] - n:ref_starts[k + 1]]
        assert torch.equal(run["out"][:, start:start + n], want), what
    assert torch.equal(run["x_after"], RUNS[name][0]["x"])  # the input is not written


@pytest.mark.parametrize("name", sorted(RUNS))
def test_each_slot_holds_its_rows_context_end_state_and_no_other_slot_moves(
        name: str, ran: dict[str, dict[str, Any]]) -> None:
    run, spans = ran[name], RUNS[name][1]
    assert run["pool"].dtype == run["pool0"].dtype
    for r, k in spans.slot_ref.items():
        want = run["pool0"][SLOTS[r]] if k is None else run["ref_pool"][k]
        assert torch.equal(run["pool"][SLOTS[r]], want), f"row {r} (slot {SLOTS[r]})"
    untouched = [i for i in range(N_SLOTS) if i not in SLOTS]
    assert torch.equal(run["pool"][untouched], run["pool0"][untouched])


def _meta(has_init: list[bool]) -> SimpleNamespace:
    return SimpleNamespace(layer_cache=SimpleNamespace(conv=[torch.zeros(4, 8, 2)]),
                           cache_indices=torch.arange(len(has_init)), has_initial_state=torch.tensor(has_init))


@pytest.mark.parametrize(("rows", "lens", "has_init"), [
    ({1: PackedRow(PackedLayout(4, (2, 3)), 0)}, [3, 8], [False, False]),  # 9 tokens in the layout, 8 run
    ({0: PackedRow(PackedLayout(4, (2,)), 5)}, [1], [True]),  # a prefix past the context
    ({0: PackedRow(PackedLayout(4, (2,)), 2)}, [4], [False]),  # a prefix without an initial state
    ({2: PackedRow(PackedLayout(1, (1,)), 0)}, [2, 2], [False, False]),  # a row the batch does not have
    ({0: PackedRow(PackedLayout(1, (1,)), 0)}, None, [False]),  # no extend lengths
])
def test_a_layout_that_does_not_match_the_extend_is_refused(rows: dict[int, PackedRow], lens: list[int] | None,
                                                            has_init: list[bool]) -> None:
    tokens = sum(lens or [0])
    with pytest.raises(RuntimeError, match="switchboard: .*refusing"):
        restarted_conv(torch.zeros(8, tokens), torch.zeros(8, 3), None, _meta(has_init), rows, lens)


class _Mode:
    def __init__(self, extend: bool, verify: bool = False) -> None:
        self.extend, self.verify = extend, verify

    def is_extend(self) -> bool:
        return self.extend

    def is_target_verify(self) -> bool:
        return self.verify


@pytest.mark.parametrize(("mode", "rids"), [(_Mode(True), ["conv-b", "conv-c"]), (_Mode(True), None),
                                            (_Mode(False), ["conv-a"]), (_Mode(True, verify=True), ["conv-a"])])
def test_batches_without_packed_extend_rows_go_to_sglang(mode: _Mode, rids: list[str] | None,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """No packed row, or a packed request's id in a decode / verify batch."""
    monkeypatch.setitem(layout._ROWS, "conv-a", PackedRow(PackedLayout(2, (1,)), 0))
    batch = SimpleNamespace(forward_mode=mode, rids=rids)
    seen = []

    def original(conv: object, hidden: torch.Tensor, forward_batch: object) -> str:
        seen.append((conv, hidden, forward_batch))
        return "stock"

    conv, hidden = object(), torch.zeros(3, 4)
    assert forward_with_restart(original, conv, hidden, batch) == "stock"
    assert seen == [(conv, hidden, batch)]
