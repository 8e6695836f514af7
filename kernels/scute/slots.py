"""One layer's generalized adapter slots (see the package docstring for the formula)."""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch


@dataclass(frozen=True)
class AdapterSlots:
    """The slots one adapter fills for one linear layer; ``None`` = neutral.

    NOTE: tensors are the layer's dtype and device once ``to`` ran; shapes are
    checked against the layer by ``check``."""

    blocks: torch.Tensor | None = None
    """Input transform ``T`` as (n, k, k) diagonal blocks, ``n * k == in``: x's
    features ``[i*k, (i+1)*k)`` become ``x[..., i*k:(i+1)*k] @ blocks[i]``."""
    scale: torch.Tensor | None = None
    """``s`` (out): multiplies the base product ``(x T) W^T`` (not the bias)."""
    shift: torch.Tensor | None = None
    """``t`` (out): added after the bias."""
    lora_a: torch.Tensor | None = None
    """``A`` (r, in)."""
    lora_b: torch.Tensor | None = None
    """``B`` (out, r)."""
    mid_scale: torch.Tensor | None = None
    """``d`` (r): multiplies ``x A^T``."""
    out_scale: torch.Tensor | None = None
    """``e`` (out): multiplies the low-rank term."""

    @property
    def rank(self) -> int:
        """Rank of the low-rank term (0: none)."""
        return 0 if self.lora_a is None else int(self.lora_a.shape[0])

    def check(self, in_features: int, out_features: int) -> None:
        """Raise ``ValueError`` naming the slot whose shape does not fit the layer."""
        def bad(name: str, shape: tuple[int, ...], want: str) -> ValueError:
            return ValueError(f"adapter slot {name} has shape {shape}, the layer needs {want}")

        if self.blocks is not None:
            n, k, k2 = self.blocks.shape
            if k != k2 or n * k != in_features:
                raise bad("blocks", tuple(self.blocks.shape), f"(n, k, k) with n*k = {in_features}")
        for name in ("scale", "shift", "out_scale"):
            v = getattr(self, name)
            if v is not None and tuple(v.shape) != (out_features,):
                raise bad(name, tuple(v.shape), f"({out_features},)")
        if (self.lora_a is None) != (self.lora_b is None):
            raise ValueError("adapter slots lora_a and lora_b come together")
        if self.lora_a is not None and self.lora_b is not None:
            r = self.rank
            if tuple(self.lora_a.shape) != (r, in_features):
                raise bad("lora_a", tuple(self.lora_a.shape), f"({r}, {in_features})")
            if tuple(self.lora_b.shape) != (out_features, r):
                raise bad("lora_b", tuple(self.lora_b.shape), f"({out_features}, {r})")
            if self.mid_scale is not None and tuple(self.mid_scale.shape) != (r,):
                raise bad("mid_scale", tuple(self.mid_scale.shape), f"({r},)")
        elif self.mid_scale is not None or self.out_scale is not None:
            raise ValueError("adapter slots mid_scale and out_scale need lora_a and lora_b")

    def to(self, dtype: torch.dtype, device: torch.device | str | None = None) -> AdapterSlots:
        """The same slots as ``dtype`` on ``device``."""
        moved = {f.name: None if getattr(self, f.name) is None
                 else getattr(self, f.name).to(device=device, dtype=dtype) for f in fields(self)}
        return AdapterSlots(**moved)

    def nbytes(self) -> int:
        """Memory the filled slots take."""
        return sum(v.numel() * v.element_size() for f in fields(self) if (v := getattr(self, f.name)) is not None)
