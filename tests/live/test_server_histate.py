"""HiState live (``+cache=histate``): a hybrid model's recurrent-state snapshots demoted to the
SSD store under state-pool pressure, and read back when a later turn resumes from them.

``model=lfm2_tiny`` with four state slots: a multi-turn script with a branch fills the pool,
other sessions push the turns' states out (demoted, their KV kept), and the next turn still
resumes from the longest snapshot-backed match, read from SSD, with greedy output equal to HF
transformers on the full context (float32). A snapshot file corrupted on disk is a miss:
the turn recomputes, its output still exact. Stock SGLang drops those states (its eviction of a
state at a leaf takes the leaf's KV with it), so the same turn there resumes from less; with
SGLang's hierarchical cache (``sglang.enable_hierarchical_cache=true``, served on CPU by
``server/sglang/hicache/cpu.py``) stock backs KV and states up to host memory instead, and the
same turn resumes from host copies of both, output equal to HF.
"""

from __future__ import annotations

import random
import re

import httpx
import pytest

from bench.live.chat import metrics_text, series_total
from tests.live.harness import start_with_hicache_room

pytestmark = pytest.mark.server

OUT = 6
"""New tokens per turn (ignore_eos: every turn has them all)."""
SLOTS = 4
"""Recurrent-state slots (``sglang.max_mamba_cache_size``): small, so other sessions push states out."""


@pytest.fixture(scope="module")
def snapshot_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("snapshots")


@pytest.fixture(scope="module")
def server(start_server, snapshot_dir):
    server = start_server("model=lfm2_tiny", f"sglang.max_mamba_cache_size={SLOTS}", "+cache=histate",
                          f"cache.snapshot_dir={snapshot_dir}", "cache.snapshot_gb=0.01",
                          # NOTE: a read costs nothing: a state that goes is always demoted, never dropped with
                          # its few tokens of KV (at 16, dropping a 5-token leaf is cheaper, and is chosen)
                          "cache.snapshot_read_tokens=0")
    yield server
    server.stop()


def generate(base_url: str, ids: list[int]) -> tuple[list[int], int]:
    r = httpx.post(base_url + "/generate", timeout=600, json={
        "input_ids": ids, "sampling_params": {"temperature": 0, "max_new_tokens": OUT, "ignore_eos": True}})
    assert r.status_code == 200, r.text
    body = r.json()
    return body["output_ids"], body["meta_info"]["cached_tokens"]


def counters(base_url: str) -> dict[str, float]:
    text = httpx.get(base_url + "/metrics", timeout=30).text
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r"^switchboard_histate_snapshots_(\w+)_total(?:\{[^}]*\})? ([0-9.e+]+)$", text, re.M)}


def pressure(base_url: str, rng: random.Random, n: int = SLOTS + 2) -> None:
    """Other sessions, one at a time: their states take every slot."""
    for _ in range(n):
        generate(base_url, words(rng, 60))


def words(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(300, 40_000) for _ in range(n)]


@pytest.fixture
def stock(start_server):
    """Stock SGLang on the same model, for one test (NOTE: it runs first, so the module holds one
    server at a time: the other worker's HiCache servers need the host memory)."""
    server = start_server("model=lfm2_tiny", f"sglang.max_mamba_cache_size={SLOTS}")
    yield server
    server.stop()


@pytest.fixture
def hicache(start_server):
    """Stock SGLang with its hierarchical cache: a KV pool small enough that the script's turns
    leave the device, and host pools (6x) that keep them (one server at a time, as ``stock``)."""
    server = start_with_hicache_room(start_server, 6 * HICACHE_DEVICE_TOKENS, "model=lfm2_tiny",
                                     f"sglang.max_mamba_cache_size={SLOTS}", "sglang.enable_hierarchical_cache=true",
                                     f"sglang.max_total_tokens={HICACHE_DEVICE_TOKENS}", "sglang.hicache_ratio=6")
    yield server
    server.stop()


HICACHE_DEVICE_TOKENS = 400
"""The device KV pool of the ``hicache`` server: under the script's ~900 tokens."""


def script(base: str) -> tuple[list[int], list[int], int, int, dict[str, float], dict[str, float]]:
    """Two turns and a branch, other sessions, then a third turn: its prompt, its answer, its
    cached tokens, the longest match a kept snapshot backs, and the counters before and after it."""
    rng = random.Random(0)
    first = words(rng, 160)
    a1, cached = generate(base, first)
    assert cached == 0
    # turn 2 and a branch beside it both resume from turn 1's end (the last token has no KV yet)
    turn2 = first + a1 + words(rng, 40)
    a2, cached = generate(base, turn2)
    assert cached == len(first) + OUT - 1
    _, cached = generate(base, first + a1 + words(rng, 40))
    assert cached == len(first) + OUT - 1
    pressure(base, rng)
    pushed = counters(base)
    # turn 3 resumes from turn 2's end
    turn3 = turn2 + a2 + words(rng, 30)
    a3, cached = generate(base, turn3)
    return turn3, a3, cached, len(turn2) + OUT - 1, pushed, counters(base)


def test_stock_sglang_drops_the_state_and_resumes_from_less(stock, lfm2_hf):
    turn3, a3, cached, longest, _, after = script(stock.base_url)
    assert after == {}  # no snapshot cache there
    assert cached < longest
    assert a3 == lfm2_hf.greedy_ids(turn3, OUT)


def test_sglangs_hierarchical_cache_resumes_from_host_copies_of_kv_and_state_and_equals_hf(hicache, lfm2_hf):
    turn3, a3, cached, longest, _, _ = script(hicache.base_url)
    assert cached == longest
    metrics = metrics_text(hicache.base_url, timeout=30)
    # turn 3's whole match came from the host
    assert series_total(metrics, "sglang:cached_tokens_total", {"cache_source": "host"}) >= longest
    assert all(series_total(metrics, "sglang:hicache_backup_tokens_total", {"pool": pool}) > 0
               for pool in ("kv", "mamba"))
    assert a3 == lfm2_hf.greedy_ids(turn3, OUT)


def test_a_turn_resumes_from_a_snapshot_read_back_from_ssd_and_equals_hf(server, lfm2_hf):
    turn3, a3, cached, longest, pushed, after = script(server.base_url)
    assert pushed["written"] > 0  # the other sessions pushed states out to SSD
    assert cached == longest and after["read"] > pushed["read"]  # turn 2's end came back from SSD
    assert a3 == lfm2_hf.greedy_ids(turn3, OUT)


def test_a_corrupt_snapshot_is_a_miss_and_the_turn_recomputes_exactly(server, lfm2_hf, snapshot_dir):
    rng = random.Random(1)
    base = server.base_url
    first = words(rng, 120)
    a1, _ = generate(base, first)
    pressure(base, rng)
    files = sorted(snapshot_dir.glob("*.snap"))
    assert files, "nothing was demoted"
    for path in files:
        data = bytearray(path.read_bytes())
        data[-1] ^= 0xFF
        path.write_bytes(bytes(data))
    before = counters(base)
    turn2 = first + a1 + words(rng, 30)
    a2, cached = generate(base, turn2)
    assert cached < len(first) + OUT - 1  # NOTE: not the corrupt state's match
    assert counters(base)["missed"] > before.get("missed", 0)
    assert a2 == lfm2_hf.greedy_ids(turn2, OUT)
