"""SGLang's LoRA path on a machine without CUDA: pinned memory as a no-op.

SGLang's LoRA layers and its torch-native backend ask for pinned host memory
(``pin_memory=True``, ``.pin_memory()``), which a CPU-only torch refuses
("Found no NVIDIA driver"). Pinning only speeds host-to-GPU copies; with no
GPU there is nothing to speed up, so ``allow_unpinned`` makes both forms
return ordinary memory, in those two modules only (and ``Tensor.pin_memory``,
which can never succeed without CUDA).
"""

from __future__ import annotations

import functools
import importlib
import types
from typing import Any

import torch

#: SGLang modules whose ``torch`` factories get ``pin_memory`` dropped.
MODULES = ("sglang.srt.lora.layers", "sglang.srt.lora.backend.torch_backend")
_FACTORIES = frozenset({"tensor", "zeros", "ones", "empty", "full", "arange", "zeros_like", "empty_like"})


class _UnpinnedTorch(types.ModuleType):
    """``torch``, with ``pin_memory`` dropped from the tensor factories."""

    def __init__(self) -> None:
        super().__init__("torch")

    def __getattr__(self, name: str) -> Any:
        attr = getattr(torch, name)
        if name not in _FACTORIES:
            return attr

        @functools.wraps(attr)
        def unpinned(*args: Any, **kwargs: Any) -> Any:
            kwargs.pop("pin_memory", None)
            return attr(*args, **kwargs)
        return unpinned


def allow_unpinned() -> bool:
    """Install the no-op where CUDA is absent; ``True`` if it did."""
    if torch.cuda.is_available():
        return False
    # NOTE: identity without CUDA, where the real call always raises.
    torch.Tensor.pin_memory = lambda self, *a, **k: self
    shim = _UnpinnedTorch()
    for name in MODULES:
        # NOTE: replaces the module's own global `torch`, which ModuleType does not declare.
        importlib.import_module(name).torch = shim  # type: ignore[attr-defined]
    return True
