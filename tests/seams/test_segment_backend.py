"""The segment storage as SGLang builds and calls it (``server/sglang/hicache/segment_backend.py``):
SGLang's own backend factory, the generic page interface, real tensors; no model."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

from compose.config import compose
from server.resolve import resolve
from server.sglang.launch.args import sglang_fields

PAGE_TOKENS = 4


def _backend(tmp_path, segment_tokens=8, max_size=1_000_000):
    """SGLang's factory building the storage from the flags +tier writes."""
    fields = sglang_fields(resolve(compose(["server.device=cpu", "+tier=hierarchical", f"tier.ssd_dir={tmp_path}",
                                            "tier.ssd_gb=0.001", "tier.storage=segments",
                                            f"tier.segment_tokens={segment_tokens}"])))
    assert fields["hicache_storage_backend"] == "dynamic"
    extra = {**json.loads(fields["hicache_storage_backend_extra_config"]), "max_size": max_size}
    config = HiCacheStorageConfig(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
                                  is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=False,
                                  model_name="org/tiny", extra_config=extra)
    pool = SimpleNamespace(page_size=PAGE_TOKENS)
    backend = StorageBackendFactory.create_backend("dynamic", config, pool)
    backend.register_mem_pool_host(pool)
    return backend


def _pages(n: int, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2 * 3 * PAGE_TOKENS * 8, generator=g, dtype=torch.float32) for _ in range(n)]


def test_sglangs_factory_builds_it_and_pages_come_back_byte_equal(tmp_path):
    backend = _backend(tmp_path)
    assert type(backend).__name__ == "SegmentStorage" and backend.store.segment_pages == 2
    assert backend.store.directory == str(tmp_path / "org-tiny_0_1")
    pages = _pages(3)
    keys = ["h1", "h2", "h3"]
    assert backend.batch_set(keys, pages) is True
    assert backend.batch_exists(keys + ["h4"]) == 3 and backend.exists("h2") and not backend.exists("h4")
    staging = [torch.zeros_like(p) for p in pages]
    got = backend.batch_get(keys, staging)
    assert all(g is s for g, s in zip(got, staging))
    assert all(torch.equal(s, p) for s, p in zip(staging, pages))
    # bfloat16 pages too (the CPU server's default dtype), byte for byte
    bf = [p.to(torch.bfloat16) for p in _pages(2, seed=1)]
    backend.batch_set(["b1", "b2"], bf)
    out = [torch.zeros_like(p) for p in bf]
    backend.batch_get(["b1", "b2"], out)
    assert all(torch.equal(o, p) for o, p in zip(out, bf))


def test_a_damaged_page_is_a_miss_that_stops_the_prefix_and_is_counted(tmp_path, caplog):
    backend = _backend(tmp_path)
    pages = _pages(3)
    backend.batch_set(["h1", "h2", "h3"], pages)
    ref = backend.store.index["h2"]
    with open(backend.store.path(ref.segment), "r+b") as f:
        f.seek(ref.offset + 17)
        f.write(b"\x00\x01")
    got = backend.batch_get(["h1", "h2", "h3"], [torch.zeros_like(p) for p in pages])
    assert got[0] is not None and got[1] is None and got[2] is not None
    assert backend.store.corrupt_pages == 1 and backend.batch_exists(["h1", "h2", "h3"]) == 1
    assert "failed their checksum" in caplog.text
    # a staging page of another size never takes the bytes
    assert backend.batch_get(["h1"], [torch.zeros(5)]) == [None]


@pytest.mark.parametrize("storage", ["file", "segments"])
def test_the_storage_choice_is_refused_naming_the_field_when_unknown(tmp_path, storage):
    over = ["server.device=cpu", "+tier=hierarchical", f"tier.ssd_dir={tmp_path}", "tier.ssd_gb=0.001"]
    assert sglang_fields(resolve(compose([*over, f"tier.storage={storage}"])))["hicache_storage_backend"] == \
        {"file": "file", "segments": "dynamic"}[storage]
    from compose.config import ConfigError

    with pytest.raises(ConfigError, match=r"invalid value for 'tier.storage': must be one of file, segments"):
        resolve(compose([*over, "tier.storage=disk"]))


def test_a_sessions_pages_go_to_its_own_segments_when_grouped(tmp_path):
    """The tier cache names a block's session before SGLang's backup thread writes it: two
    sessions' writes interleaved still lie in one run per session, read back in one range each."""
    backend = _backend(tmp_path, segment_tokens=64)
    pages = _pages(6)
    for k in range(3):
        backend.group([f"a{k}"], "session-a")
        backend.group([f"b{k}"], "session-b")
    for k in range(3):
        backend.batch_set([f"a{k}"], [pages[k]])
        backend.batch_set([f"b{k}"], [pages[3 + k]])
    reads = backend.store.range_reads
    out = [torch.zeros_like(p) for p in pages[:3]]
    backend.batch_get(["a0", "a1", "a2"], out)
    assert backend.store.range_reads == reads + 1 and all(torch.equal(o, p) for o, p in zip(out, pages[:3]))
    assert len(backend.store.sizes) == 2 and not backend._groups  # written: nothing pending
    # ungrouped pages keep one shared stream
    backend.batch_set(["x"], [pages[0]])
    assert len(backend.store.sizes) == 3
