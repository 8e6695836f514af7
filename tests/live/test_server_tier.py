"""``+tier`` live on the CPU server: ``ssd_only`` (SGLang's ``buffer_only``) on Switchboard's checked
segment storage, and the tier cache's placements, ``flatcake`` and ``exclusive`` (each test says what
it shows).

One server with a small device pool (1,024 tokens) and an SSD level in a
temporary directory (``tier.ssd_dir``, ``tier.ssd_gb``). A prompt's KV pushed
out of the device pool must come back from storage, never from host memory
(memory only stages), with the answer equal to the first token for token
(float32, greedy); the storage directory must stay within ``tier.ssd_gb``.
Then every stored segment is damaged: the repeat must read nothing from
storage, recompute, answer exactly the same, and the server must count the
damaged pages (``switchboard_tier_corrupt_pages``). ``+tier=hierarchical``
with SGLang's file storage sets the flags of ``test_server_hicache.py``'s
server (``tests/config/test_tier_binding.py``).
"""

from __future__ import annotations

import random
import time

import pytest

from bench.live import tiers
from bench.live.chat import metric_total
from tests.live.harness import start_with_hicache_room

pytestmark = pytest.mark.server

DEVICE_TOKENS = 1024
PROMPT_WORDS = 300
SSD_GB = 1.0


def _tier_server(start_server, option: str, ssd, host_ratio: int, *overrides: str):
    """A ``+tier=<option>`` server on the segment store in ``ssd``, a ``DEVICE_TOKENS`` pool and a
    host level of ``host_ratio`` pools, started once SGLang would grant that host pool."""
    return start_with_hicache_room(
        start_server, host_ratio * DEVICE_TOKENS, "model.dtype=float32", f"+tier={option}", f"tier.ssd_dir={ssd}",
        f"tier.ssd_gb={SSD_GB}", "tier.storage=segments", f"tier.host_ratio={host_ratio}",
        f"sglang.max_total_tokens={DEVICE_TOKENS}", "sglang.enable_cache_report=true", *overrides)


def _assert_no_block_in_both_levels(url: str) -> None:
    """The tier cache's audit of the final state reads 0.

    NOTE: the audit runs in a scheduler step at most once a second after a change: a step more
    than a second after the last change audits the final state."""
    time.sleep(1.2)
    tiers.generate(url, "tick", max_new_tokens=1)
    time.sleep(0.2)
    assert metric_total(url, "switchboard_tier_audits_total") >= 1
    assert metric_total(url, "switchboard_tier_both_levels_tokens") == 0


@pytest.fixture(scope="module")
def ssd_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tier") / "ssd"


# NOTE: each server serves one test and stops after it (function scope): three HiCache servers alive
# at once, beside the other test worker's, left less host memory than SGLang keeps free (10 GiB)
@pytest.fixture
def server(start_server, ssd_dir):
    server = _tier_server(start_server, "ssd_only", ssd_dir, 2)  # NOTE: 2: SGLang's default ratio
    yield server
    server.stop()


def test_a_pushed_out_prefix_comes_back_from_ssd_only_exactly_and_damage_costs_a_miss(server, ssd_dir):
    url, rng = server.base_url, random.Random(7)
    prompt = tiers.fresh_text(rng, PROMPT_WORDS)
    first = tiers.generate(url, prompt)
    n = int(first["meta_info"]["prompt_tokens"])
    assert first["meta_info"]["cached_tokens"] == 0 and n > 300

    tiers.push_out(url, rng, DEVICE_TOKENS, PROMPT_WORDS)
    repeat = tiers.generate(url, prompt)
    came = tiers.tiers(repeat)
    assert came["storage"] >= n - 16 and came["host"] == 0, came
    assert repeat["text"] == first["text"]

    # pushed past the host staging area too: still from storage
    tiers.push_out(url, rng, 3 * DEVICE_TOKENS, PROMPT_WORDS)
    again = tiers.generate(url, prompt)
    assert tiers.tiers(again)["storage"] >= n - 16 and again["text"] == first["text"]

    segments = [p for p in ssd_dir.rglob("*.seg") if p.is_file()]
    assert segments and 0 < sum(p.stat().st_size for p in segments) <= SSD_GB * 1e9

    # every stored page damaged: a miss, recomputed, the same answer, and counted
    for path in segments:
        size = path.stat().st_size
        with open(path, "r+b") as f:
            for at in range(0, size, 1 << 20):
                f.write(b"\x5a" * min(1 << 20, size - at))
    tiers.push_out(url, rng, DEVICE_TOKENS, PROMPT_WORDS)
    damaged = tiers.generate(url, prompt)
    assert tiers.tiers(damaged)["storage"] == 0 and damaged["text"] == first["text"], tiers.tiers(damaged)
    assert metric_total(url, "switchboard_tier_corrupt_pages_total") >= 1


@pytest.fixture(scope="module")
def flat_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("flatcake") / "ssd"


@pytest.fixture
def flatcake(start_server, flat_dir):
    # NOTE: a session predicted past 256 tokens lives on SSD; host memory holds 16x the device pool
    server = _tier_server(start_server, "flatcake", flat_dir, 16, "tier.ssd_session_tokens=256")
    yield server
    server.stop()


def test_flatcake_reads_the_shared_prompt_from_memory_and_a_long_session_from_ssd_exactly(flatcake, flat_dir):
    """Two sessions share a system prompt: it is homed in memory; each session's own turn is
    predicted long and homed on SSD. Pushed out of the device, a repeat reads the prompt back
    from host memory and its own part from storage, answers as computed from nothing, and no
    block stays in both levels (the audit reads the tree and the storage backend); each session's
    blocks lie in its own segment."""
    url, rng = flatcake.base_url, random.Random(11)
    system = tiers.fresh_text(rng, 100)
    turns = {s: f"{system} {tiers.fresh_text(rng, PROMPT_WORDS)}" for s in ("a", "b")}
    first = {s: tiers.generate(url, text, session=s) for s, text in turns.items()}
    shared = int(tiers.generate(url, system)["meta_info"]["prompt_tokens"])
    assert shared > 100 and first["a"]["meta_info"]["cached_tokens"] == 0

    for s, text in turns.items():
        tiers.push_out(url, rng, 3 * DEVICE_TOKENS, PROMPT_WORDS)
        repeat = tiers.generate(url, text, session=s)
        came, n = tiers.tiers(repeat), int(repeat["meta_info"]["prompt_tokens"])
        # NOTE: every fresh prompt opens with '#' and a hex tag: its first tokens may stay on the device
        assert came["device"] <= 4 and shared - 16 <= came["host"] <= shared + 16, came
        assert came["storage"] >= n - shared - 32, came
        assert repeat["text"] == first[s]["text"]
    # NOTE: only the two sessions' turns went to SSD, each to its own segment (the flood homed in memory)
    assert len([p for p in flat_dir.rglob("*.seg") if p.is_file()]) == 2

    assert metric_total(url, "switchboard_tier_memory_home_tokens_total") >= shared - 16
    assert metric_total(url, "switchboard_tier_ssd_home_tokens_total") >= 2 * PROMPT_WORDS
    assert metric_total(url, "switchboard_tier_host_copies_released_tokens_total") >= 2 * PROMPT_WORDS
    assert metric_total(url, "switchboard_tier_ssd_read_tokens_total") >= 2 * PROMPT_WORDS
    _assert_no_block_in_both_levels(url)


@pytest.fixture
def exclusive(start_server, tmp_path_factory):
    # NOTE: host memory as large as the device pool: a pushed-out prompt soon leaves it too
    ssd = tmp_path_factory.mktemp("exclusive") / "ssd"
    server = _tier_server(start_server, "exclusive", ssd, 1)
    yield server
    server.stop()


def test_exclusive_demotes_what_memory_evicts_and_moves_it_back_up_on_a_read(exclusive):
    """A prompt pushed out of the device and then out of host memory was demoted to SSD on its
    way out: its repeat reads it from storage (nothing from memory), exactly; read back, it
    lives in memory only (the store forgot it: the audit reads 0), and pushed out again it is
    demoted again and read back again, still exactly."""
    url, rng = exclusive.base_url, random.Random(13)
    prompt = tiers.fresh_text(rng, PROMPT_WORDS)
    first = tiers.generate(url, prompt)
    n = int(first["meta_info"]["prompt_tokens"])
    for _ in range(2):
        tiers.push_out(url, rng, 3 * DEVICE_TOKENS, PROMPT_WORDS)
        repeat = tiers.generate(url, prompt)
        came = tiers.tiers(repeat)
        assert came["storage"] >= n - 16 and came["host"] == 0, came
        assert repeat["text"] == first["text"]
    assert metric_total(url, "switchboard_tier_demoted_tokens_total") >= 2 * (n - 16)
    assert metric_total(url, "switchboard_tier_ssd_home_tokens_total") == 0  # every block starts in memory
    _assert_no_block_in_both_levels(url)
