"""The CPU server with stock SGLang behaviour: real model, real openai client, HF agreement.
(Its Ctrl-C stop is checked in test_server_policies, on a server the session can spare.)"""

from __future__ import annotations

import random

import httpx
import pytest

from bench.live.chat import agreement, client, run_conversations
from tests.live.harness import QueueExperiment, unique_prompt

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def server(stock_server):
    return stock_server


def test_greedy_chat_turns_equal_hf_transformers(server, hf):
    turns = run_conversations(server.base_url)
    assert len(turns) == 12
    same = agreement(turns, hf)
    assert all(same), f"turns differing from HF: {[i for i, ok in enumerate(same) if not ok]}"


def test_streaming_equals_non_streaming(server):
    c = client(server.base_url, timeout=300)
    messages = [{"role": "user", "content": "Describe a rainbow in one sentence."}]
    full = c.chat.completions.create(model="default", messages=messages, max_tokens=32, temperature=0)
    stream = c.chat.completions.create(model="default", messages=messages, max_tokens=32,
                                       temperature=0, stream=True)
    chunks = [ch.choices[0].delta.content or "" for ch in stream if ch.choices]
    assert len([c for c in chunks if c]) > 1
    assert "".join(chunks) == full.choices[0].message.content


def test_metrics_endpoint_serves_sglang_series(server):
    text = httpx.get(server.base_url + "/metrics", timeout=10).text
    for series in ("sglang:time_to_first_token_seconds", "sglang:num_queue_reqs", "sglang:prompt_tokens_total"):
        assert series in text


def test_without_a_policy_the_queue_is_served_first_come_first_served(server):
    rng = random.Random(1)
    prompts = {"long": unique_prompt(rng, 150), "short": unique_prompt(rng, 10),
               "mid": unique_prompt(rng, 70), "tiny": unique_prompt(rng, 3)}
    assert QueueExperiment(server.base_url).run(prompts) == ["long", "short", "mid", "tiny"]
