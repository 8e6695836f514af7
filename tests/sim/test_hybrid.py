"""The simulated hybrid-model cache (``bench/sim/hybrid.py``): matches end at snapshots, the
levels move and drop snapshots as the orders say, reads are charged, and the simulator's
invariants hold over random workloads with the cache's own."""

from __future__ import annotations

from array import array

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.schema import HybridSimConfig
from bench.sim import build_simulator
from bench.sim.binding import SimParts
from bench.sim.hybrid import DEVICE, HOST, SSD, HybridCache
from policies.cache.histate import HistatePolicy
from policies.cache.lru import LruPolicy
from tests.sim.helpers import settings as sim_settings
from tests.sim.test_sim_invariants import cost, replay_checked, workloads  # noqa: F401  (fixture)

BS = 4
STATE_MB = 2.0
KV_BYTES = 1000.0


def cache(policy=None, store_states: int = 0, host_kv_tokens: int = 0, **hybrid) -> HybridCache:
    config = HybridSimConfig(enabled=True, state_mb=STATE_MB, **hybrid)
    store = int(store_states * STATE_MB * 1e6)
    return HybridCache(BS, policy or LruPolicy(), config, KV_BYTES, store, read_tokens=8, host_gbs=10.0,
                       host_kv_tokens=host_kv_tokens)


def blocks(*ids: int) -> array[int]:
    return array("q", ids)


def test_a_match_ends_at_the_deepest_snapshot_on_its_path():
    c = cache(device_states=8)
    c.insert(blocks(1, 2, 3), 12, now=1.0)           # a prompt: its end snapshotted
    c.insert(blocks(1, 2, 3, 4, 5, 6), 24, now=2.0, inserted_blocks=3)
    assert c.match(blocks(1, 2, 3, 4, 5, 6, 7), 3.0)[0] == 6
    assert c.match(blocks(1, 2, 3, 4, 5), 3.0)[0] == 3   # KV through 5, the state only at 3
    assert c.match(blocks(1, 2), 3.0)[0] == 0            # KV alone resumes nothing
    c.check()


def test_extra_buffer_snapshots_every_interval_too():
    c = cache(device_states=8, snapshot_every_tokens=2 * BS)
    c.insert(blocks(1, 2, 3, 4, 5), 20, now=1.0)
    assert sorted(c.snapshots) == [2, 4, 5]
    assert c.match(blocks(1, 2, 3, 9), 2.0)[0] == 2


def test_per_component_lru_moves_to_the_host_pool_then_drops_the_oldest_there():
    c = cache(device_states=1, host_states=1)
    for t, b in enumerate((1, 2, 3)):
        c.insert(blocks(b), 4, now=float(t))
    assert {b: s.tier for b, s in c.snapshots.items()} == {2: HOST, 3: DEVICE}
    assert c.dropped == 1
    # a request resuming from the host copy waits for its read, then finds it on the device
    assert c.take_resume_s(blocks(2), 1, now=5.0) == pytest.approx(STATE_MB * 1e6 / 10e9)
    assert c.snapshots[2].tier == DEVICE and c.snapshots[3].tier == HOST
    c.check()


def test_histate_demotes_to_the_store_and_reads_back_at_its_bandwidth():
    c = cache(HistatePolicy(), store_states=1, device_states=1, ssd_read_gbs=2.0)
    c.insert(blocks(1), 4, now=0.0)
    c.insert(blocks(2), 4, now=1.0)
    assert c.snapshots[1].tier == SSD and c.snapshots[2].tier == DEVICE and c.dropped == 0
    assert c.take_resume_s(blocks(1), 1, now=2.0) == pytest.approx(STATE_MB * 1e6 / 2e9)
    assert c.snapshots[1].tier == DEVICE and c.snapshots[2].tier == SSD
    # the store full: its lowest-ranked snapshot goes for a newer one
    c.insert(blocks(3), 4, now=3.0)
    assert len(c.at[SSD]) == 1 and c.dropped == 1
    assert c.report()["snapshots_read_ssd"] == 1
    c.check()


def test_a_snapshot_leaves_with_its_kv():
    c = cache(device_states=4)
    c.insert(blocks(1, 2), 8, now=0.0)
    c.insert(blocks(7, 8), 8, now=1.0)
    c.evict(8)  # the least recently used KV: path (1, 2)
    assert 2 not in c.snapshots and 8 in c.snapshots
    c.check()


def test_with_sglangs_host_kv_pool_a_snapshot_outlives_its_device_kv():
    """SGLang's HiCache on a hybrid model: KV that leaves the device goes to the host pool, its
    snapshot stays, a match still resumes there and the restore reads only the attention layers' KV."""
    c = cache(device_states=4, host_kv_tokens=8, kv_fraction=0.25)
    c.insert(blocks(1, 2), 8, now=0.0)
    c.insert(blocks(7, 8), 8, now=1.0)
    c.evict(8)  # the least recently used KV, path (1, 2), goes to the host
    assert 2 in c.snapshots and c.host is not None and c.host.used == 8
    k, node = c.match(blocks(1, 2, 3), 2.0)
    assert k == 2 and c.hollow_tokens(node) == 8
    assert c.restore_s(8, KV_BYTES) == pytest.approx(8 * KV_BYTES * 0.25 / 10e9)
    # the host full too: the next KV to go pushes (1, 2) out, and its snapshot with it
    c.evict(8)
    assert 2 not in c.snapshots and c.match(blocks(1, 2, 3), 3.0)[0] == 0
    c.check()


def test_a_gap_in_the_kv_cuts_the_match_before_it():
    """KV no level holds cannot be recomputed mid-prefix without the state at its start: a snapshot
    past such a gap resumes nothing, one before it still does."""
    c = cache(device_states=4, host_kv_tokens=8)
    c.insert(blocks(1, 2), 8, now=0.0)
    c.insert(blocks(1, 2, 3, 4), 16, now=1.0, inserted_blocks=2)
    head, _ = c.tree.match(blocks(1, 2), 2.0, touch=False)
    node = c._node_of[2]
    assert head == 2 and node.children
    node.hollow = True  # NOTE: as a host drop leaves an inner node whose children stay
    assert c.match(blocks(1, 2, 3, 4), 3.0)[0] == 0
    node.hollow = False
    assert c.match(blocks(1, 2, 3, 4), 3.0)[0] == 4


def test_histate_ranks_kv_past_the_last_snapshot_first():
    """KV a hybrid model cannot resume from costs nothing to lose: it goes before older KV that ends
    in a snapshot (a per-component LRU would take the older first)."""
    def build(policy):
        c = cache(policy, store_states=4, device_states=4)
        c.insert(blocks(1, 2), 8, now=0.0)                       # ends in a snapshot
        c.insert(blocks(5, 6, 7), 12, now=1.0)
        c.tree.match(blocks(5, 6, 7, 9), 2.0)
        del c.snapshots[7], c.at[DEVICE][7]                      # its tail holds none...
        c.insert(blocks(5, 6), 8, now=2.0)                       # ...its front does
        c._changed(6)
        c.evict(1)
        return c
    assert 7 not in build(HistatePolicy())._node_of             # the stateless tail went
    assert 2 not in build(LruPolicy())._node_of                 # LRU took the older path


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=workloads(), capacity=st.integers(24, 600), chunk=st.sampled_from([None, 8, 32]),
       states=st.integers(0, 4), host=st.integers(0, 2), store=st.integers(0, 3),
       every=st.sampled_from([0, 8]), order=st.sampled_from(["lru", "marconi", "histate"]),
       host_kv=st.sampled_from([0, 0, 64, 400]))
def test_invariants_hold_for_any_workload(cost, trace, capacity, chunk, states, host, store,  # noqa: F811
                                          every, order, host_kv):
    histate = order == "histate"
    hybrid = HybridSimConfig(enabled=True, state_mb=1.0, device_states=states, host_states=host,
                             snapshot_every_tokens=every * trace.block_size // 4, marconi=order == "marconi")
    # NOTE: SGLang's host KV pool beside a per-component order (the server refuses it with histate)
    s = sim_settings(capacity=capacity, chunked_prefill_size=chunk, context_length=4096, hybrid=hybrid,
                     host_tier_tokens=0 if histate else host_kv)
    parts = SimParts(eviction=HistatePolicy(tau_s=1.0) if histate else None,
                     snapshot_store_bytes=int(store * 1e6) if histate else 0, snapshot_read_tokens=4)
    sim = build_simulator(trace, cost, s, parts)
    assert isinstance(sim.cache, HybridCache)
    replay_checked(sim, trace, cost)


def test_marconi_keeps_prompt_ends_and_branch_points_not_chunk_ends():
    c = cache(device_states=8, marconi=True)
    c.insert(blocks(1, 2), 16, now=0.0, final=False)              # a chunk's end: not kept
    c.insert(blocks(1, 2, 3, 4), 16, now=1.0, inserted_blocks=2)  # the prompt's end
    assert sorted(c.snapshots) == [4]
    # a second prompt recomputes (1, 2) (no snapshot there) and leaves the path after block 2
    c.insert(blocks(1, 2, 7, 8), 16, now=2.0)
    assert sorted(c.snapshots) == [2, 4, 8]
    c.check()


def test_marconi_evicts_the_lowest_recency_plus_alpha_flop_efficiency():
    c = cache(device_states=2, marconi=True, marconi_alpha=2.0)
    c.insert(blocks(1, 2, 3, 4, 5, 6, 7, 8), 32, now=0.0)        # old, spares 8 blocks
    c.insert(blocks(20), 4, now=1.0)                             # recent, spares 1 block
    c.insert(blocks(30), 4, now=2.0)                             # needs a slot
    # normalised: the old state 0 + 2 x 1 (spares most), the recent one 1 + 2 x 0: the recent one goes
    assert sorted(c.snapshots) == [8, 30]
    lru = cache(device_states=2)
    for t, path in enumerate(((1, 2, 3, 4, 5, 6, 7, 8), (20,), (30,))):
        lru.insert(blocks(*path), 4 * len(path), now=float(t))
    assert sorted(lru.snapshots) == [20, 30]
