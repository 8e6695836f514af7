"""A tiny random-weight hybrid (recurrent) LM (``Lfm2ForCausalLM``) for SGLang's CPU server.

``model=lfm2_tiny`` serves it. LFM2 mixes gated short-convolution layers (a
depthwise causal conv of width ``conv_L_cache`` whose state is the last
``conv_L_cache - 1`` inputs) with a few full-attention layers, so SGLang runs it
as a hybrid model: KV for the attention layers, a recurrent-state pool (its
Mamba pool) for the conv layers. Its weights are random, so its text is
meaningless, but its outputs are exactly comparable with HF transformers'
``Lfm2ForCausalLM`` in float32: it exists for tests and demos of recurrent-state
paths (conv-state restart, state caching) that our CPUs cannot test otherwise.
The vocabulary and tokenizer are the donor model's (SmolLM2), unchanged, so its
chat template (``/v1/decisions``) is the donor's.

This module only writes the files into a directory; ``compose.model`` owns the
cache (``.partial`` → rename, manifest, lock) and builds the donor.

NOTE: every matrix is drawn N(0, 1/fan_in) (LeCun normal), not the usual
N(0, 0.02²): activations and logits stay O(1), so every layer, the conv state
included, moves the output visibly. With std 0.02 a model whose convs forget
their past moves a two-label probability by about 1e-4 (under what a float32
exactness check can tell from noise); with 1/fan_in, by about 0.25.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

#: The architecture SGLang serves (``sglang/srt/models/lfm2.py``).
ARCHITECTURE = "Lfm2ForCausalLM"
#: The donor's (SmolLM2's) vocabulary: the model's, unpadded.
VOCAB_SIZE = 49152
#: Width of the short convolutions; their state is the last ``CONV_WIDTH - 1`` inputs.
CONV_WIDTH = 3
#: Kind of each layer, in order (``Lfm2Config.layer_types``): convs before, between
#: and after the attention layers.
LAYER_TYPES = ("conv", "conv", "full_attention", "conv", "full_attention", "conv")
#: Names the recipe in the cache directory.
#: NOTE: bump it whenever the files this module writes change, so that a cached
#: checkpoint of an older recipe (which still verifies) is never reused.
RECIPE = "lfm2-tiny-v1"
#: Files of the donor's checkpoint that make up its tokenizer (copied as they are).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "chat_template.jinja", "chat_template.json")

#: ``Lfm2Config`` of the model (the rest are transformers' defaults).
LFM2_CONFIG: dict[str, Any] = {
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 64,
    # NOTE: used as it is (no LFM2 2/3-and-round-to-256 adjustment); SGLang's
    # Lfm2MLP honours the same flag.
    "intermediate_size": 128,
    "block_auto_adjust_ff_dim": False,
    "num_hidden_layers": len(LAYER_TYPES),
    "layer_types": list(LAYER_TYPES),
    # NOTE: transformers derives layer_types from it only when layer_types is
    # absent; both are written, as LiquidAI's checkpoints do.
    "full_attn_idxs": [i for i, kind in enumerate(LAYER_TYPES) if kind == "full_attention"],
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 8192,
    "norm_eps": 1e-5,
    "conv_L_cache": CONV_WIDTH,
    "conv_bias": False,
    "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
    # LFM2's own choice; SGLang's Lfm2ForCausalLM loads lm_head from the embedding.
    "tie_word_embeddings": True,
    # SmolLM2's ids (the donor tokenizer's <|im_start|>, <|im_end|>).
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 2,
}


class Lfm2BuildError(RuntimeError):
    """The donor's tokenizer does not fit the model's vocabulary."""


def write_weights(out: Path, seed: int) -> None:
    """Write ``model.safetensors``, ``config.json`` and ``generation_config.json``
    into the directory ``out``: random weights from ``seed``."""
    import torch
    from transformers import Lfm2Config, Lfm2ForCausalLM

    # NOTE: the model's own init draws from the global RNG; fork it so that
    # building leaves the caller's RNG state alone. Every matrix is overwritten.
    with torch.random.fork_rng(devices=[]):
        model = Lfm2ForCausalLM(Lfm2Config(**LFM2_CONFIG)).to(torch.float32)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    with torch.no_grad():
        # NOTE: bit-identical files: drawn in name order (not module order) on
        # the CPU generator, in float64 (torch's scalar sampler, not its
        # float32 SIMD one, which differs between CPU kinds), then rounded.
        # The tied lm_head is the embedding (named_parameters lists it once).
        for _, param in sorted(model.named_parameters()):
            if param.dim() > 1:
                # fan_in: a Linear's (out, in) → in; the embedding (vocab, hidden),
                # also the tied lm_head → hidden; a depthwise conv (dim, 1, width) → width.
                std = param[0].numel() ** -0.5
                draw = torch.empty(param.shape, dtype=torch.float64).normal_(0.0, std, generator=gen)
                param.copy_(draw.to(torch.float32))
    model.save_pretrained(out)
    config_path = out / "config.json"
    config = json.loads(config_path.read_text())
    config.update(architectures=[ARCHITECTURE], model_type="lfm2")
    config_path.write_text(json.dumps(config, indent=2) + "\n")


def write_tokenizer(donor: Path, out: Path) -> None:
    """Copy into ``out`` the tokenizer files of the checkpoint directory ``donor``
    (its chat template included), after checking its ids fit ``VOCAB_SIZE``."""
    tokenizer = json.loads((donor / "tokenizer.json").read_text())
    ids = [*tokenizer["model"]["vocab"].values(), *(t["id"] for t in tokenizer.get("added_tokens", []))]
    if not ids or max(ids) >= VOCAB_SIZE:
        raise Lfm2BuildError(f"{donor}/tokenizer.json: token ids reach past the model's vocabulary ({VOCAB_SIZE})")
    if not any((donor / name).is_file() for name in ("chat_template.jinja", "chat_template.json")) and \
            "chat_template" not in json.loads((donor / "tokenizer_config.json").read_text()):
        raise Lfm2BuildError(f"{donor}: no chat template (the decisions and chat APIs need one)")
    for name in TOKENIZER_FILES:
        if (donor / name).is_file():
            shutil.copyfile(donor / name, out / name)
