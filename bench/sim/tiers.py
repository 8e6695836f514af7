"""The simulator's side of the tier kind: what a placement sees, and what an SSD costs.

* ``SessionStats`` (``policies/tier/sessions.py``, shared with the server): per
  session, what the server would know when a block is first backed up, kept
  from the requests the simulator has seen arrive and finish, nothing later.
* ``make_placer``: the ``radix.tiers.TieredHost`` placer that builds the
  ``PlacementView`` of a freed node and asks the tier policy (checked by
  ``check_home``).
* ``SsdDevice``: one SSD shared by reads and writes: a read waits for what is
  queued before it, then costs its bytes at the read bandwidth plus a fixed
  latency per read (one read per stored page, or one per contiguous segment);
  writes (backups, demotions) queue at the write bandwidth. Host memory is a
  plain bandwidth (``sim.host_bandwidth_gbs``).
* ``TierLevels``: the kind's ``cache.HostLevels``: a ``TieredHost`` of
  ``tier.host_ratio`` times the device pool in memory and ``tier.ssd_gb`` of
  SSD, placed by the policy; a restore reads its SSD-home blocks into host
  memory (one read per contiguous run of ``tier.segment_tokens`` of one
  session with ``TierNeeds.segments``, else one per ``sim.ssd_page_tokens``
  page), then copies every restored token to the device.
* ``TierSeam``: keeps ``SessionStats`` from arrivals and, as its
  ``SessionFeedback``, from finished requests, telling a policy that learns.
* ``BINDING``: ``+tier`` in the simulator.

NOTE: nothing here reads a clock of its own: times are the simulator's ``now``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bench.sim.binding import Scope, SimParts
from compose.specs import build_policy
from policies.tier import Home, PlacementView, TierHostConfig, TierPolicy, check_home
from policies.tier.sessions import SessionFeedback, SessionStats
from radix.host import HostTier
from radix.node import Node
from radix.tiers import Placer, TieredHost

if TYPE_CHECKING:
    from bench.config import BenchSettings
    from bench.sim.request import SimRequest
    from compose.specs import PolicySpec


def make_placer(policy: TierPolicy, stats: SessionStats, clock: Callable[[], float], block_size: int) -> Placer:
    """The placer a ``TieredHost`` asks for each freed node (see module docs)."""

    def place(node: Node[Any, Any], host: TieredHost) -> Home:
        tokens, turns, last_reply = stats.of(node.session)
        view = PlacementView(
            tokens=node.num_tokens, prefix_tokens=node.start * block_size, shared=bool(node.others),
            session_id=node.session, session_tokens=tokens, session_turns=max(1, turns),
            last_reply_tokens=last_reply, host_free_tokens=host.memory.free(),
            host_capacity_tokens=host.memory.capacity, ssd_free_tokens=host.ssd.free(),
            ssd_capacity_tokens=host.ssd.capacity, now=clock())
        return check_home(policy.place(view), view)

    return place


class SsdDevice:
    """One SSD: reads and writes queue on it (see module docs)."""

    def __init__(self, read_gbs: float, write_gbs: float, read_latency_s: float) -> None:
        if read_gbs <= 0 or write_gbs <= 0 or read_latency_s < 0:
            raise ValueError("an SSD needs positive bandwidths and a non-negative read latency")
        self.read_bps = read_gbs * 1e9
        self.write_bps = write_gbs * 1e9
        self.read_latency_s = read_latency_s
        self.busy_until = 0.0
        """When the SSD finishes what is queued on it (simulated seconds)."""
        self.bytes_read = 0.0
        self.bytes_written = 0.0

    def write(self, now: float, nbytes: float) -> None:
        """Queue a background write of ``nbytes`` at ``now``."""
        self.busy_until = max(self.busy_until, now) + nbytes / self.write_bps
        self.bytes_written += nbytes

    def read(self, now: float, nbytes: float, reads: int) -> float:
        """Read ``nbytes`` in ``reads`` requests, starting at ``now``; the seconds until it is done."""
        start = max(self.busy_until, now)
        self.busy_until = start + nbytes / self.read_bps + reads * self.read_latency_s
        self.bytes_read += nbytes
        return self.busy_until - now


class TierLevels:
    """Host memory and SSD below the simulated device, placed by a tier policy (see module docs)."""

    def __init__(self, policy: TierPolicy, host: TierHostConfig, stats: SessionStats, ssd: SsdDevice,
                 host_bandwidth_gbs: float, page_tokens: int) -> None:
        if page_tokens < 1 or host_bandwidth_gbs <= 0:
            raise ValueError("sim.ssd_page_tokens must be >= 1 and sim.host_bandwidth_gbs > 0")
        self.policy = policy
        self.settings = host
        self.stats = stats
        self.ssd = ssd
        self.host_bps = host_bandwidth_gbs * 1e9
        self.page_tokens = page_tokens
        self.segments = policy.needs.segments
        self.tier: TieredHost | None = None
        self._clock: Callable[[], float] = lambda: 0.0
        self._bytes_per_token = 0.0
        self._pending_s = 0.0
        self.ssd_reads = 0
        """Read requests sent to the SSD."""
        self.ssd_written_tokens = 0
        """Tokens written to the SSD (placed there, or demoted)."""
        self.restored_from: dict[Home, int] = {Home.MEMORY: 0, Home.SSD: 0}
        """Tokens restored from each level (a ``BOTH`` copy is read from memory)."""

    def bind(self, clock: Callable[[], float], device_tokens: int, kv_bytes_per_token: float,
             unit_tokens: int) -> HostTier:
        self._clock, self._bytes_per_token = clock, kv_bytes_per_token
        memory = int(self.settings.host_ratio * device_tokens)
        ssd = int(self.settings.ssd_gb * 1e9 // kv_bytes_per_token)
        placer = make_placer(self.policy, self.stats, clock, unit_tokens)
        self.tier = TieredHost(memory, ssd, placer, demote=self.policy.needs.demote)
        self.tier.on_ssd = self._written
        return self.tier

    def restoring(self, nodes: list[Node[Any, Any]]) -> None:
        assert self.tier is not None
        ssd_tokens, reads, run, run_session = 0, 0, 0, None
        for n in nodes:
            level = self.tier.level_of(n)
            if level is not Home.SSD:
                self.restored_from[Home.MEMORY] += n.num_tokens
                run = 0
                continue
            ssd_tokens += n.num_tokens
            if not self.segments:
                reads += math.ceil(n.num_tokens / self.page_tokens)
            elif run and n.session == run_session:
                # NOTE: a session's SSD blocks are stored contiguously: a path continues its segment
                reads += math.ceil((run + n.num_tokens) / self.settings.segment_tokens) \
                    - math.ceil(run / self.settings.segment_tokens)
                run += n.num_tokens
            else:
                reads += math.ceil(n.num_tokens / self.settings.segment_tokens)
                run, run_session = n.num_tokens, n.session
        self.restored_from[Home.SSD] += ssd_tokens
        total = sum(n.num_tokens for n in nodes)
        wait = self.ssd.read(self._clock(), ssd_tokens * self._bytes_per_token, reads) if ssd_tokens else 0.0
        self.ssd_reads += reads
        self._pending_s += wait + total * self._bytes_per_token / self.host_bps

    def take_restore_s(self) -> float:
        pending, self._pending_s = self._pending_s, 0.0
        return pending

    def _written(self, node: Node[Any, Any]) -> None:
        self.ssd_written_tokens += node.num_tokens
        self.ssd.write(self._clock(), node.num_tokens * self._bytes_per_token)


#: The tier's counters in every run's meta (``SimBinding.counters``).
RESTORED_MEMORY = "tier_restored_memory_tokens"
RESTORED_SSD = "tier_restored_ssd_tokens"
SSD_READS = "tier_ssd_reads"
SSD_WRITTEN = "tier_ssd_written_tokens"


class TierSeam(SessionFeedback):
    """Session facts for placements, from arrivals (``TagsArrival``) and finished requests
    (``SessionFeedback``); the levels' counters (``CountsWork``)."""

    def __init__(self, stats: SessionStats, policy: TierPolicy, levels: TierLevels | None = None) -> None:
        super().__init__(stats, policy)
        self.levels = levels

    def counters(self) -> dict[str, int]:
        lv = self.levels
        if lv is None:
            return {}
        return {RESTORED_MEMORY: lv.restored_from[Home.MEMORY], RESTORED_SSD: lv.restored_from[Home.SSD],
                SSD_READS: lv.ssd_reads, SSD_WRITTEN: lv.ssd_written_tokens}

    def tag(self, r: SimRequest) -> None:
        self.stats.arrived(r.trace.session_id, r.input_len)


class _TierBinding:
    """``+tier``: the levels below the device (``tier.*``), placed by the option."""

    scope = Scope.replica
    counters = (RESTORED_MEMORY, RESTORED_SSD, SSD_READS, SSD_WRITTEN)

    def attach(self, spec: PolicySpec, settings: BenchSettings, parts: SimParts) -> None:
        policy: TierPolicy = build_policy(spec)
        host: TierHostConfig = spec.host_settings()
        # NOTE: an option needing SSD without one is refused before (compose/compat.py)
        sim = settings.sim
        stats = SessionStats()
        ssd = SsdDevice(sim.ssd_read_gbs, sim.ssd_write_gbs, sim.ssd_read_latency_s)
        levels = TierLevels(policy, host, stats, ssd, sim.host_bandwidth_gbs, sim.ssd_page_tokens)
        parts.host_levels = levels
        seam = TierSeam(stats, policy, levels)
        parts.seams.append(seam)
        parts.observers.append(seam)


BINDING = _TierBinding()
