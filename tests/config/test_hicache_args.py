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
                                          ("hicache_mem_layout", "page_first_direct")])
def test_a_cuda_only_backend_or_layout_is_refused_naming_the_field(field, value):
    with pytest.raises(ConfigError, match=rf"sglang.{field}={value} does not run on CPU.*{field}="):
        _fields("sglang.enable_hierarchical_cache=true", f"sglang.{field}={value}")


def test_hicache_with_a_hybrid_model_is_refused_on_cpu(tmp_path):
    (tmp_path / "config.json").write_text('{"architectures": ["Lfm2ForCausalLM"]}')
    with pytest.raises(ConfigError, match=r"enable_hierarchical_cache=true is not served on CPU for a hybrid "
                                          r"model \(Lfm2ForCausalLM\)"):
        _fields("sglang.enable_hierarchical_cache=true", f"model.path={tmp_path}")
    _fields(f"model.path={tmp_path}")  # the hybrid model alone is served
