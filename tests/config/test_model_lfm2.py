"""``model=lfm2_tiny``: its config, its generated checkpoint and that checkpoint's cache.

NOTE: the tokenizer donor is the default model's real checkpoint (converted once
per machine, about a minute); the LFM2 checkpoints are generated (under a second
each) into temporary caches, the donor linked into them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from compose import model as model_cache
from compose import model_lfm2
from compose.config import compose
from compose.schema import DType, SourceKind
from server.resolve import resolve
from tests.config.generated_models import build_in_fresh_cache, cache_with_donor, manifest, source_of

CHAT = [{"role": "system", "content": "Answer yes or no."}, {"role": "user", "content": "Is 2+2 four?"}]


@pytest.fixture(scope="module")
def donor() -> Path:
    """The default model's verified checkpoint in the real cache (the tokenizer donor)."""
    return model_cache.ensure_default_model(source_of())


@pytest.fixture(scope="module")
def built(donor: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``model=lfm2_tiny``'s checkpoint, built the way the server builds it."""
    yield from build_in_fresh_cache(donor, tmp_path_factory, "lfm2_tiny")


@pytest.fixture(scope="module")
def hf_model(built: Path):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(built, dtype=torch.float32)
    return model.eval()


def test_lfm2_tiny_composes_to_an_autoregressive_model():
    model = compose(["model=lfm2_tiny"]).model
    assert model.name == "lfm2-tiny" and model.path is None
    assert model.dtype == DType.float32 and model.dllm_algorithm is None
    assert model.source.kind == SourceKind.random_lfm2 and model.source.seed == 0
    default = compose([]).model
    # The donor is the default model's wheel.
    for key in ("package", "version", "wheel_sha256", "gguf_member"):
        assert model.source[key] == default.source[key], key
    plan = resolve(compose(["model=lfm2_tiny", "server.device=cpu"]))
    assert not plan.is_diffusion and plan.sglang["served_model_name"] == "lfm2-tiny"
    assert plan.default_model is not None and plan.default_model["kind"] == "random_lfm2"


def test_cache_directory_names_recipe_seed_and_donor(tmp_path, monkeypatch):
    monkeypatch.setenv("SWITCHBOARD_CACHE", str(tmp_path))
    lfm2 = source_of("model=lfm2_tiny")
    donor = model_cache.checkpoint_dir(model_cache.donor_source(lfm2))
    assert donor == model_cache.checkpoint_dir(source_of())
    name = model_cache.checkpoint_dir(lfm2).name
    assert name.startswith(f"{model_lfm2.RECIPE}-seed0-") and donor.name.startswith(name.split("-seed0-")[1])
    assert model_cache.checkpoint_dir(replace(lfm2, seed=7)).name.startswith(f"{model_lfm2.RECIPE}-seed7-")
    assert model_cache.checkpoint_dir(source_of("model=sdar_tiny")).name != name


def test_checkpoint_is_a_hybrid_lfm2(built):
    from safetensors import safe_open
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(built)
    assert config.architectures == ["Lfm2ForCausalLM"] and config.model_type == "lfm2"
    assert config.layer_types == ["conv", "conv", "full_attention", "conv", "full_attention", "conv"]
    assert config.full_attn_idxs == [2, 4] and config.conv_L_cache == 3 and config.conv_bias is False
    assert (config.num_hidden_layers, config.hidden_size, config.vocab_size) == (6, 64, 49152)
    assert config.tie_word_embeddings is True and config.block_auto_adjust_ff_dim is False
    assert config.dtype == "float32" or str(config.dtype) == "torch.float32"
    with safe_open(built / "model.safetensors", "pt") as f:
        keys = set(f.keys())
        tensors = {k: f.get_tensor(k) for k in keys}
    # SGLang's load_weights maps conv.conv.weight (dim, 1, width) to conv_weight and
    # fills the tied lm_head from the embedding.
    assert tensors["model.layers.0.conv.conv.weight"].shape == (64, 1, 3)
    assert "model.layers.2.self_attn.q_proj.weight" in keys and "model.layers.2.conv.conv.weight" not in keys
    assert "lm_head.weight" not in keys and tensors["model.embed_tokens.weight"].shape == (49152, 64)
    assert {str(t.dtype) for t in tensors.values()} == {"torch.float32"}
    # LeCun normal: std 1/sqrt(fan_in); norms ones.
    assert abs(float(tensors["model.embed_tokens.weight"].std()) - 64 ** -0.5) < 2e-3
    assert abs(float(tensors["model.layers.0.conv.conv.weight"].std()) - 3 ** -0.5) < 0.05
    assert bool((tensors["model.embedding_norm.weight"] == 1).all())


def test_hf_transformers_runs_it_in_float32_and_its_convs_carry_state(hf_model):
    import torch

    ids = torch.tensor([[1, 9690, 198, 2683, 359, 253, 5356, 5646, 11, 2, 198, 1, 4093, 198, 19161, 253]])
    with torch.no_grad():
        logits = hf_model(ids).logits[0]
        assert logits.dtype == torch.float32 and logits.shape == (16, 49152)
        assert bool(logits.isfinite().all()) and float(logits[-1].std()) > 0.5
        # The conv state is visible in the output: convs that forget their past
        # (the taps on the previous CONV_WIDTH - 1 inputs zeroed) move the logits.
        convs = [layer.conv.conv.weight for layer in hf_model.model.layers if hasattr(layer, "conv")]
        assert len(convs) == 4
        saved = [w.clone() for w in convs]
        for w in convs:
            w[:, :, :-1] = 0
        try:
            forgetful = hf_model(ids).logits[0]
        finally:
            for w, s in zip(convs, saved):
                w.copy_(s)
    assert float((forgetful[-1] - logits[-1]).abs().max()) > 0.1


def test_tokenizer_and_chat_template_are_the_donors(built, donor):
    from transformers import AutoTokenizer

    tok, smol = AutoTokenizer.from_pretrained(built), AutoTokenizer.from_pretrained(donor)
    assert len(tok) == len(smol) == model_lfm2.VOCAB_SIZE
    assert (tok.bos_token, tok.eos_token, tok.pad_token) == (smol.bos_token, smol.eos_token, smol.pad_token)
    assert tok.chat_template and tok.chat_template == smol.chat_template
    rendered = tok.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    assert rendered == ("<|im_start|>system\nAnswer yes or no.<|im_end|>\n"
                        "<|im_start|>user\nIs 2+2 four?<|im_end|>\n<|im_start|>assistant\n")
    # SGLang's chat serving (and /v1/decisions) trusts the rendered text only if
    # re-encoding it gives the template's own ids (serving_chat.py
    # _probe_prompt_text_round_trip).
    ids = tok.apply_chat_template(CHAT, tokenize=True, add_generation_prompt=True, return_dict=False)
    assert tok.encode(rendered) == list(ids) and max(ids) < model_lfm2.VOCAB_SIZE


def test_same_seed_is_bit_identical_and_another_seed_only_changes_weights(built, donor, tmp_path, monkeypatch):
    monkeypatch.setenv("SWITCHBOARD_CACHE", str(cache_with_donor(tmp_path / "cache", donor)))
    again = model_cache.ensure_generated(source_of("model=lfm2_tiny"), donor)
    assert again != built and again.name == built.name
    assert manifest(again) == manifest(built)
    assert manifest(built)["source"].startswith(f"{model_lfm2.RECIPE} seed=0 torch==")
    other = model_cache.ensure_generated(source_of("model=lfm2_tiny", "model.source.seed=1"), donor)
    assert other.name != built.name and model_cache.verify_checkpoint(other) is None
    changed = {name for name, meta in manifest(other)["files"].items()
               if meta != manifest(built)["files"][name]}
    assert changed == {"model.safetensors"}


def test_a_donor_past_the_vocabulary_is_refused(donor, tmp_path):
    bad = tmp_path / "donor"
    bad.mkdir()
    tokenizer = json.loads((donor / "tokenizer.json").read_text())
    tokenizer["model"]["vocab"]["<|extra|>"] = model_lfm2.VOCAB_SIZE
    (bad / "tokenizer.json").write_text(json.dumps(tokenizer))
    (bad / "tokenizer_config.json").write_text("{}")
    (tmp_path / "out").mkdir()
    with pytest.raises(model_lfm2.Lfm2BuildError, match="past the model's vocabulary"):
        model_lfm2.write_tokenizer(bad, tmp_path / "out")
