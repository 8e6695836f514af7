"""PEFT adapters for the default model, made with PEFT itself, and PEFT's own
greedy tokens (the reference a live server must equal): one adapter of each
type Scute serves, and types it refuses. Used by the live tests and
``bench.scripts.adapters``; needs ``peft`` (the ``test`` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from peft import IA3Config, LoHaConfig, LoKrConfig, LoraConfig, OFTConfig, PeftModel, VeraConfig, get_peft_model
from transformers import AutoModelForCausalLM

#: name -> PEFT config; each moved away from its neutral initialisation (``make``).
CONFIGS: dict[str, Any] = {
    "lora": LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "up_proj"], init_lora_weights=False),
    "dora": LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], use_dora=True,
                       init_lora_weights=False),
    "vera": VeraConfig(r=16, target_modules=["q_proj", "v_proj"], init_weights=False),
    "oft": OFTConfig(r=0, oft_block_size=32, target_modules=["q_proj", "v_proj", "o_proj"], init_weights=False),
    "ia3": IA3Config(target_modules=["k_proj", "v_proj", "down_proj"], feedforward_modules=["down_proj"],
                     init_ia3_weights=False),
}
#: PEFT types Scute refuses, each with the type its message must name.
REFUSED: dict[str, tuple[Any, str]] = {
    "loha": (LoHaConfig(r=4, target_modules=["q_proj"]), "LOHA"),
    "lokr": (LoKrConfig(r=4, target_modules=["q_proj"]), "LOKR"),
}


def base(checkpoint: Path) -> Any:
    return AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()


def make(checkpoint: Path, name: str, config: Any, folder: Path, seed: int) -> Path:
    """Save adapter ``name`` for the checkpoint under ``folder/name``."""
    torch.manual_seed(seed)
    model = get_peft_model(base(checkpoint), config)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            # NOTE: random but moderate, so the adapted model's greedy tokens
            # differ from the base model's without becoming noise.
            if "lora_B" in pname or "lora_A" in pname:
                p.copy_(0.05 * torch.randn_like(p))
            elif "lora_magnitude_vector" in pname:
                p.mul_(1 + 0.2 * torch.randn_like(p))
            elif "oft_R" in pname:
                p.copy_(0.01 * torch.randn_like(p))
            elif "vera_lambda" in pname:
                p.copy_(1 + 0.5 * torch.randn_like(p)) if "lambda_d" in pname else p.copy_(0.5 * torch.randn_like(p))
            elif "ia3_l" in pname:
                p.copy_(1 + 0.3 * torch.randn_like(p))
    path = folder / name
    model.save_pretrained(path)
    return path


def greedy(checkpoint: Path, adapter: Path | None, prompts: list[list[int]], n: int) -> list[list[int]]:
    """PEFT's model (``None``: the base) greedily continuing each prompt by ``n`` tokens, EOS included.

    NOTE: decodes with the model's own KV cache (one prompt pass, then a token at
    a time), as ``generate`` would, but never stops at EOS (the server is asked
    with ``ignore_eos``)."""
    model = base(checkpoint)
    if adapter is not None:
        model = PeftModel.from_pretrained(model, str(adapter)).eval()
    out = []
    with torch.no_grad():
        for ids in prompts:
            step = model(torch.tensor([ids]), use_cache=True)
            new: list[int] = []
            for _ in range(n):
                nxt = int(step.logits[0, -1].argmax())
                new.append(nxt)
                if len(new) < n:
                    step = model(torch.tensor([[nxt]]), past_key_values=step.past_key_values, use_cache=True)
            out.append(new)
    return out
