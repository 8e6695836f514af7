"""A tiny random Llama and one saved PEFT adapter of each type, non-neutral."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from peft import IA3Config, LoraConfig, OFTConfig, VeraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

TINY = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, max_position_embeddings=64, attention_bias=True, mlp_bias=True)

#: name -> PEFT config; every one initialised away from the identity.
CONFIGS: dict[str, Any] = {
    "lora": LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "gate_proj"], init_lora_weights=False),
    "rslora": LoraConfig(r=8, lora_alpha=4, target_modules="all-linear", use_rslora=True, init_lora_weights=False,
                         alpha_pattern={"down_proj": 16}, rank_pattern={"down_proj": 2}),
    "dora": LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], use_dora=True,
                       init_lora_weights=False),
    "vera": VeraConfig(r=8, target_modules=["q_proj", "v_proj", "up_proj"], init_weights=False),
    "oft": OFTConfig(r=0, oft_block_size=16, target_modules=["q_proj", "v_proj", "o_proj"], init_weights=False),
    "oft_cayley": OFTConfig(r=0, oft_block_size=8, target_modules=["k_proj", "down_proj"], init_weights=False,
                            use_cayley_neumann=False),
    "oft_shared": OFTConfig(r=0, oft_block_size=16, target_modules=["q_proj"], init_weights=False, block_share=True),
    "ia3": IA3Config(target_modules=["k_proj", "v_proj", "down_proj"], feedforward_modules=["down_proj"],
                     init_ia3_weights=False),
}


def base_model(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    return LlamaForCausalLM(TINY).eval()


def make_adapter(name: str, folder: Path, seed: int = 1) -> Any:
    """Save adapter ``name`` (``CONFIGS``) for ``base_model()`` under ``folder/name``; return the PEFT model."""
    torch.manual_seed(seed)
    model = get_peft_model(base_model(), CONFIGS[name])
    with torch.no_grad():
        for pname, p in model.named_parameters():
            # NOTE: DoRA starts at magnitude = ||W + s BA|| (scale 1); OFT's init is small: move both off it.
            if "lora_magnitude_vector" in pname:
                p.mul_(1 + 0.3 * torch.randn_like(p))
            elif "oft_R" in pname:
                p.add_(0.05 * torch.randn_like(p))
    model.eval()
    model.save_pretrained(folder / name)
    return model
