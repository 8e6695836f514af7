"""Policies inside the live CPU server: scheduling order and eviction through the seams;
last, Ctrl-C stops every SGLang process within the README's default grace."""

from __future__ import annotations

import random
import re
import signal

import httpx
import pytest

from bench.live.chat import agreement, run_conversations
from tests.live.conftest import module_server
from tests.live.harness import (
    QueueExperiment,
    assert_stops_within_grace,
    assert_tenants_share_nothing,
    tenant_cache_hits,
    unique_prompt,
)

pytestmark = pytest.mark.server

#: ``server.shutdown_grace_s``, set explicitly: the README's default, which the Ctrl-C stop is checked against.
GRACE_S = 10.0

# NOTE: a 600-token KV pool, so the 12 chat turns below force evictions.
server = module_server("model.dtype=float32", "+policy=shortest_prefill", "+cache=lru",
                       "sglang.max_running_requests=1", "sglang.max_total_tokens=600",
                       f"server.shutdown_grace_s={GRACE_S:g}")


def test_queue_completes_in_shortest_prefill_order(server):
    rng = random.Random(2)
    prompts = {"long": unique_prompt(rng, 120), "short": unique_prompt(rng, 10),
               "mid": unique_prompt(rng, 60), "tiny": unique_prompt(rng, 2)}
    assert QueueExperiment(server.base_url).run(prompts) == ["tiny", "short", "mid", "long"]


def test_tenants_share_nothing_under_an_eviction_option(server):
    """SGLang's ``cache_salt`` partitions the radix cache our eviction strategy runs on."""
    assert_tenants_share_nothing(tenant_cache_hits(server.base_url, random.Random(4)))


def evicted_tokens(base_url: str) -> float:
    text = httpx.get(base_url + "/metrics", timeout=10).text
    return sum(float(v) for v in re.findall(r"^sglang:evicted_tokens_total\{[^}]*\} ([0-9.e+]+)$", text, re.M))


def test_lru_seam_evicts_and_greedy_output_still_equals_hf(server, hf):
    before = evicted_tokens(server.base_url)
    turns = run_conversations(server.base_url)
    assert evicted_tokens(server.base_url) > before, "the 600-token pool never evicted"
    assert "radix-cache eviction ranked by LruPolicy" in server.log_text()
    same = agreement(turns, hf)
    assert all(same), f"turns differing from HF: {[i for i, ok in enumerate(same) if not ok]}"


def test_request_that_can_never_fit_the_pool_is_refused_with_400(server):
    import openai

    from bench.live.chat import client, loads

    body = {"model": "default", "messages": [{"role": "user", "content": "Tell a story."}],
            "max_tokens": 1000}
    r = httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 400 and "KV pool holds at most 600" in r.json()["message"]
    with pytest.raises(openai.BadRequestError, match="KV pool holds at most 600"):
        list(client(server.base_url, max_retries=0).chat.completions.create(stream=True, **body))
    ok = httpx.post(server.base_url + "/v1/chat/completions", json={**body, "max_tokens": 8}, timeout=300)
    assert ok.status_code == 200
    assert loads(server.base_url)["num_running_reqs"] == 0


def test_ctrl_c_stops_every_sglang_process_within_the_shutdown_grace(server):
    # NOTE: the module's last test: the server is gone afterwards.
    assert_stops_within_grace(server, signal.SIGINT, GRACE_S)
