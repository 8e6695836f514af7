"""SGLang's HiCache on the CPU server: the io backend and layout it is served with, and refusals."""

from __future__ import annotations

import pytest

from compose.config import ConfigError, compose
from server.resolve import resolve
from server.sglang.launch.args import hicache_on, sglang_fields


def _fields(*over: str) -> dict[str, object]:
    return sglang_fields(resolve(compose(["server.device=cpu", *over])))


def test_hicache_on_cpu_gets_the_direct_backend_and_layer_first_layout():
    fields = _fields("sglang.enable_hierarchical_cache=true", "sglang.hicache_storage_backend=file")
    assert (fields["hicache_io_backend"], fields["hicache_mem_layout"]) == ("direct", "layer_first")
    assert hicache_on(resolve(compose(["server.device=cpu", "sglang.enable_hierarchical_cache=true"])))


def test_without_hicache_nothing_is_added():
    fields = _fields()
    assert "hicache_io_backend" not in fields and "hicache_mem_layout" not in fields
    assert not hicache_on(resolve(compose(["server.device=cpu"])))


@pytest.mark.parametrize("field, value", [("hicache_io_backend", "kernel"),
                                          ("hicache_mem_layout", "page_first"),
                                          ("hicache_mem_layout", "page_head")])
def test_a_cuda_only_backend_or_layout_is_refused_naming_the_field(field, value):
    with pytest.raises(ConfigError, match=rf"sglang.{field}={value} does not run on CPU.*{field}="):
        _fields("sglang.enable_hierarchical_cache=true", f"sglang.{field}={value}")


def test_the_page_first_direct_layout_is_served_too():
    fields = _fields("sglang.enable_hierarchical_cache=true", "sglang.hicache_mem_layout=page_first_direct")
    assert fields["hicache_mem_layout"] == "page_first_direct"


def test_a_hybrid_model_gets_the_layout_its_state_pool_needs(tmp_path):
    (tmp_path / "config.json").write_text('{"architectures": ["Lfm2ForCausalLM"]}')
    fields = _fields("sglang.enable_hierarchical_cache=true", f"model.path={tmp_path}")
    assert (fields["hicache_io_backend"], fields["hicache_mem_layout"]) == ("direct", "page_first_direct")
    with pytest.raises(ConfigError, match=r"sglang.hicache_mem_layout=layer_first is refused for a hybrid model "
                                          r"\(Lfm2ForCausalLM\).*hicache_mem_layout=page_first_direct"):
        _fields("sglang.enable_hierarchical_cache=true", "sglang.hicache_mem_layout=layer_first",
                f"model.path={tmp_path}")
    assert "hicache_mem_layout" not in _fields(f"model.path={tmp_path}")  # the hybrid model alone: no HiCache


def test_the_live_harness_retries_on_both_of_sglangs_host_memory_refusals():
    """NOTE: the live HiCache tests start again only when SGLang refused the host pool for want of
    RAM; both refusals must stay SGLang's own words (CI once failed on the second, unmatched)."""
    import inspect

    from sglang.srt.mem_cache import hicache_auto_size
    from sglang.srt.mem_cache.pool_host import base

    from tests.live.harness import HICACHE_REFUSALS, HICACHE_RESERVE_BYTES, refused_host_memory

    sources = inspect.getsource(hicache_auto_size) + inspect.getsource(base)
    assert all(refusal in sources for refusal in HICACHE_REFUSALS)
    assert HICACHE_RESERVE_BYTES == base.HICACHE_HOST_MEMORY_RESERVE_BYTES
    assert refused_host_memory("ValueError: Not enough host memory available. Requesting 0.09 GB but only "
                               "have -0.33 GB free. Please reduce the size of the hierarchical cache.")
    assert not refused_host_memory("server exited with 1:\nValueError: page size 16 is not supported")
