"""Prefix-cache operation overhead: SGLang's own radix caches vs Switchboard's
gap-capable cache (``server/sglang/cache/gap_cache.py``) with Penelope's and LRU's order.

    python -m bench.scripts.cache_overhead [--sessions 128 --turns 16 --pool 65536] [--out ...]

Workload (seeded, the same operation sequence for every cache): agent-like
sessions over one shared system prompt; each turn resends the session's whole
history plus new user tokens, and the finished turn (prompt + output) is
inserted, as SGLang's scheduler does: ``match_prefix`` -> lock the match ->
allocate the uncached rest (``evict`` the shortfall first when the pool is
short) -> ``insert`` -> free what the tree did not take -> unlock. The pool is
smaller than the sessions' histories, so eviction runs throughout. A gap cache
with Penelope makes gaps; a turn through a gap recomputes everything after the
prefix (no gap recompute in the scheduler yet) and its insert fills the gap.

Caches: ``sglang default`` is what ``create_unified_radix_cache`` builds
(``UnifiedRadixCache``, Rust tree core, LRU); ``sglang python core`` the same
class on the Python tree core (what ``+cache=lru`` runs today, with SGLang's
LRU strategy here); ``sglang RadixCache`` the legacy pure-Python tree. Times are
wall-clock over the whole sequence (allocator calls included, the same for all),
best of ``--repeat`` runs, one thread.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from array import array
from collections.abc import Callable
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from server.sglang.launch.stub import install_sgl_kernel_stub

install_sgl_kernel_stub()  # NOTE: before SGLang is imported (no libcuda here)

import torch
from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey
from sglang.srt.mem_cache.registry import create_unified_radix_cache
from sglang.srt.mem_cache.unified_cache.components import ComponentType
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
from sglang.srt.runtime_context import SpawnRanks, publish, reset_context
from sglang.srt.server_args import ServerArgs

from bench.scripts.common import add_output_args, git_commit
from policies.cache.lru import LruPolicy
from policies.cache.penelope import PenelopePolicy
from server.sglang.cache.gap_cache import GapRadixCache
from server.sglang.cache.gap_paths import duplicate_ranges


def workload(sessions: int, turns: int, system: int, seed: int) -> list[tuple[array[int], int]]:
    """``(prompt + output token ids, prompt length)`` per turn, sessions interleaved."""
    rng = random.Random(seed)
    fresh = iter(range(1_000, 10**9))
    prompt0 = array("q", (next(fresh) for _ in range(system)))
    history = {s: prompt0 for s in range(sessions)}
    left = {s: turns for s in range(sessions)}
    seq = []
    while left:
        s = rng.choice(sorted(left))
        prompt = history[s] + array("q", (next(fresh) for _ in range(rng.randint(50, 400))))
        full = prompt + array("q", (next(fresh) for _ in range(rng.randint(20, 300))))
        seq.append((full, len(prompt)))
        history[s] = full
        left[s] -= 1
        if not left[s]:
            del left[s]
    return seq


def params(pool: int, tree_core: str | None = None) -> CacheInitParams:
    allocator = TokenToKVPoolAllocator(pool, torch.float32, "cpu", None, False)
    p = CacheInitParams(disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=allocator,
                        page_size=1, eviction_policy="lru", tree_core_backend=tree_core)
    p.tree_components = (ComponentType.FULL,)
    return p


def sglang_default(pool: int) -> Any:
    ctx = SimpleNamespace(server_args=None, params=params(pool), is_hybrid_swa=False, is_hybrid_ssm=False,
                          enable_hierarchical_cache=False)
    return create_unified_radix_cache(ctx)


CACHES: dict[str, Callable[[int], Any]] = {
    "sglang default": sglang_default,
    "sglang python core": lambda pool: UnifiedRadixCache(params(pool, "python")),
    "sglang RadixCache": lambda pool: RadixCache(params(pool)),
    # NOTE: both satisfy EvictionPolicy at run time; mypy refuses them only because they declare
    # `needs` as a ClassVar where the Protocol (policies/cache) declares an instance attribute.
    "gap lru": lambda pool: GapRadixCache(params(pool), LruPolicy()),  # type: ignore[arg-type]
    "gap penelope": lambda pool: GapRadixCache(params(pool), PenelopePolicy()),  # type: ignore[arg-type]
}


def run(cache: Any, seq: list[tuple[array[int], int]]) -> dict[str, float]:
    """Replay ``seq`` on ``cache``; time it and count the operations and hits."""
    allocator = cache.token_to_kv_pool_allocator
    unified = isinstance(cache, UnifiedRadixCache)
    ops = hit = evicted = 0
    t0 = time.perf_counter()
    for full, prompt_len in seq:
        m = cache.match_prefix(MatchPrefixParams(key=RadixKey(full[:prompt_len])))
        lock = cache.lock(m.last_device_node)
        prefix = cache.path_device_indices(m.last_device_node)[:m.device_prefix_len]
        need = len(full) - m.device_prefix_len
        ops += 1
        if allocator.available_size() < need:
            evicted += cache.evict(EvictParams(num_tokens=need - allocator.available_size())).num_tokens_evicted
            ops += 1
        own = allocator.alloc(need)
        assert own is not None, "pool too small for one turn"
        value = torch.cat([prefix, own])
        result = cache.insert(InsertParams(key=RadixKey(full), value=value,
                                           prev_prefix_len=m.device_prefix_len))
        if not unified:  # NOTE: the unified tree frees duplicates itself (prev_prefix_len)
            dups = (duplicate_ranges(result, m.device_prefix_len) if isinstance(cache, GapRadixCache)
                    else [(m.device_prefix_len, result.prefix_len)])
            for s, e in dups:
                allocator.free(value[s:e])
        cache.unlock(lock)
        ops += 1
        hit += m.device_prefix_len
    seconds = time.perf_counter() - t0
    held = cache.evictable_size() + cache.protected_size()
    assert allocator.available_size() + held == allocator.size, "slots leaked"
    prompt_tokens = sum(p for _, p in seq)
    return {"seconds": seconds, "ops": ops, "ops_per_s": ops / seconds, "turns_per_s": len(seq) / seconds,
            "hit_rate": hit / prompt_tokens, "evicted_tokens": evicted}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=128)
    ap.add_argument("--turns", type=int, default=16)
    ap.add_argument("--system", type=int, default=1500, help="system-prompt tokens")
    ap.add_argument("--pool", type=int, default=65536, help="KV pool, tokens")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    add_output_args(ap, "cache_overhead", "cache_overhead")
    args = ap.parse_args()
    git_commit()  # NOTE: stamps the run now (cached), before any work
    args.load_at_start = os.getloadavg()[0]
    torch.set_num_threads(1)
    reset_context()
    publish(ServerArgs(model_path="dummy", device="cpu"), role="bench",
            ranks=SpawnRanks(world_rank=0, dp_rank=None))
    seq = workload(args.sessions, args.turns, args.system, args.seed)
    rows: dict[str, dict[str, float]] = {}
    for name, make in CACHES.items():
        runs = [run(make(args.pool), seq) for _ in range(args.repeat)]
        rows[name] = min(runs, key=lambda r: r["seconds"])
        print(name, {k: round(v, 3) for k, v in rows[name].items()}, flush=True)
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "results.json").write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                                           "rows": rows}, indent=1))
    args.out.write_text(render(rows, args, len(seq), sum(len(f) for f, _ in seq)))
    print(f"wrote {args.out} and {args.results}/results.json")


def render(rows: dict[str, dict[str, float]], args: argparse.Namespace, num_turns: int, num_tokens: int) -> str:
    base = rows["sglang default"]["ops_per_s"]
    lines = ["# Prefix-cache operation overhead", "",
             f"Produced by `python -m bench.scripts.cache_overhead --sessions {args.sessions} --turns "
             f"{args.turns} --system {args.system} --pool {args.pool} --repeat {args.repeat} --seed {args.seed}` "
             f"at commit {git_commit()} ({datetime.now(UTC):%Y-%m-%d}), one process, one thread, "
             f"on a {os.cpu_count()}-core CPU machine (1-minute load average {args.load_at_start:.2f} at the "
             f"start). {num_turns} turns, {num_tokens:,} tokens "
             "inserted; each turn = `match_prefix` + `insert` (+ `evict` when the pool is short). "
             "Best of the repeats. `sglang default` = what `create_unified_radix_cache` builds "
             "(`UnifiedRadixCache`, Rust tree core); see the script's docstring for the others.", "",
             "| cache | ops/s | turns/s | vs sglang default | prompt tokens hit | tokens evicted |",
             "|---|---|---|---|---|---|"]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['ops_per_s']:,.0f} | {r['turns_per_s']:,.0f} | "
                     f"{r['ops_per_s'] / base:.2f}x | {r['hit_rate']:.1%} | {r['evicted_tokens']:,} |")
    lines += ["", "Hit rates are what `match_prefix` returned (contiguous prefix only): a turn "
              "through a gap does not reuse the cached tail here (the server's gap recompute, "
              "server/sglang/cache/gap_prefill.py, is not part of this sequence), "
              "so this table measures overhead, not Penelope's benefit (see `penelope.md`)."]
    return "\n".join(lines + [""])


if __name__ == "__main__":
    main()
