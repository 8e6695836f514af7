"""A tiny random-weight diffusion LM (``SDARForCausalLM``) for SGLang's dLLM path.

``model=sdar_tiny`` serves it. Its weights are random, so its text is
meaningless, but SGLang's block rounds on it are real and exactly predictable
(``docs/dwise-notes.md`` §3.1): it exists for tests and demos of diffusion-LM
scheduling on CPU. The checkpoint is a Qwen3 model (SGLang's ``sdar.py`` loads
Qwen3 weight names) whose config names the SDAR architecture, with the donor
model's tokenizer padded to the vocabulary.

This module only writes the files into a directory; ``compose.model`` owns the
cache (``.partial`` → rename, manifest, lock) and builds the donor.

NOTE: SGLang 0.5.23 hard-codes the SDAR mask id (151669) and block size (4) in
``sglang/srt/dllm/config.py`` and reads neither from the checkpoint, so the
vocabulary must reach past the mask id; ``mask_token_id`` and ``block_size`` in
``config.json`` are informational.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

#: The architecture SGLang's dLLM config recognizes (``DLLM_PARAMS``).
ARCHITECTURE = "SDARForCausalLM"
#: SGLang's hard-coded SDAR mask id.
MASK_TOKEN_ID = 151669
#: SGLang's hard-coded SDAR block size (tokens denoised per block).
BLOCK_SIZE = 4
#: The model's vocabulary: past the mask id; the donor's tokenizer is padded to it.
VOCAB_SIZE = 151680
#: The mask token's text.
MASK_TOKEN = "<|MASK|>"
#: Names the recipe in the cache directory.
#: NOTE: bump it whenever the files this module writes change, so that a cached
#: checkpoint of an older recipe (which still verifies) is never reused.
RECIPE = "sdar-tiny-v1"
#: Standard deviation of every weight matrix (norm weights stay ones).
INIT_STD = 0.02

#: ``Qwen3Config`` of the model (the rest are transformers' defaults).
QWEN3_CONFIG: dict[str, Any] = {
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-6,
    "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
    # NOTE: must stay false: SGLang 0.5.23's SDAR load_weights looks up
    # lm_head.weight for tied embeddings and fails (KeyError, models/sdar.py:521).
    "tie_word_embeddings": False,
    "attention_bias": False,
    # SmolLM2's ids (the donor tokenizer's <|im_start|>, <|im_end|>).
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 2,
}


class SdarBuildError(RuntimeError):
    """The donor's tokenizer cannot be padded to the SDAR vocabulary."""


def write_weights(out: Path, seed: int) -> None:
    """Write ``model.safetensors``, ``config.json`` and ``generation_config.json``
    into the directory ``out``: random weights from ``seed``."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    # NOTE: the model's own init draws from the global RNG; fork it so that
    # building leaves the caller's RNG state alone. Every matrix is overwritten.
    with torch.random.fork_rng(devices=[]):
        model = Qwen3ForCausalLM(Qwen3Config(**QWEN3_CONFIG)).to(torch.float32)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    with torch.no_grad():
        # NOTE: bit-identical files: drawn in name order (not module order) on
        # the CPU generator, in float64 (torch's scalar sampler, not its
        # float32 SIMD one, which differs between CPU kinds), then rounded.
        for _, param in sorted(model.named_parameters()):
            if param.dim() > 1:
                draw = torch.empty(param.shape, dtype=torch.float64).normal_(0.0, INIT_STD, generator=gen)
                param.copy_(draw.to(torch.float32))
    model.save_pretrained(out)
    config_path = out / "config.json"
    config = json.loads(config_path.read_text())
    config.update(architectures=[ARCHITECTURE], model_type="qwen3",
                  mask_token_id=MASK_TOKEN_ID, block_size=BLOCK_SIZE)
    config_path.write_text(json.dumps(config, indent=2) + "\n")


def write_tokenizer(donor: Path, out: Path) -> None:
    """Write into ``out`` the tokenizer of the checkpoint directory ``donor``,
    padded to ``VOCAB_SIZE`` with ``<|reserved_i|>`` tokens and ``<|MASK|>`` at
    ``MASK_TOKEN_ID``, with its chat template."""
    tokenizer = json.loads((donor / "tokenizer.json").read_text())
    vocab: dict[str, int] = tokenizer["model"]["vocab"]
    size = len(vocab)
    # NOTE: padding appends ids; it needs the donor's ids to be 0..size-1 and
    # every added token to be one of them (SmolLM2's are).
    if sorted(vocab.values()) != list(range(size)) or size > MASK_TOKEN_ID:
        raise SdarBuildError(f"{donor}/tokenizer.json: vocabulary ids are not 0..n-1 below {MASK_TOKEN_ID}")
    if any(t["id"] >= size for t in tokenizer.get("added_tokens", [])):
        raise SdarBuildError(f"{donor}/tokenizer.json: added tokens outside the vocabulary")
    for i in range(size, VOCAB_SIZE):
        name = MASK_TOKEN if i == MASK_TOKEN_ID else f"<|reserved_{i}|>"
        if name in vocab:
            raise SdarBuildError(f"{donor}/tokenizer.json already has {name}")
        # NOTE: unreachable by BPE merges, so a prompt tokenizes as the donor's does.
        vocab[name] = i
    tokenizer["added_tokens"].append({
        "id": MASK_TOKEN_ID, "content": MASK_TOKEN, "single_word": False, "lstrip": False,
        "rstrip": False, "normalized": False, "special": True,
    })
    (out / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False))
    tok_config = json.loads((donor / "tokenizer_config.json").read_text())
    tok_config["mask_token"] = MASK_TOKEN
    # NOTE: tokenizer.json's added_tokens are the truth; a copy here would lack <|MASK|>.
    tok_config.pop("added_tokens_decoder", None)
    (out / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2) + "\n")
    for name in ("chat_template.jinja", "chat_template.json"):
        if (donor / name).is_file():
            shutil.copyfile(donor / name, out / name)
