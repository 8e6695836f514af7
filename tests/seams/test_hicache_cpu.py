"""SGLang's HiCache host pool on the CPU path (``server/sglang/hicache/cpu.py``), on SGLang's own pools.

Each case runs in a child interpreter: ``install`` patches SGLang's host-pool
classes for the whole process, which the other seam tests must not see.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

import pytest
import torch

from server.sglang.hicache.cpu import (
    transfer_kv_all_layer_direct_lf_pf,
    transfer_kv_direct,
    transfer_kv_per_layer_direct_pf_lf,
)
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

def host_row(buffer, layer, row, page, layout):
  # one host row of one layer in the pool's layout
  if layout == "layer_first":
      return buffer[layer][row]
  return buffer[row // page, layer, row % page]  # NOTE: page_first_direct: (pages, layers, page, ...)

def case(page, layout):
  out = {}
  device = MHATokenToKVPool(size=64, page_size=page, dtype=torch.float32, head_num=2, head_dim=4, layer_num=3,
                            device="cpu", enable_memory_saver=False, enable_alt_stream=False)
  torch.manual_seed(0)
  for layer in range(3):
      device.k_buffer[layer].normal_()
      device.v_buffer[layer].normal_()
  cls, info, kwargs = _mha_host_inputs(device)
  try:
      host = cls(info, 2.0, 0, page, layout, **kwargs)
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
  out["backup"] = all(torch.equal(host_row(host.k_buffer, l, int(h), page, layout), device.k_buffer[l][int(r)]) and
                      torch.equal(host_row(host.v_buffer, l, int(h), page, layout), device.v_buffer[l][int(r)])
                      for l in range(3) for h, r in zip(host_rows, rows))
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
  out["storage_page"] = all(
      torch.equal(host_row(host.k_buffer, l, int(f), page, layout), host_row(host.k_buffer, l, int(h), page, layout))
      and torch.equal(host_row(host.v_buffer, l, int(f), page, layout),
                      host_row(host.v_buffer, l, int(h), page, layout))
      for l in range(3) for f, h in zip(fresh, host_rows[:page]))
  return out

def mamba_case():
  # a hybrid model's recurrent-state host pool: slots backed up, then loaded into other slots
  from sglang.srt.mem_cache.device_pool_info import MambaStateBufferInfo
  from sglang.srt.mem_cache.pool_host.mamba import MambaPoolHost
  torch.manual_seed(1)
  info = MambaStateBufferInfo(temporal=torch.randn(3, 9, 2, 5), conv=(torch.randn(3, 9, 4, 3), torch.randn(3, 9, 6)))
  try:
      host = MambaPoolHost(info, 2.0, 0, device_capacity=8, layout="page_first_direct", device="cpu")
  except Exception as exc:
      return {"host_pool": f"{type(exc).__name__}: {exc}"[:200]}
  out = {"host_pool": "built", "pinned": host.pin_memory}
  slots, back = torch.tensor([1, 4, 6]), torch.tensor([7, 2, 3])
  states = [info.temporal, *info.conv]
  expected = [t[:, slots].clone() for t in states]
  host_slots = host.alloc(3)
  try:
      host.backup_from_device_all_layer(None, host_slots, slots, "direct")
      for layer in range(3):
          host.load_to_device_per_layer(None, host_slots, back, layer, "direct")
  except Exception as exc:
      out["round_trip"] = f"{type(exc).__name__}: {exc}"[:200]
      return out
  out["round_trip"] = all(torch.equal(t[:, back], e) for t, e in zip(states, expected))
  return out

# NOTE: one child per mode: each case named "layout:page", or "mamba" (page_first_direct, the layout it needs)
print(json.dumps({spec: mamba_case() if spec == "mamba" else case(int(spec.split(":")[1]), spec.split(":")[0])
                  for spec in sys.argv[2:]}))
"""


CASES = ("layer_first:1", "layer_first:4", "page_first_direct:1", "page_first_direct:4", "mamba")


@functools.cache
def _child(mode: str) -> dict[str, dict[str, object]]:
    """Every case of ``CASES`` in one child interpreter, with (``installed``) or without the fix."""
    env = {**os.environ, "SGLANG_USE_CPU_ENGINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", CHILD, mode, *CASES], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, dict[str, object]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_stock_hicache_cannot_build_its_host_pools_on_cpu():
    # the reference the fix is checked against: SGLang as shipped pins every pool with CUDA
    stock = _child("stock")
    assert all("NVIDIA driver" in str(stock[spec]["host_pool"]) for spec in CASES), stock


@pytest.mark.parametrize("spec", CASES[:4])
def test_installed_the_kv_host_pool_backs_up_loads_back_and_stages_pages_exactly(spec):
    """Pages of 1 and 4 tokens, in the default layout and in the one a hybrid model needs."""
    assert _child("installed")[spec] == {"host_pool": "built", "pinned": False, "backup": True, "load": True,
                                         "storage_page": True}


def test_installed_the_recurrent_state_host_pool_round_trips_exactly():
    """A hybrid model's state pool (temporal and two conv states, three layers), bit-equal both ways."""
    assert _child("installed")["mamba"] == {"host_pool": "built", "pinned": False, "round_trip": True}


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


def _pf_lf_reference(src_ptrs, dst_ptrs, src_indices, dst_indices, layer_id, page_size):
    """``transfer_kv_per_layer_direct_pf_lf`` as its CUDA source states it: page by page, layer by layer."""
    per_buffer = len(dst_ptrs) // len(src_ptrs)
    for p in range(len(src_indices) // page_size):
        s, d = int(src_indices[p * page_size]) // page_size, int(dst_indices[p * page_size])
        for b, host in enumerate(src_ptrs):
            for j in range(per_buffer):
                dst_ptrs[b * per_buffer + j][d:d + page_size] = host[s, layer_id + j, :page_size]


def _lf_pf_reference(src_ptrs, dst_ptrs, src_indices, dst_indices, page_size):
    """``transfer_kv_all_layer_direct_lf_pf`` as its CUDA source states it."""
    per_buffer = len(src_ptrs) // len(dst_ptrs)
    for p in range(len(src_indices) // page_size):
        s, d = int(src_indices[p * page_size]), int(dst_indices[p * page_size]) // page_size
        for b, host in enumerate(dst_ptrs):
            for j in range(per_buffer):
                host[d, j, :page_size] = src_ptrs[b * per_buffer + j][s:s + page_size]


@pytest.mark.parametrize("page_size, buffers", [(1, 1), (1, 2), (4, 2), (2, 1)])
def test_the_page_first_ops_equal_the_page_by_page_copies(page_size, buffers):
    """K and V (2 buffers) or one buffer (MLA, a recurrent-state pool): device layer-first rows to
    host pages and back, for 3 layers, pages scattered on both sides."""
    gen = torch.Generator().manual_seed(10 * page_size + buffers)
    layers, pages = 3, 16
    device = [torch.randn(pages * page_size, 2, 3, generator=gen) for _ in range(buffers * layers)]
    dev_pages = torch.randperm(pages, generator=gen)[:5].tolist()
    host_pages = torch.randperm(pages, generator=gen)[:5].tolist()
    dev_idx = torch.cat([torch.arange(p * page_size, (p + 1) * page_size) for p in dev_pages])
    host_idx = torch.cat([torch.arange(p * page_size, (p + 1) * page_size) for p in host_pages])
    ours = [torch.zeros(pages, layers, page_size, 2, 3) for _ in range(buffers)]
    theirs = [torch.zeros(pages, layers, page_size, 2, 3) for _ in range(buffers)]
    transfer_kv_all_layer_direct_lf_pf(device, ours, dev_idx, host_idx, page_size)
    _lf_pf_reference(device, theirs, dev_idx, host_idx, page_size)
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs)) and any(bool(a.any()) for a in ours)
    # back, one layer at a time (as a load does), into other device rows
    back_pages = torch.randperm(pages, generator=gen)[:5].tolist()
    back_idx = torch.cat([torch.arange(p * page_size, (p + 1) * page_size) for p in back_pages])
    loaded = [torch.zeros_like(t) for t in device]
    expected = [torch.zeros_like(t) for t in device]
    for layer in range(layers):
        mine = [loaded[b * layers + layer] for b in range(buffers)]
        ref = [expected[b * layers + layer] for b in range(buffers)]
        transfer_kv_per_layer_direct_pf_lf(ours, mine, host_idx, back_idx, layer, page_size)
        _pf_lf_reference(theirs, ref, host_idx, back_idx, layer, page_size)
    assert all(torch.equal(a, b) for a, b in zip(loaded, expected))
    assert all(torch.equal(t[back_idx], d[dev_idx]) for t, d in zip(loaded, device))


def test_the_page_first_ops_refuse_what_the_kernels_refuse():
    host, layers = [torch.zeros(4, 1, 2, 1)], [torch.zeros(8, 1)]
    with pytest.raises(ValueError, match="same length"):
        transfer_kv_per_layer_direct_pf_lf(host, layers, torch.arange(2), torch.arange(4), 0, 2)
    with pytest.raises(ValueError, match="whole pages"):
        transfer_kv_all_layer_direct_lf_pf(layers, host, torch.arange(3), torch.arange(3), 2)
