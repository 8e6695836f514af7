"""SGLang's HiCache on the CPU engine path: unpinned host pools and the KV copies.

SGLang 0.5.23's HiCache (``--enable-hierarchical-cache``: a host tier below the
device pool, optionally storage below that) fails on the CPU path twice:

* every host pool is built with ``pin_memory=True`` (the pools' default), so
  its buffer is page-locked with ``cudaHostRegister`` and its staging pages
  (storage reads) are allocated pinned: both raise without an NVIDIA driver.
  Page locking serves an accelerator's DMA only; on CPU the "device" pool is
  host memory too. :func:`unpinned_for` (BEFORE hooks on the KV host pools'
  common ``__init__`` and on the recurrent-state host pool's own) builds them
  unpinned, so SGLang's own allocators take their plain-memory path;
* the host pools move KV and recurrent states with ``sgl_kernel.kvcacheio``
  ops that SGLang binds only on CUDA and ROCm (``pool_host.mha`` and
  ``pool_host.mamba``: ``if _is_cuda or _is_hip``): on CPU the names are
  unbound and the first copy raises ``NameError``. The ``direct`` io backend's
  three ops are written here in torch, with the CUDA ops' checks and effect
  (they copy whole pages with ``copy_``): :func:`transfer_kv_direct` (layer
  first on both sides), :func:`transfer_kv_per_layer_direct_pf_lf` (a
  page-first host buffer into device layers) and
  :func:`transfer_kv_all_layer_direct_lf_pf` (back), installed as the globals
  the pools' methods read.

Only the ``direct`` io backend is served, with the ``layer_first`` host layout
(the default) or ``page_first_direct`` (a hybrid model's default: SGLang's
recurrent-state host pool refuses ``layer_first``); ``launch/args.py`` refuses
the others naming the field: the ``kernel`` backend's ops are CUDA kernels over
pointer tables, and the other layouts need ops this module does not provide.

``install`` runs in the scheduler process (the plugin, when the plan turns
HiCache on for a CPU device); every SGLang symbol it touches is a row of the
hook contract (``symbols.HICACHE_SYMBOLS``), and the methods that read the
installed globals are checked to still read them.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch

from server.sglang.hicache.symbols import HOST_INIT, MAMBA_INIT, TRANSFER_READERS

#: The constructors that take ``pin_memory``, by hooked path, with their signatures (set by ``install``).
_INITS: dict[str, inspect.Signature] = {}


def unpinned_for(path: str) -> Callable[..., tuple[tuple[Any, ...], dict[str, Any]]]:
    """A BEFORE hook on the constructor at ``path``: the same call with ``pin_memory=False``."""

    def unpinned(*args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        bound = _INITS[path].bind(*args, **kwargs)  # NOTE: install() records it before registering this
        bound.arguments["pin_memory"] = False
        return bound.args, bound.kwargs

    return unpinned


def _check_pages(op: str, src_indices: torch.Tensor, dst_indices: torch.Tensor, page_size: int) -> None:
    """The index checks every ``direct`` copy op makes (the CUDA ops' ``TORCH_CHECK``s)."""
    if src_indices.numel() != dst_indices.numel():
        raise ValueError(f"{op}: source and destination indices must have the same length")
    if page_size <= 0 or src_indices.numel() % page_size:
        raise ValueError(f"{op}: {src_indices.numel()} indices are not whole pages of {page_size}")


def transfer_kv_direct(src_layers: Sequence[torch.Tensor], dst_layers: Sequence[torch.Tensor],
                       src_indices: torch.Tensor, dst_indices: torch.Tensor, page_size: int) -> None:
    """Copy token rows ``src_indices`` of each source layer to rows ``dst_indices`` of its destination.

    The contract of ``sgl_kernel.kvcacheio.transfer_kv_direct`` (same checks, same
    effect: the CUDA op copies whole pages, which are runs of ``page_size`` rows)."""
    if len(src_layers) != len(dst_layers):
        raise ValueError("transfer_kv_direct: source and destination must have the same number of layers")
    _check_pages("transfer_kv_direct", src_indices, dst_indices, page_size)
    src = src_indices.to(device="cpu", dtype=torch.long)
    dst = dst_indices.to(device="cpu", dtype=torch.long)
    for source, target in zip(src_layers, dst_layers, strict=True):
        target.index_copy_(0, dst.to(target.device), source.index_select(0, src.to(source.device)))


def _pages(indices: torch.Tensor, page_size: int) -> torch.Tensor:
    """The first index of each page of ``indices`` (checked by :func:`_check_pages`)."""
    return indices.to(device="cpu", dtype=torch.long)[::page_size]


def _rows(starts: torch.Tensor, page_size: int) -> torch.Tensor:
    """Every row of the pages beginning at token rows ``starts``, page by page."""
    return (starts[:, None] + torch.arange(page_size)).reshape(-1)


def transfer_kv_per_layer_direct_pf_lf(src_ptrs: Sequence[torch.Tensor], dst_ptrs: Sequence[torch.Tensor],
                                       src_indices: torch.Tensor, dst_indices: torch.Tensor, layer_id: int,
                                       page_size: int) -> None:
    """Load pages from a page-first host buffer into layer-first device layers.

    The contract of ``sgl_kernel.kvcacheio.transfer_kv_per_layer_direct_pf_lf``: ``src_ptrs`` is
    ``[k]`` (one buffer: MLA, or a recurrent-state pool) or ``[k, v]``, each shaped
    ``(pages, layers, page_size, ...)``; ``dst_ptrs`` holds the device layers (all K layers, then
    all V layers). Page ``i`` goes from host page ``src_indices[i * page_size] // page_size``,
    layers from ``layer_id`` on, to device rows from ``dst_indices[i * page_size]``."""
    _check_pages("transfer_kv_per_layer_direct_pf_lf", src_indices, dst_indices, page_size)
    src = _pages(src_indices, page_size) // page_size
    dst = _rows(_pages(dst_indices, page_size), page_size)
    per_buffer = len(dst_ptrs) // len(src_ptrs)
    for b, host in enumerate(src_ptrs):
        pages = host.index_select(0, src.to(host.device))
        for j in range(per_buffer):
            target = dst_ptrs[b * per_buffer + j]
            values = pages[:, layer_id + j].reshape(-1, *target.shape[1:])
            target.index_copy_(0, dst.to(target.device), values.to(target.device))


def transfer_kv_all_layer_direct_lf_pf(src_ptrs: Sequence[torch.Tensor], dst_ptrs: Sequence[torch.Tensor],
                                       src_indices: torch.Tensor, dst_indices: torch.Tensor,
                                       page_size: int) -> None:
    """Back pages of every layer-first device layer up into a page-first host buffer.

    The contract of ``sgl_kernel.kvcacheio.transfer_kv_all_layer_direct_lf_pf`` (the inverse of
    :func:`transfer_kv_per_layer_direct_pf_lf`, every layer from 0): device rows from
    ``src_indices[i * page_size]`` go to host page ``dst_indices[i * page_size] // page_size``."""
    _check_pages("transfer_kv_all_layer_direct_lf_pf", src_indices, dst_indices, page_size)
    src = _rows(_pages(src_indices, page_size), page_size)
    dst = _pages(dst_indices, page_size) // page_size
    per_buffer = len(src_ptrs) // len(dst_ptrs)
    for b, host in enumerate(dst_ptrs):
        for j in range(per_buffer):
            source = src_ptrs[b * per_buffer + j]
            values = source.index_select(0, src.to(source.device)).reshape(len(dst), page_size, *source.shape[1:])
            host[dst.to(host.device), j] = values.to(host.device)


#: The ops each host-pool module binds only on CUDA/ROCm, by module (``install`` sets them).
CPU_OPS = {"transfer_kv_direct": transfer_kv_direct,
           "transfer_kv_per_layer_direct_pf_lf": transfer_kv_per_layer_direct_pf_lf,
           "transfer_kv_all_layer_direct_lf_pf": transfer_kv_all_layer_direct_lf_pf}


def _resolve(path: str) -> tuple[Any, Any]:
    """The module and the class ``module.Class`` names."""
    module, cls = path.rsplit(".", 1)
    mod = importlib.import_module(module)
    return mod, getattr(mod, cls)


def install() -> None:
    """Serve HiCache's host pools on CPU in this process (once per process).

    NOTE: called from the plugin's ``register`` (inside SGLang's ``load_plugins``,
    which applies the hooks registered here)."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    if _INITS:
        return
    for path in (HOST_INIT, MAMBA_INIT):
        _, cls = _resolve(path.rsplit(".", 1)[0])
        _INITS[path] = inspect.signature(cls.__init__)
        HookRegistry.register(path, unpinned_for(path), HookType.BEFORE)
    for pool, readers in TRANSFER_READERS.items():
        module, cls = _resolve(pool)
        for method, ops in readers.items():
            missing = [op for op in ops if op not in getattr(cls, method).__code__.co_names]
            if missing:
                raise RuntimeError(f"switchboard: SGLang's {pool}.{method} no longer calls {', '.join(missing)}; "
                                   "HiCache cannot be served on CPU (server/sglang/hicache/cpu.py)")
        for op in {op for ops in readers.values() for op in ops}:
            setattr(module, op, CPU_OPS[op])
