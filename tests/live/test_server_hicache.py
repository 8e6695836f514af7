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
import shutil
from typing import Any

import httpx
import pytest

from bench.live.faults import healthy
from tests.live.harness import unique_prompt

pytestmark = pytest.mark.server

DEVICE_TOKENS = 1024
#: SGLang's host tier: hicache_ratio (2) x the device pool, plus one padding page.
HOST_TOKENS = 2 * DEVICE_TOKENS + 1
PROMPT_WORDS = 300
NEW_TOKENS = 16


@pytest.fixture(scope="module")
def storage_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("hicache") / "storage"


@pytest.fixture(scope="module")
def server(start_server, storage_dir):
    server = start_server("sglang.enable_hierarchical_cache=true", f"sglang.max_total_tokens={DEVICE_TOKENS}",
                          "sglang.enable_cache_report=true", "sglang.hicache_storage_backend=file",
                          f"sglang.hicache_storage_backend_extra_config={{file_storage_path:'{storage_dir}'}}")
    yield server
    server.stop()


def generate(server: Any, text: str, salt: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"text": text, "sampling_params": {"temperature": 0, "max_new_tokens": NEW_TOKENS}}
    if salt is not None:
        body["cache_salt"] = salt
    r = httpx.post(server.base_url + "/generate", json=body, timeout=300)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def tiers(answer: dict[str, Any]) -> dict[str, int]:
    """Where the cached prefix came from: ``{"device": ..., "host": ..., "storage": ...}``."""
    details = answer["meta_info"].get("cached_tokens_details") or {}
    return {tier: int(details.get(tier, 0)) for tier in ("device", "host", "storage")}


def push_out(server: Any, rng: random.Random, tokens: int) -> None:
    """Send fresh prompts until more than ``tokens`` tokens went through the cache after the last use."""
    sent = 0
    while sent <= tokens:
        sent += int(generate(server, unique_prompt(rng, PROMPT_WORDS))["meta_info"]["prompt_tokens"])


def metric(server: Any, name: str) -> float:
    """The sum of SGLang's Prometheus series ``name`` over its labels."""
    text = httpx.get(server.base_url + "/metrics", timeout=30).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


def test_reused_prefixes_come_back_from_host_then_storage_exactly_and_per_tenant(server):
    rng = random.Random(7)
    prompt = unique_prompt(rng, PROMPT_WORDS)
    first = generate(server, prompt)
    n = int(first["meta_info"]["prompt_tokens"])
    assert first["meta_info"]["cached_tokens"] == 0 and n > 300

    push_out(server, rng, DEVICE_TOKENS)
    from_host = generate(server, prompt)
    assert tiers(from_host)["host"] >= n - 16, tiers(from_host)
    assert from_host["text"] == first["text"]

    push_out(server, rng, HOST_TOKENS + DEVICE_TOKENS)
    from_storage = generate(server, prompt)
    assert tiers(from_storage)["storage"] >= n - 16, tiers(from_storage)
    assert from_storage["text"] == first["text"]

    # another tenant shares nothing, in any tier; the same tenant's repeat hits
    other = generate(server, prompt, salt="tenant-b")
    assert other["meta_info"]["cached_tokens"] == 0 and other["text"] == first["text"]
    assert generate(server, prompt, salt="tenant-b")["meta_info"]["cached_tokens"] > 0


def test_unwritable_storage_costs_misses_not_errors(server, storage_dir):
    rng = random.Random(11)
    stored = metric(server, "sglang:backuped_tokens_total")
    assert stored > 0
    # NOTE: the directory replaced by a file: every write fails (ENOTDIR), as a full or
    # read-only disk would, without privileges the suite does not have.
    shutil.rmtree(storage_dir)
    storage_dir.write_text("not a directory\n")
    prompt = unique_prompt(rng, PROMPT_WORDS)
    first = generate(server, prompt)
    push_out(server, rng, HOST_TOKENS + DEVICE_TOKENS)
    again = generate(server, prompt)
    assert tiers(again)["storage"] == 0 and again["text"] == first["text"], tiers(again)
    assert metric(server, "sglang:backuped_tokens_total") == stored
    assert "Failed to save tensor" in server.log_path.read_text(errors="replace")
    assert healthy(server.base_url)
