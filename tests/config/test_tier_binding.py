"""The tier kind's server binding (``server/sglang/hicache/binding.py``): SGLang's HiCache flags per option,
and every deployment mistake refused at startup naming the field."""

from __future__ import annotations

import json

import pytest

from compose.config import ConfigError, compose
from server.resolve import resolve
from server.sglang.launch.args import sglang_fields


def _fields(*overrides: str) -> dict:
    return sglang_fields(resolve(compose(["server.device=cpu", *overrides])))


def test_hierarchical_without_an_ssd_is_sglangs_host_tier_at_the_set_ratio():
    fields = _fields("+tier=hierarchical", "tier.host_ratio=3.5")
    assert fields["enable_hierarchical_cache"] is True and fields["hicache_ratio"] == 3.5
    assert "hicache_storage_backend" not in fields and "hicache_host_memory_mode" not in fields
    # the CPU path's io backend and layout, as for a user's own flag
    assert (fields["hicache_io_backend"], fields["hicache_mem_layout"]) == ("direct", "layer_first")


def test_an_ssd_level_is_sglangs_file_storage_bounded_to_its_size(tmp_path):
    ssd = tmp_path / "ssd"
    fields = _fields("+tier=hierarchical", f"tier.ssd_dir={ssd}", "tier.ssd_gb=0.5")
    assert fields["hicache_storage_backend"] == "file" and "hicache_host_memory_mode" not in fields
    assert json.loads(fields["hicache_storage_backend_extra_config"]) == {
        "file_storage_path": str(ssd), "max_size": 500_000_000}
    assert ssd.is_dir()  # created at startup, and written to once
    # the same server as the stock HiCache test's (tests/live/test_server_hicache.py), sized by the tier
    user = _fields("sglang.enable_hierarchical_cache=true", "sglang.hicache_storage_backend=file")
    assert {k: fields[k] for k in user} == user


def test_ssd_only_is_sglangs_buffer_only_mode(tmp_path):
    fields = _fields("+tier=ssd_only", f"tier.ssd_dir={tmp_path}", "tier.ssd_gb=0.01")
    assert fields["hicache_host_memory_mode"] == "buffer_only" and fields["hicache_storage_backend"] == "file"


def test_flatcake_is_the_tier_cache_placing_each_block_when_it_leaves_the_device(tmp_path):
    fields = _fields("+tier=flatcake", f"tier.ssd_dir={tmp_path}", "tier.ssd_gb=0.01", "tier.storage=segments")
    assert fields["radix_cache_backend"] == "switchboard_tier" and fields["hicache_write_policy"] == "write_back"
    assert fields["enable_hierarchical_cache"] is True and fields["hicache_storage_backend"] == "dynamic"
    assert "hicache_host_memory_mode" not in fields  # cache mode: memory homes stay in host memory
    # SGLang's own modes keep SGLang's cache and write policy
    stock = _fields("+tier=hierarchical", f"tier.ssd_dir={tmp_path}", "tier.ssd_gb=0.01")
    assert "radix_cache_backend" not in stock and "hicache_write_policy" not in stock
    with pytest.raises(ConfigError, match=r"sglang.hicache_write_policy=write_through conflicts with \+tier"):
        _fields("+tier=flatcake", f"tier.ssd_dir={tmp_path}", "tier.ssd_gb=0.01",
                "sglang.hicache_write_policy=write_through")


def test_exclusive_is_the_tier_cache_over_a_store_that_can_forget_pages(tmp_path):
    fields = _fields("+tier=exclusive", f"tier.ssd_dir={tmp_path}", "tier.ssd_gb=0.01", "tier.storage=segments")
    assert fields["radix_cache_backend"] == "switchboard_tier" and fields["hicache_write_policy"] == "write_back"
    with pytest.raises(ConfigError, match=r"invalid value for 'tier.storage': \+tier \(ExclusivePolicy\) moves a "
                                          r"block read back from SSD up to memory"):
        _fields("+tier=exclusive", f"tier.ssd_dir={tmp_path}", "tier.ssd_gb=0.01")


@pytest.mark.parametrize("over, reason", [
    (["tier.ssd_dir={blocked}/ssd", "tier.ssd_gb=0.01"], r"invalid value for 'tier.ssd_dir': .*cannot be written"),
    (["tier.ssd_dir={tmp}", "tier.ssd_gb=1e9"], r"invalid value for 'tier.ssd_gb': 1000000000.0 GB does not fit"),
    (["tier.ssd_dir={tmp}"], r"invalid value for 'tier.ssd_dir': an SSD level needs both ssd_dir and ssd_gb > 0"),
    (["tier.ssd_gb=1"], r"invalid value for 'tier.ssd_dir': an SSD level needs both"),
    (["tier.host_ratio=0"], r"invalid value for 'tier.host_ratio': must be > 0"),
    (["tier.segment_tokens=0"], r"invalid value for 'tier.segment_tokens': must be >= 1"),
    (["sglang.hicache_ratio=4"], r"sglang.hicache_ratio=4 conflicts with \+tier \(HierarchicalPolicy\)"),
], ids=["unwritable", "too-big", "dir-without-size", "size-without-dir", "ratio", "segment", "user-ratio"])
def test_a_deployment_mistake_is_refused_at_startup_naming_the_field(tmp_path, over, reason):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    over = [o.format(blocked=blocked, tmp=tmp_path) for o in over]
    with pytest.raises(ConfigError, match=reason):
        _fields("+tier=hierarchical", *over)


def test_sglangs_storage_variable_may_not_point_elsewhere(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR", str(tmp_path / "other"))
    with pytest.raises(ConfigError, match=r"SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR=.* would override tier.ssd_dir"):
        _fields("+tier=hierarchical", f"tier.ssd_dir={tmp_path / 'ssd'}", "tier.ssd_gb=0.01")
    monkeypatch.setenv("SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR", str(tmp_path / "ssd"))
    assert _fields("+tier=hierarchical", f"tier.ssd_dir={tmp_path / 'ssd'}", "tier.ssd_gb=0.01")[
        "hicache_storage_backend"] == "file"


@pytest.mark.parametrize("option", ["flatcake", "exclusive"])
def test_an_option_placing_blocks_itself_is_refused_on_several_ranks(tmp_path, option):
    ssd = [f"tier.ssd_dir={tmp_path}", "tier.ssd_gb=0.01", "tier.storage=segments"]
    with pytest.raises(ConfigError, match=rf"sglang.tp_size=2 conflicts with \+tier \((?i:{option})"):
        _fields(f"+tier={option}", *ssd, "sglang.tp_size=2")
    # SGLang's own modes place through SGLang on every rank
    assert _fields("+tier=hierarchical", *ssd[:2], "sglang.tp_size=2")["enable_hierarchical_cache"] is True
