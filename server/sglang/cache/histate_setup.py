"""The snapshot cache's registration in SGLang's scheduler process (``+cache=histate``).

``register_histate_cache`` makes ``--radix-cache-backend switchboard_histate``
build a ``HiStateCache`` (``histate_cache.py``) through SGLang's own
unified-cache factory, with the Python tree core forced (the cache reads and
edits its nodes), and its snapshot store opened on the configured directory.
What the cache cannot serve is refused when it is built, naming why: an
attention-only model (nothing to snapshot), SGLang's own hierarchical cache
(its host state pool is a second home for the same states), a recurrent-state
layout the codec does not read (int8 checkpoints, ReplaySSM rings, extra
per-slot pools, the unified memory pool) and more than one rank (one store per
process).
"""

from __future__ import annotations

from typing import Any

from compose.schema import CacheHostConfig
from policies.cache import EvictionPolicy
from server.sglang.cache.names import HISTATE_CACHE_BACKEND, register_backend
from server.sglang.cache.symbols import HISTATE_SYMBOLS

_active: dict[str, Any] = {}

#: Bytes per GB of ``cache.snapshot_gb``.
GB = 1 << 30


def register_histate_cache(policy: EvictionPolicy, host: CacheHostConfig) -> str:
    """Make ``--radix-cache-backend switchboard_histate`` build a ``HiStateCache`` ranking with
    ``policy`` over the store ``host`` names (re-entrant: a later call replaces them)."""
    from server.sglang.launch import contract

    contract.verify(HISTATE_SYMBOLS)
    _active["policy"] = policy
    _active["host"] = host
    return register_backend(HISTATE_CACHE_BACKEND, _build)


def refusal(ctx: Any) -> str | None:
    """Why the snapshot cache cannot serve in ``ctx`` (SGLang's build context), or ``None``."""
    if not ctx.is_hybrid_ssm:
        return "needs a hybrid model with recurrent states"
    for name in ("is_hybrid_swa", "enable_hierarchical_cache", "disable_radix_cache"):
        if getattr(ctx, name, False):
            return f"does not support {name}"
    if getattr(ctx, "tp_size", 1) != 1:
        return "keeps one snapshot store per process: tensor parallelism is not served"
    return None


def layout_refusal(cache: Any) -> str | None:
    """Why the snapshot codec cannot read ``cache``'s recurrent-state pool, or ``None``."""
    from sglang.srt.mem_cache.unified_cache.component_type import ComponentType

    if tuple(cache.tree_components) != (ComponentType.FULL, ComponentType.MAMBA):
        return f"serves KV plus one recurrent state per node, not {cache.tree_components}"
    pool = cache.req_to_token_pool
    mamba = pool.mamba_pool
    checks = (("an int8 checkpoint pool", getattr(pool, "mamba_ckpt_pool", None) is not None),
              ("ReplaySSM state rings", getattr(mamba, "replayssm_write_pos", None) is not None),
              ("extra per-slot state pools", bool(getattr(mamba, "_slot_siblings", ()))),
              ("the unified memory pool", getattr(pool, "translate_mamba_indices", None) is not None
               and _translates(pool)))
    found = [what for what, present in checks if present]
    return f"does not read states kept with {', '.join(found)}" if found else None


def _translates(pool: Any) -> bool:
    import torch

    probe = torch.arange(1, 3, dtype=torch.int64, device=pool.mamba_pool.mamba_cache.temporal.device)
    return not torch.equal(pool.translate_mamba_indices(probe), probe)


def _build(ctx: Any) -> Any:
    from sglang.srt.mem_cache.registry import create_unified_radix_cache

    from server.sglang.cache.histate_cache import HiStateCache
    from server.sglang.cache.snapshots import SnapshotStore

    why = refusal(ctx)
    if why is not None:
        raise ValueError(f"the {HISTATE_CACHE_BACKEND} cache {why}")
    ctx.params.tree_core_backend = "python"  # NOTE: the cache reads and edits the Python core's nodes
    cache = create_unified_radix_cache(ctx, cache_class=HiStateCache)
    why = layout_refusal(cache)
    if why is not None:
        raise ValueError(f"the {HISTATE_CACHE_BACKEND} cache {why}")
    host: CacheHostConfig = _active["host"]
    assert host.snapshot_dir is not None  # NOTE: refused before (compose/compat.py)
    store = SnapshotStore(host.snapshot_dir, int(host.snapshot_gb * GB))
    cache.attach(_active["policy"], store, host.snapshot_read_tokens)
    return cache
