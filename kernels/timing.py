"""Timing a kernel call for the device scripts (``scute/gpu_bench.py``, ``segment_mask/gpu_check.py``)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def timed(fn: Callable[..., object], iters: int, cuda: bool) -> float:
    """Median seconds of ``fn`` over ``iters`` calls after 3 warm-up calls (CUDA events
    on a GPU, the wall clock otherwise)."""
    for _ in range(3):
        fn()
    times: list[float] = []
    for _ in range(iters):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)
