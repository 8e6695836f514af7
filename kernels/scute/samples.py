"""Random, non-neutral slots of each adapter type, as each method fills them
(the kernel tests' cases and the GPU benchmark's adapters)."""

from __future__ import annotations

import torch

from kernels.scute.slots import AdapterSlots

#: ``ia3_ff``: IA3 on a feed-forward layer (an input scale: blocks of size one).
TYPES = ("lora", "dora", "vera", "oft", "ia3", "ia3_ff")


def random_slots(kind: str, n_in: int, n_out: int, rank: int, block: int, g: torch.Generator,
                 device: torch.device | str | None = None) -> AdapterSlots:
    """One layer's slots of adapter type ``kind`` (``TYPES``)."""
    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(device)

    if kind == "lora":
        return AdapterSlots(lora_a=r(rank, n_in), lora_b=r(n_out, rank),
                            out_scale=torch.full((n_out,), 0.5, device=device))
    if kind == "dora":
        s = 1 + 0.2 * r(n_out)
        return AdapterSlots(scale=s, lora_a=r(rank, n_in), lora_b=r(n_out, rank), out_scale=0.5 * s)
    if kind == "vera":
        return AdapterSlots(lora_a=r(rank, n_in), lora_b=r(n_out, rank), mid_scale=r(rank), out_scale=r(n_out))
    if kind == "oft":
        q = 0.1 * r(n_in // block, block, block)
        return AdapterSlots(blocks=torch.eye(block, device=device) + q - q.transpose(1, 2))
    if kind == "ia3":
        return AdapterSlots(scale=1 + 0.2 * r(n_out), shift=0.1 * r(n_out))
    if kind == "ia3_ff":
        return AdapterSlots(blocks=(1 + 0.2 * r(n_in)).reshape(n_in, 1, 1))
    raise ValueError(f"unknown adapter type {kind!r}; one of {', '.join(TYPES)}")
