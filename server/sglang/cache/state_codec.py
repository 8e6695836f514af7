"""One recurrent-state slot of SGLang's ``MambaPool`` as bytes, and back.

``MambaPool.get_cpu_copy(indices)`` returns ``(conv, temporal)``: a list of
conv-state tensors ``[layers, n, ...]`` and one temporal (SSM) tensor
``[layers, n, ...]`` (empty for short-convolution layers); ``load_cpu_copy``
takes the same shape back. A snapshot is their raw bytes, concatenated in that
order; their dtypes and shapes are the pool's, fixed for the process, so they
are not stored (the store's checksum guards the bytes, ``snapshots.py``).

NOTE: invariant: ``decode(encode(copy))`` equals ``copy`` bit for bit (same
dtypes, same shapes), for the pool the codec was built from.
"""

from __future__ import annotations

from typing import Any

import torch


class StateCodec:
    """Bytes of one slot's state, for one pool (see module docs)."""

    def __init__(self, pool: Any) -> None:
        conv, temporal = pool.get_cpu_copy(torch.zeros(1, dtype=torch.int64, device=_device(pool)))
        self._layout = [(t.dtype, tuple(t.shape)) for t in (*conv, temporal)]
        self.num_conv = len(conv)
        self.nbytes = sum(_numel(shape) * torch.empty((), dtype=dtype).element_size() for dtype, shape in self._layout)
        """Bytes of one snapshot."""

    def encode(self, copy: tuple[list[torch.Tensor], torch.Tensor]) -> bytes:
        """One slot's ``get_cpu_copy`` as bytes."""
        conv, temporal = copy
        parts = [*conv, temporal]
        if [(t.dtype, tuple(t.shape)) for t in parts] != self._layout:
            raise ValueError("a state copy does not have the pool's layout")
        return b"".join(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() for t in parts)

    def decode(self, data: bytes) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The ``load_cpu_copy`` argument ``data`` encodes."""
        if len(data) != self.nbytes:
            raise ValueError(f"a snapshot of {len(data)} bytes for a pool whose states take {self.nbytes}")
        buffer = bytearray(data)  # NOTE: writable: the tensors alias it, torch.frombuffer warns on read-only
        tensors: list[torch.Tensor] = []
        offset = 0
        for dtype, shape in self._layout:
            size = _numel(shape) * torch.empty((), dtype=dtype).element_size()
            chunk = torch.frombuffer(buffer, dtype=torch.uint8, count=size, offset=offset) if size else \
                torch.empty(0, dtype=torch.uint8)
            tensors.append(chunk.view(dtype).reshape(shape))
            offset += size
        return tensors[: self.num_conv], tensors[self.num_conv]


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _device(pool: Any) -> torch.device:
    device: torch.device = pool.mamba_cache.temporal.device
    return device
