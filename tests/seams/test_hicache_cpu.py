"""SGLang's HiCache host pool on the CPU path (``server/sglang/hicache/cpu.py``), on SGLang's own pools.

Each case runs in a child interpreter: ``install`` patches SGLang's host-pool
classes for the whole process, which the other seam tests must not see.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from server.sglang.hicache.cpu import transfer_kv_direct
from tests.conftest import REPO

#: Builds SGLang's device KV pool and its host pool as HiCache does (``_mha_host_inputs``), fills
#: the device pool, backs rows up to the host, loads them back into other device rows, and goes
#: through the storage path's pages; prints one JSON line: what held, per page size.
CHILD = r"""
import json, sys
from server.sglang.launch.stub import install_sgl_kernel_stub
install_sgl_kernel_stub()
import torch
from sglang.srt.plugins.hook_registry import HookRegistry
import sglang.srt.mem_cache.pool_host.base as host_base
# NOTE: SGLang refuses a host pool unless 10 GiB of RAM stay free besides it; these pools are a few
# KB, so the other test worker's servers must not decide what this case shows
host_base.HICACHE_HOST_MEMORY_RESERVE_BYTES = 0
if sys.argv[1] == "installed":
    from server.sglang.hicache import cpu
    cpu.install()
    HookRegistry.apply_hooks()
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
from sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler import _mha_host_inputs

def case(page):
  out = {}
  device = MHATokenToKVPool(size=64, page_size=page, dtype=torch.float32, head_num=2, head_dim=4, layer_num=3,
                            device="cpu", enable_memory_saver=False, enable_alt_stream=False)
  torch.manual_seed(0)
  for layer in range(3):
      device.k_buffer[layer].normal_()
      device.v_buffer[layer].normal_()
  cls, info, kwargs = _mha_host_inputs(device)
  try:
      host = cls(info, 2.0, 0, page, "layer_first", **kwargs)
  except Exception as exc:
      return {"host_pool": f"{type(exc).__name__}: {exc}"[:200]}
  out["host_pool"] = "built"
  out["pinned"] = host.pin_memory
  rows = torch.cat([torch.arange(start, start + page) for start in (page * 1, page * 5, page * 9)])
  host_rows = host.alloc(len(rows))
  try:
      host.backup_from_device_all_layer(device, host_rows, rows, "direct")
  except Exception as exc:
      out["backup"] = f"{type(exc).__name__}: {exc}"[:200]
      return out
  out["backup"] = all(torch.equal(host.k_buffer[l][host_rows], device.k_buffer[l][rows]) and
                      torch.equal(host.v_buffer[l][host_rows], device.v_buffer[l][rows]) for l in range(3))
  back = torch.arange(page * 12, page * 12 + len(rows))
  expected = [(device.k_buffer[l][rows].clone(), device.v_buffer[l][rows].clone()) for l in range(3)]
  for layer in range(3):
      host.load_to_device_per_layer(device, host_rows, back, layer, "direct")
  out["load"] = all(torch.equal(device.k_buffer[l][back], expected[l][0]) and
                    torch.equal(device.v_buffer[l][back], expected[l][1]) for l in range(3))
  # the storage path: a page read into a staging page, then written to a fresh host page
  first = int(host_rows[0])
  staged = host.get_dummy_flat_data_page()
  staged.copy_(host.get_data_page(first, flat=True))
  fresh = host.alloc(page)
  host.set_from_flat_data_page(int(fresh[0]), staged)
  out["storage_page"] = all(torch.equal(host.k_buffer[l][fresh], host.k_buffer[l][host_rows[:page]]) and
                            torch.equal(host.v_buffer[l][fresh], host.v_buffer[l][host_rows[:page]])
                            for l in range(3))
  return out

print(json.dumps([case(int(page)) for page in sys.argv[2].split(",")]))
"""


def _child(mode: str, pages: str) -> list[dict[str, object]]:
    env = {**os.environ, "SGLANG_USE_CPU_ENGINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", CHILD, mode, pages], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    result: list[dict[str, object]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_stock_hicache_cannot_build_its_host_pool_on_cpu():
    # the reference the fix is checked against: SGLang as shipped pins the pool with CUDA
    (stock,) = _child("stock", "1")
    assert "NVIDIA driver" in str(stock["host_pool"])


def test_installed_the_host_pool_backs_up_loads_back_and_stages_pages_exactly():
    # pages of 1 and 4 tokens
    assert _child("installed", "1,4") == [{"host_pool": "built", "pinned": False, "backup": True,
                                           "load": True, "storage_page": True}] * 2


def _reference(src_layers, dst_layers, src_indices, dst_indices, page_size):
    """sgl_kernel's direct copy as its CUDA source states it: one page (run of rows) at a time."""
    for p in range(len(src_indices) // page_size):
        s, d = int(src_indices[p * page_size]), int(dst_indices[p * page_size])
        for source, target in zip(src_layers, dst_layers):
            target[d:d + page_size] = source[s:s + page_size]


@pytest.mark.parametrize("page_size", [1, 2, 8])
def test_transfer_kv_direct_equals_the_page_by_page_copy(page_size):
    gen = torch.Generator().manual_seed(page_size)
    src = [torch.randn(64, 2, 4, generator=gen) for _ in range(4)]
    pages = torch.randperm(64 // page_size, generator=gen)[:5]
    dst_pages = torch.randperm(64 // page_size, generator=gen)[:5]
    src_idx = torch.cat([torch.arange(p * page_size, (p + 1) * page_size) for p in pages.tolist()])
    dst_idx = torch.cat([torch.arange(p * page_size, (p + 1) * page_size) for p in dst_pages.tolist()])
    ours, theirs = [torch.zeros(64, 2, 4) for _ in src], [torch.zeros(64, 2, 4) for _ in src]
    transfer_kv_direct(src, ours, src_idx, dst_idx, page_size)
    _reference(src, theirs, src_idx, dst_idx, page_size)
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))
    assert any(bool(a.any()) for a in ours)


def test_transfer_kv_direct_refuses_what_the_kernel_refuses():
    one = [torch.zeros(8, 1)]
    with pytest.raises(ValueError, match="same number of layers"):
        transfer_kv_direct(one, one * 2, torch.arange(2), torch.arange(2), 1)
    with pytest.raises(ValueError, match="same length"):
        transfer_kv_direct(one, one, torch.arange(2), torch.arange(3), 1)
    with pytest.raises(ValueError, match="whole pages"):
        transfer_kv_direct(one, one, torch.arange(3), torch.arange(3), 2)
