"""Scute's slots, converted from saved PEFT adapters, compute what PEFT computes.

The reference is PEFT's own model in HF transformers (float32): layer outputs,
whole-model logits and greedy tokens; and a batch mixing every adapter type
equals each adapter run alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from peft import LoHaConfig, LoKrConfig, LoraConfig, VeraConfig, get_peft_model
from torch import nn

from kernels.scute.peft import UnsupportedAdapter, read_peft
from kernels.scute.reference import scute_linear, scute_linear_segments
from kernels.scute.slots import AdapterSlots
from tests.kernels.peft_models import CONFIGS, base_model, make_adapter

METHODS = {"lora": "lora", "rslora": "lora", "dora": "dora", "vera": "vera", "oft": "oft", "oft_cayley": "oft",
           "oft_shared": "oft", "ia3": "ia3"}


@pytest.fixture(scope="module")
def adapters(tmp_path_factory) -> dict[str, tuple[Path, object]]:
    folder = tmp_path_factory.mktemp("adapters")
    return {name: (folder / name, make_adapter(name, folder)) for name in CONFIGS}


def base_linear(model: nn.Module):
    modules = dict(model.named_modules())

    def lookup(path: str) -> tuple[torch.Tensor, torch.Tensor | None]:
        layer = modules[path]
        return layer.weight.detach(), None if layer.bias is None else layer.bias.detach()

    return lookup


class ScuteLinear(nn.Module):
    """A base ``nn.Linear`` computed by the Scute reference with one adapter's slots."""

    def __init__(self, base: nn.Linear, slots: AdapterSlots | None) -> None:
        super().__init__()
        self.base, self.slots = base, slots

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return scute_linear(x, self.base.weight, self.base.bias, self.slots)


def with_slots(model: nn.Module, slots: dict[str, AdapterSlots]) -> nn.Module:
    for path, s in slots.items():
        parent_path, _, leaf = path.rpartition(".")
        parent = model.get_submodule(parent_path)
        setattr(parent, leaf, ScuteLinear(getattr(parent, leaf), s))
    return model


@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_adapted_layer_computes_what_peft_computes(name, adapters):
    path, peft_model = adapters[name]
    converted = read_peft(path, base_linear(base_model()))
    assert converted.method == METHODS[name] and converted.slots
    torch.manual_seed(2)
    for module, slots in converted.slots.items():
        layer = peft_model.base_model.model.get_submodule(module)
        x = torch.randn(3, 5, layer.in_features)
        with torch.no_grad():
            want = layer(x)
            got = scute_linear(x, layer.get_base_layer().weight, layer.get_base_layer().bias, slots)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=f"{name} {module}")


@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_whole_model_with_slots_gives_pefts_logits_and_greedy_tokens(name, adapters):
    path, peft_model = adapters[name]
    ours = with_slots(base_model(), read_peft(path, base_linear(base_model())).slots)
    ids = torch.tensor([[5, 17, 3, 42, 8, 9, 60, 2]])
    with torch.no_grad():
        torch.testing.assert_close(ours(ids).logits, peft_model(ids).logits, rtol=1e-4, atol=1e-4)
        kw = {"max_new_tokens": 16, "do_sample": False, "pad_token_id": 0}
        assert ours.generate(ids, **kw).tolist() == peft_model.generate(input_ids=ids, **kw).tolist()


def test_the_adapter_changes_the_output(adapters):
    """Control: the comparisons above can fail (every adapter moves the logits)."""
    ids = torch.tensor([[5, 17, 3, 42, 8]])
    with torch.no_grad():
        plain = base_model()(ids).logits
        for name, (_, peft_model) in adapters.items():
            assert (peft_model(ids).logits - plain).abs().max() > 1e-3, name


def test_a_batch_mixing_every_type_equals_each_adapter_alone(adapters):
    base = base_model()
    layer = base.model.layers[0].self_attn.v_proj
    module = "model.layers.0.self_attn.v_proj"
    converted = {n: read_peft(adapters[n][0], base_linear(base)).slots for n in CONFIGS}
    names = [n for n in CONFIGS if module in converted[n]]
    slots: list[AdapterSlots | None] = [converted[n][module] for n in names] + [None]
    assert {METHODS[n] for n in names} == {"lora", "dora", "vera", "oft", "ia3"}
    seg_adapter = [0, len(slots) - 1, 1, 2, 0, 3, len(slots) - 1] + list(range(4, len(names)))
    seg_lens = [3, 2, 0, 4, 1, 2, 3] + [2] * (len(names) - 4)
    torch.manual_seed(3)
    x = torch.randn(sum(seg_lens), layer.in_features)
    with torch.no_grad():
        got = scute_linear_segments(x, layer.weight, layer.bias, slots, seg_lens, seg_adapter)
        lo = 0
        for n, k in zip(seg_lens, seg_adapter):
            want = scute_linear(x[lo:lo + n], layer.weight, layer.bias, slots[k])
            torch.testing.assert_close(got[lo:lo + n], want, rtol=1e-6, atol=1e-6)
            lo += n


def _saved(folder: Path, config, name: str) -> Path:
    torch.manual_seed(0)
    get_peft_model(base_model(), config).save_pretrained(folder / name)
    return folder / name


@pytest.mark.parametrize("name,config,message", [
    ("loha", LoHaConfig(r=4, target_modules=["q_proj"]), "PEFT type LOHA is not supported"),
    ("lokr", LoKrConfig(r=4, target_modules=["q_proj"]), "PEFT type LOKR is not supported"),
    ("saved_modules", LoraConfig(r=4, target_modules=["q_proj"], modules_to_save=["lm_head"]),
     "modules_to_save"),
    ("tokens", LoraConfig(r=4, target_modules=["q_proj"], trainable_token_indices=[3, 4]),
     "trainable_token_indices"),
    ("bias", LoraConfig(r=4, target_modules=["q_proj"], bias="all"), "trains biases"),
    ("vera_seeded", VeraConfig(r=8, target_modules=["q_proj"], save_projection=False), "save_projection=false"),
])
def test_unsupported_adapters_are_refused_naming_why(name, config, message, tmp_path):
    with pytest.raises(UnsupportedAdapter, match=message):
        read_peft(_saved(tmp_path, config, name), base_linear(base_model()))


def test_a_slot_of_the_wrong_shape_is_refused():
    with pytest.raises(ValueError, match="scale"):
        AdapterSlots(scale=torch.ones(3)).check(in_features=4, out_features=5)
    with pytest.raises(ValueError, match="blocks"):
        AdapterSlots(blocks=torch.ones(3, 2, 2)).check(in_features=4, out_features=5)
