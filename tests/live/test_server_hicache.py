"""SGLang's own HiCache live on the CPU server: host tier and file storage (``server/sglang/hicache/cpu.py``).

One server with a small device pool (1,024 tokens), SGLang's host tier (twice
that) and file storage. A prompt's first answer is computed from nothing
(``cached_tokens`` 0); other prompts then push its KV out of the device pool,
so its repeat is served from the host tier, then out of the host tier too, so
the next repeat is served from storage. Each reused answer must equal the first
token for token (float32, greedy), the tiers must say where the prefix came
from (SGLang's ``cached_tokens_details``), another tenant (``cache_salt``) must
get nothing from any tier, and a storage directory that can no longer be
written must cost misses, never an error or a wrong answer.
"""

from __future__ import annotations

import random

import pytest

from bench.live import tiers
from bench.live.faults import healthy
from tests.live.harness import start_with_hicache_room

pytestmark = pytest.mark.server

DEVICE_TOKENS = 1024
HOST_TOKENS = tiers.host_tokens(DEVICE_TOKENS)
PROMPT_WORDS = 300


@pytest.fixture(scope="module")
def storage_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("hicache") / "storage"


@pytest.fixture(scope="module")
def server(start_server, storage_dir):
    server = start_with_hicache_room(start_server, tiers.host_tokens(DEVICE_TOKENS),
                                     *tiers.hicache_overrides(storage_dir, DEVICE_TOKENS))
    yield server
    server.stop()


def test_reused_prefixes_come_back_from_host_then_storage_exactly_and_per_tenant(server):
    url, rng = server.base_url, random.Random(7)
    prompt = tiers.fresh_text(rng, PROMPT_WORDS)
    first = tiers.generate(url, prompt)
    n = int(first["meta_info"]["prompt_tokens"])
    assert first["meta_info"]["cached_tokens"] == 0 and n > 300

    tiers.push_out(url, rng, DEVICE_TOKENS, PROMPT_WORDS)
    from_host = tiers.generate(url, prompt)
    assert tiers.tiers(from_host)["host"] >= n - 16, tiers.tiers(from_host)
    assert from_host["text"] == first["text"]

    tiers.push_out(url, rng, HOST_TOKENS + DEVICE_TOKENS, PROMPT_WORDS)
    from_storage = tiers.generate(url, prompt)
    assert tiers.tiers(from_storage)["storage"] >= n - 16, tiers.tiers(from_storage)
    assert from_storage["text"] == first["text"]

    # another tenant shares nothing, in any tier; the same tenant's repeat hits
    other = tiers.generate(url, prompt, salt="tenant-b")
    assert other["meta_info"]["cached_tokens"] == 0 and other["text"] == first["text"]
    assert tiers.generate(url, prompt, salt="tenant-b")["meta_info"]["cached_tokens"] > 0


def test_unwritable_storage_costs_misses_not_errors(server, storage_dir):
    fault = tiers.storage_fault(server.base_url, server.log_path, lambda: tiers.make_unwritable(storage_dir),
                                random.Random(11), n=1, n_words=PROMPT_WORDS,
                                push_tokens=HOST_TOKENS + DEVICE_TOKENS)
    before, after = fault["before"], fault["after"]
    # working storage served the repeat; broken storage served nothing, and nothing failed
    assert before["repeat_tokens_from"]["storage"] > 300 and after["repeat_tokens_from"]["storage"] == 0, fault
    assert before["repeats_equal"] == after["repeats_equal"] == 1, fault
    assert set(before["outcomes"]) == set(after["outcomes"]) == {"answered"}, fault
    assert fault["failed_page_writes"] > 0 and fault["stored_tokens_during_fault"] == 0, fault
    assert fault["healthy_after"] and healthy(server.base_url)
