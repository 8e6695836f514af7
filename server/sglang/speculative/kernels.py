"""Install the speculative CPU kernels (``cpu_ops.py``) in an SGLang process.

SGLang binds each ``*_cpu`` kernel at import (``if _is_cpu: from sgl_kernel
import ...``) as a global of the module that wraps it, and the wrapper reads
that global on every call. So the kernels are served twice: by the stand-in
``sgl_kernel`` (for modules imported later) and on each importer already
imported (``KERNEL_IMPORTERS``). Those globals exist only on SGLang's CPU engine
path, so they are not rows of the every-process hook contract: ``install``
imports each importer and fails loudly, naming it, if one is missing.
"""

from __future__ import annotations

import importlib

from server.sglang.speculative import cpu_ops

_OPS = "sglang.kernels.ops.speculative"
#: SGLang module -> {global its wrappers read: the ``cpu_ops`` kernel installed there}.
#: NOTE: ``spec_tree`` binds two kernels under its own names (``sgl_*``).
KERNEL_IMPORTERS: dict[str, dict[str, str]] = {
    f"{_OPS}.cache_locs": {"assign_draft_cache_locs_contiguous_cpu": "assign_draft_cache_locs_contiguous_cpu",
                           "assign_extend_cache_locs_cpu": "assign_extend_cache_locs_cpu"},
    f"{_OPS}.eagle": {"fill_accept_out_cache_loc_cpu": "fill_accept_out_cache_loc_cpu",
                      "fill_bonus_tokens_cpu": "fill_bonus_tokens_cpu"},
    f"{_OPS}.spec_tree": {"sgl_build_tree_kernel_efficient_cpu": "build_tree_kernel_efficient_cpu",
                          "sgl_verify_tree_greedy_cpu": "verify_tree_greedy_cpu"},
    f"{_OPS}.reconstruct_tree": {"reconstruct_indices_from_tree_mask": "reconstruct_indices_from_tree_mask"},
    # NOTE: a speculative decode step reserves its drafts' slots through this one
    "sglang.srt.mem_cache.allocation": {"assign_req_to_token_pool_cpu": "assign_req_to_token_pool_cpu"},
    # NOTE: speculation turns the KV pool's slot copy on; the pool warms it up at startup
    "sglang.kernels.ops.kvcache.cache_move": {"copy_all_layer_kv_cache_cpu": "copy_all_layer_kv_cache_cpu"},
}


def install() -> None:
    """Serve the kernels in this process (idempotent). CPU only: on CUDA the real ``sgl_kernel`` runs."""
    from server.sglang.launch.stub import provide_kernels

    provide_kernels("sgl_kernel", cpu_ops.CPU_OPS)
    provide_kernels("sgl_kernel.speculative", cpu_ops.SPECULATIVE_OPS)
    for module, names in KERNEL_IMPORTERS.items():
        loaded = importlib.import_module(module)
        for name, op in names.items():
            if not hasattr(loaded, name):
                raise RuntimeError(f"switchboard: SGLang's {module} no longer binds {name}; the speculative "
                                   "CPU kernels cannot be installed (server/sglang/speculative/kernels.py)")
            setattr(loaded, name, getattr(cpu_ops, op))
