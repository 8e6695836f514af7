"""Server binding of the tier kind (``+tier``): SGLang's hierarchical cache (HiCache).

Launch: HiCache with a host level of ``tier.host_ratio`` times the device
pool and, with an SSD level (``tier.ssd_dir``, ``tier.ssd_gb``), SGLang's file
storage there, bounded to ``ssd_gb`` (its least recently used pages dropped
past it), or with ``tier.storage=segments`` Switchboard's checked segment
storage (``segment_backend.py``, through SGLang's ``dynamic`` backend).
An option's needs pick how blocks are placed:

* SGLang's stock modes: blocks in memory and on SSD (``hierarchical``:
  ``cache`` mode, storage a superset of memory) or on SSD only (``ssd_only``:
  ``buffer_only``, memory stages reads and writes). The policy's placement
  *is* SGLang's: install builds it (checked like any option's), no hook;
* an option that places blocks itself (sessions, segments, demotion:
  ``flatcake``, ``exclusive``):
  the tier cache (``tier_cache.py``, radix cache backend ``switchboard_tier``)
  under ``write_back``, so each block is placed once, when it leaves the
  device (as in the simulator), with memory and SSD disjoint.

On CPU the launcher adds the io backend and layout the CPU path serves and the
plugin installs it (``server/sglang/hicache/cpu.py``), as for a user's own
HiCache flag.

Refused at startup, naming the field: an option that needs an SSD level
without one; an SSD directory that cannot be created or written, or whose
filesystem lacks ``ssd_gb`` free; SGLang's storage-directory variable pointing
elsewhere; and an option that moves blocks between levels (``exclusive``:
demoted on host eviction, moved up on a read) over a store that cannot forget
pages (``tier.storage=file``); and an option placing blocks itself with
``sglang.tp_size`` > 1 (each rank would place its shard of a block on its
own, and nothing makes the ranks agree: SGLang's own tier decisions go through
its ``rank_consensus``, ours do not, and several ranks have never run here).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import TYPE_CHECKING

from compose.config import ConfigError
from compose.specs import build_policy
from policies.tier import TierHostConfig, TierNeeds
from server.sglang.hicache.names import TIER_CACHE_BACKEND
from server.sglang.hicache.tier_symbols import TIER_SYMBOLS
from server.sglang.launch.binding import ForcedFlag, LaunchFields, SchedulerParts
from server.sglang.launch.symbols import HookedSymbol

if TYPE_CHECKING:
    from compose.specs import PolicySpec
    from server.resolve import LaunchPlan

#: SGLang's variable that overrides the file storage's directory (``HiCacheFile``).
STORAGE_DIR_ENV = "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"
#: What SGLang's ``dynamic`` storage backend needs to build the segment storage.
SEGMENTS = {"backend_name": "switchboard_segments", "module_path": "server.sglang.hicache.segment_backend",
            "class_name": "SegmentStorage"}


def check_ssd_dir(host: TierHostConfig) -> None:
    """``ConfigError`` naming ``tier.ssd_dir``/``tier.ssd_gb`` unless the SSD level's directory
    can be created and written and its filesystem has ``ssd_gb`` free (no SSD level: nothing)."""
    if not host.has_ssd:
        return
    path = os.path.abspath(host.ssd_dir)
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".switchboard-probe-"):
            pass
    except OSError as exc:
        raise ConfigError(f"invalid value for 'tier.ssd_dir': {path} cannot be written "
                          f"({exc.strerror or exc})") from None
    free = shutil.disk_usage(path).free
    if host.ssd_gb * 1e9 > free:
        raise ConfigError(f"invalid value for 'tier.ssd_gb': {host.ssd_gb} GB does not fit {path} "
                          f"({free / 1e9:.2f} GB free)")
    env = os.environ.get(STORAGE_DIR_ENV)
    if env and host.storage == "file" and os.path.abspath(env) != path:
        raise ConfigError(f"{STORAGE_DIR_ENV}={env} would override tier.ssd_dir={path} in SGLang's file "
                          f"storage: unset it or set tier.ssd_dir to it")


def placed_here(needs: TierNeeds) -> bool:
    """Whether the option places blocks itself (``TierCache``) rather than in one of SGLang's stock modes."""
    return needs.segments or needs.sessions or needs.demote


def _servable(needs: TierNeeds, host: TierHostConfig, option: str) -> None:
    """``ConfigError`` unless this server carries the option's placement."""
    if needs.demote and host.storage != "segments":
        raise ConfigError(f"invalid value for 'tier.storage': +tier ({option}) moves a block read back from SSD "
                          "up to memory (held once), which needs a store that can forget pages: set "
                          "tier.storage=segments (SGLang's file storage cannot)")


class TierBinding:
    """``+tier``: SGLang's HiCache, sized and placed per the option (see module docs)."""

    symbols: tuple[HookedSymbol, ...] = TIER_SYMBOLS
    """The segment storage's rows; HiCache's CPU rows are core rows (``hicache/symbols.py``):
    a user's own flag needs them too."""

    def launch(self, spec: PolicySpec, launch: LaunchFields) -> list[ForcedFlag]:
        host: TierHostConfig = spec.host_settings()
        needs: TierNeeds = spec.needs_of()
        option = spec.target.rsplit(".", 1)[-1]
        # NOTE: an option needing SSD without one is refused before (compose/compat.py)
        check_ssd_dir(host)
        _servable(needs, host, option)
        tp = int(launch.fields.get("tp_size") or 1)
        if tp > 1 and placed_here(needs):
            raise ConfigError(f"sglang.tp_size={tp} conflicts with +tier ({option}): each rank would place its "
                              "shard of a block below the device on its own, with nothing making the ranks agree "
                              "(tp_size 1; or a stock mode: tier=hierarchical, tier=ssd_only)")
        flags = [ForcedFlag("enable_hierarchical_cache", True, "the tier is SGLang's HiCache", control=False),
                 ForcedFlag("hicache_ratio", host.host_ratio, "tier.host_ratio (host tokens per device token)",
                            control=False)]
        if not host.has_ssd:
            return flags
        path, size = os.path.abspath(host.ssd_dir), int(host.ssd_gb * 1e9)
        if host.storage == "segments":
            config: dict[str, object] = {**SEGMENTS, "segments_dir": path, "max_size": size,
                                         "segment_tokens": host.segment_tokens}
            backend, what = "dynamic", "the SSD level is Switchboard's segment storage (tier.storage=segments)"
        else:
            config, backend, what = {"file_storage_path": path, "max_size": size}, "file", \
                "the SSD level is SGLang's file storage"
        flags += [ForcedFlag("hicache_storage_backend", backend, what, control=False),
                  ForcedFlag("hicache_storage_backend_extra_config", json.dumps(config, sort_keys=True),
                             "tier.ssd_dir and tier.ssd_gb (bytes)", control=False)]
        if placed_here(needs):
            flags += [ForcedFlag("radix_cache_backend", TIER_CACHE_BACKEND,
                                 "the tier cache places each block below the device", control=False),
                      # NOTE: placement happens when a block leaves the device, as in the simulator
                      ForcedFlag("hicache_write_policy", "write_back",
                                 "a block is placed once, when it leaves the device")]
        elif not needs.memory:
            flags.append(ForcedFlag("hicache_host_memory_mode", "buffer_only",
                                    "every block's home is SSD: host memory only stages", control=False))
        return flags

    def install(self, spec: PolicySpec, plan: LaunchPlan, parts: SchedulerParts) -> None:
        policy = build_policy(spec)  # NOTE: a stock mode's is only checked: SGLang places (module docs)
        if placed_here(spec.needs_of()):
            from policies.tier.sessions import SessionStats
            from server.sglang.hicache.tier_cache import Placement
            from server.sglang.hicache.tier_setup import TierSessions, register_tier_cache

            stats = SessionStats()
            register_tier_cache(Placement(policy, stats, spec.host_settings()))
            sessions = TierSessions(stats, policy)
            parts.policies.append(sessions)
            parts.seams.append(lambda scheduler: sessions)
        parts.installed.append(f"tier={spec.target}")

    def extend_cli(self) -> None:
        pass


BINDING = TierBinding()
