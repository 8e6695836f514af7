"""Helpers for tests that drive real SGLang classes on CPU (no model, no server)."""

from __future__ import annotations

from array import array
from collections.abc import Sequence

from server.sglang.launch.stub import install_sgl_kernel_stub

# NOTE: before the first SGLang import (the PyPI sgl_kernel needs libcuda).
install_sgl_kernel_stub()

import torch
from sglang.srt.managers.schedule_batch import Req
from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
from sglang.srt.mem_cache.base_prefix_cache import InsertParams
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang.srt.runtime_context import SpawnRanks, publish, reset_context
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.server_args import ServerArgs


def publish_test_server_args(**overrides) -> None:
    """SGLang's process-wide config, as its own CPU tests publish it."""
    reset_context()
    publish(ServerArgs(model_path="dummy", device="cpu", **overrides), role="test",
            ranks=SpawnRanks(world_rank=0, dp_rank=None))


def make_req(rid: str, ids: Sequence[int], max_new_tokens: int = 16) -> Req:
    return Req(rid=rid, origin_input_text="", origin_input_ids=array("q", ids),
               sampling_params=SamplingParams(temperature=0, max_new_tokens=max_new_tokens))


def make_pools(num_tokens: int = 256):
    allocator = TokenToKVPoolAllocator(num_tokens, torch.float32, "cpu", None, False)
    req_pool = ReqToTokenPool(16, 512, "cpu", False)
    return allocator, req_pool


def cache_params(allocator, req_pool, eviction_policy: str = "lru") -> CacheInitParams:
    return CacheInitParams(disable=False, req_to_token_pool=req_pool, token_to_kv_pool_allocator=allocator,
                           page_size=1, eviction_policy=eviction_policy)


def insert(tree, allocator, ids: Sequence[int]) -> None:
    """Cache ``ids`` as a finished request would leave them."""
    kv = allocator.alloc(len(ids))
    res = tree.insert(InsertParams(key=RadixKey(array("q", ids)), value=kv))
    allocator.free(kv[: res.prefix_len])  # the tree already owned the shared prefix
