"""SGLang's HiCache on the CPU engine path: unpinned host pools and the KV copies.

SGLang 0.5.23's HiCache (``--enable-hierarchical-cache``: a host tier below the
device pool, optionally storage below that) fails on the CPU path twice:

* every host pool is built with ``pin_memory=True`` (the pools' default), so
  its buffer is page-locked with ``cudaHostRegister`` and its staging pages
  (storage reads) are allocated pinned: both raise without an NVIDIA driver.
  Page locking serves an accelerator's DMA only; on CPU the "device" pool is
  host memory too. :func:`unpinned` (a BEFORE hook on the host pools' common
  ``__init__``) builds them unpinned, so SGLang's own allocators take their
  plain-memory path;
* the host pool moves KV with ``sgl_kernel.kvcacheio`` ops that SGLang binds
  only on CUDA, ROCm and XPU (``pool_host.mha``: ``if _is_cuda or _is_hip``):
  on CPU the names are unbound and the first copy raises ``NameError``.
  :func:`transfer_kv_direct` is the ``direct`` io backend's op in torch (per
  layer, ``dst[dst_indices] = src[src_indices]``, what the CUDA op does page by
  page with ``copy_``), installed as the global the pool's methods read.

Only the ``direct`` io backend with the ``layer_first`` host layout is served
(``launch/args.py`` defaults them on CPU and refuses the others, naming the
field): the ``kernel`` backend's ops are CUDA kernels over pointer tables, and
the other layouts need ops this module does not provide.

``install`` runs in the scheduler process (the plugin, when the plan turns
HiCache on for a CPU device); every SGLang symbol it touches is a row of the
hook contract (``symbols.HICACHE_SYMBOLS``), and the methods that read the
installed global are checked to still read it.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Sequence
from typing import Any

import torch

from server.sglang.hicache.symbols import (
    HOST_INIT,
    MHA_HOST,
    POOL_HOST,
    TRANSFER_GLOBAL,
    TRANSFER_READERS,
)

#: ``HostKVCache.__init__``'s signature, read before the hook wraps it (set by ``install``).
_HOST_INIT: inspect.Signature | None = None


def unpinned(*args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """BEFORE hook on ``HostKVCache.__init__``: the same call with ``pin_memory=False``."""
    # NOTE: set by install() before it registers this hook, so never None here.
    assert _HOST_INIT is not None
    bound = _HOST_INIT.bind(*args, **kwargs)
    bound.arguments["pin_memory"] = False
    return bound.args, bound.kwargs


def transfer_kv_direct(src_layers: Sequence[torch.Tensor], dst_layers: Sequence[torch.Tensor],
                       src_indices: torch.Tensor, dst_indices: torch.Tensor, page_size: int) -> None:
    """Copy token rows ``src_indices`` of each source layer to rows ``dst_indices`` of its destination.

    The contract of ``sgl_kernel.kvcacheio.transfer_kv_direct`` (same checks, same
    effect: the CUDA op copies whole pages, which are runs of ``page_size`` rows)."""
    if len(src_layers) != len(dst_layers):
        raise ValueError("transfer_kv_direct: source and destination must have the same number of layers")
    if src_indices.numel() != dst_indices.numel():
        raise ValueError("transfer_kv_direct: source and destination indices must have the same length")
    if page_size <= 0 or src_indices.numel() % page_size:
        raise ValueError(f"transfer_kv_direct: {src_indices.numel()} indices are not whole pages of {page_size}")
    src = src_indices.to(device="cpu", dtype=torch.long)
    dst = dst_indices.to(device="cpu", dtype=torch.long)
    for source, target in zip(src_layers, dst_layers, strict=True):
        target.index_copy_(0, dst.to(target.device), source.index_select(0, src.to(source.device)))


def install() -> None:
    """Serve HiCache's host pools on CPU in this process (once per process).

    NOTE: called from the plugin's ``register`` (inside SGLang's ``load_plugins``,
    which applies the hooks registered here)."""
    global _HOST_INIT
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    if _HOST_INIT is not None:
        return
    base = importlib.import_module(f"{POOL_HOST}.base")
    _HOST_INIT = inspect.signature(base.HostKVCache.__init__)
    HookRegistry.register(HOST_INIT, unpinned, HookType.BEFORE)
    mha = importlib.import_module(f"{POOL_HOST}.mha")
    for name in TRANSFER_READERS:
        if TRANSFER_GLOBAL not in getattr(mha.MHATokenToKVPoolHost, name).__code__.co_names:
            raise RuntimeError(f"switchboard: SGLang's {MHA_HOST}.{name} no longer calls {TRANSFER_GLOBAL}; "
                               "HiCache cannot be served on CPU (server/sglang/hicache/cpu.py)")
    setattr(mha, TRANSFER_GLOBAL, transfer_kv_direct)
