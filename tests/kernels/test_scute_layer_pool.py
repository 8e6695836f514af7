"""The server binding's math (``server/sglang/adapters``) against PEFT, with no SGLang.

SGLang fuses q/k/v and gate/up into one layer each; the binding converts a
PEFT adapter against those fused layers and keeps its slots in one pool per
fused layer, indexed by buffer slot. Here a model fused the way SGLang fuses
it (same weights as the tiny HF Llama) is adapted through ``ScuteStore`` and
each fused layer's output, for a batch whose segments use different buffer
slots, equals the concatenation of PEFT's adapted projections.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from kernels.scute.peft import UnsupportedAdapter
from server.sglang.adapters.layer_pool import LayerPool
from server.sglang.adapters.store import SLICES, ScuteStore, sglang_shaped
from tests.kernels.peft_models import CONFIGS, TINY, base_model, make_adapter

MIXED = ["lora", "dora", "vera", "oft", "ia3"]


def fused_model(hf: nn.Module) -> tuple[nn.Module, list[dict[str, nn.Module]]]:
    """The tiny Llama's linear layers as SGLang lays them out (fused qkv and gate_up)."""
    root = nn.Module()
    modules: list[dict[str, nn.Module]] = []
    for i, layer in enumerate(hf.model.layers):
        a, m = layer.self_attn, layer.mlp
        parts = {"self_attn.qkv_proj": [a.q_proj, a.k_proj, a.v_proj], "self_attn.o_proj": [a.o_proj],
                 "mlp.gate_up_proj": [m.gate_proj, m.up_proj], "mlp.down_proj": [m.down_proj]}
        found = {}
        for name, linears in parts.items():
            fused = nn.Linear(linears[0].in_features, sum(x.out_features for x in linears))
            with torch.no_grad():
                fused.weight.copy_(torch.cat([x.weight for x in linears]))
                fused.bias.copy_(torch.cat([x.bias for x in linears]))
            if len(linears) == 3:
                fused.q_proj_shard_size, fused.kv_proj_shard_size, fused.v_proj_shard_size = (
                    x.out_features for x in linears)
            elif len(linears) == 2:
                fused.output_sizes = [x.out_features for x in linears]
            path = f"model.layers.{i}.{name}"
            parent, _, leaf = path.rpartition(".")
            holder = root
            for part in parent.split("."):
                if not hasattr(holder, part):
                    holder.add_module(part, nn.Module())
                holder = getattr(holder, part)
            holder.add_module(leaf, fused)
            found[path] = fused
        modules.append(found)
    return root, modules


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("adapters")
    peft = {name: make_adapter(name, folder) for name in MIXED}
    fused, modules = fused_model(base_model())
    store = ScuteStore(max_rank=None)
    for name in MIXED:
        store.add(f"id-{name}", store.convert(name, str(folder / name), fused))
    store.build_pools(modules, num_slots=len(MIXED) + 2)
    for slot, name in enumerate(MIXED, start=1):
        store.fill(slot, f"id-{name}")
    store.fill(len(MIXED) + 1, None)
    return folder, peft, fused, modules, store


def peft_output(peft_model: nn.Module, path: str, x: torch.Tensor) -> torch.Tensor:
    parent, _, fused = path.rpartition(".")
    layers = dict(peft_model.base_model.model.named_modules())
    with torch.no_grad():
        return torch.cat([layers[f"{parent}.{leaf}"](x) for leaf in SLICES.get(fused, (fused,))], dim=-1)


@pytest.mark.parametrize("rows_per_segment", [1, 5, 12], ids=["decode", "short", "prefill"])
def test_fused_layers_equal_peft_in_a_mixed_batch(setup, rows_per_segment):
    _, peft, _, modules, store = setup
    torch.manual_seed(rows_per_segment)
    # segments: base slot, every adapter, base again, an adapter repeated
    seg_slots = [len(MIXED) + 1, 1, 2, 3, 4, 5, len(MIXED) + 1, 4]
    seg_lens = [rows_per_segment + (i % 2) for i in range(len(seg_slots))]
    seg_lens[2] = 0  # NOTE: an empty segment is allowed and touches nothing
    base = base_model()
    for layer_modules in modules:
        for path, layer in layer_modules.items():
            pool = store.pools[id(layer)]
            x = torch.randn(sum(seg_lens), layer.in_features)
            with torch.no_grad():
                got = pool.forward(x, layer.weight, layer.bias, seg_lens, seg_slots)
            lo = 0
            for n, slot in zip(seg_lens, seg_slots, strict=True):
                xs = x[lo:lo + n]
                if slot == len(MIXED) + 1:
                    want = peft_output(base_as_peft(base), path, xs)
                else:
                    want = peft_output(peft[MIXED[slot - 1]], path, xs)
                torch.testing.assert_close(got[lo:lo + n], want, rtol=1e-5, atol=1e-5, msg=f"{path} slot {slot}")
                lo += n


def base_as_peft(base: nn.Module) -> nn.Module:
    holder = nn.Module()
    holder.base_model = nn.Module()
    holder.base_model.model = base
    return holder


def test_cleared_slot_is_the_base_layer_exactly(setup):
    _, _, _, modules, store = setup
    path, layer = next(iter(modules[0].items()))
    pool: LayerPool = store.pools[id(layer)]
    store.clear(3)
    x = torch.randn(4, layer.in_features)
    with torch.no_grad():
        assert torch.equal(pool.forward(x, layer.weight, layer.bias, [4], [3]), torch.nn.functional.linear(
            x, layer.weight, layer.bias) * 1.0 + 0.0)
    store.fill(3, "id-vera")


def test_sglang_is_handed_a_zero_rank_one_lora_over_whole_fused_layers(setup):
    _, _, fused, _, store = setup
    config, tensors = sglang_shaped(store.adapters["id-oft"], fused)
    assert config["r"] == 1 and config["peft_type"] == "LORA"
    # OFT targets q, v and o: SGLang gets q, k, v (one fused layer) and o, all zeros
    assert set(config["target_modules"]) == {"q_proj", "k_proj", "v_proj", "o_proj"}
    assert all(not t.any() for t in tensors.values())
    assert len(tensors) == 2 * 4 * TINY.num_hidden_layers


def test_an_adapter_past_the_slots_rank_is_refused_before_loading(setup, tmp_path):
    folder, _, fused, _, store = setup
    from peft import LoraConfig

    from tests.kernels import peft_models

    peft_models.CONFIGS["wide"] = LoraConfig(r=32, lora_alpha=8, target_modules=["q_proj"], init_lora_weights=False)
    try:
        make_adapter("wide", tmp_path)
    finally:
        del peft_models.CONFIGS["wide"]
    with pytest.raises(UnsupportedAdapter, match="exceeds the slots' rank"):
        store.convert("wide", str(tmp_path / "wide"), fused)
    assert "id-wide" not in store.adapters and CONFIGS.keys() >= set(MIXED)
