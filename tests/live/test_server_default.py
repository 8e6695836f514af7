"""The CPU server with stock SGLang behaviour: real model, real openai client, HF agreement.
(Its Ctrl-C stop is checked in test_server_policies, on a server the session can spare.)"""

from __future__ import annotations

import random

import httpx
import pytest

from bench.live.chat import (
    agreement,
    client,
    metric_total,
    metrics_text,
    run_conversations,
    series_total,
    wait_for,
    wait_still,
)
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


#: SGLang's counters one request moves, and by how much (from its own ``meta_info``).
COUNTED = {"sglang:prompt_tokens_total": "prompt_tokens", "sglang:generation_tokens_total": "completion_tokens",
           "sglang:time_to_first_token_seconds_count": None, "sglang:e2e_request_latency_seconds_count": None}


def test_metrics_count_what_one_request_did(server):
    """``/metrics`` is SGLang's own accounting: one request moves each counter by its own figures."""
    url = server.base_url
    before = {name: metric_total(url, name) for name in COUNTED}
    body = {"text": unique_prompt(random.Random(3), 40), "sampling_params": {"temperature": 0, "max_new_tokens": 7,
                                                                  "ignore_eos": True}}
    meta = httpx.post(url + "/generate", json=body, timeout=300).json()["meta_info"]
    want = {name: float(meta[key]) if key else 1.0 for name, key in COUNTED.items()}
    assert want["sglang:generation_tokens_total"] == 7 and want["sglang:prompt_tokens_total"] > 5

    def moved() -> dict[str, float]:
        return {name: metric_total(url, name) - before[name] for name in COUNTED}

    try:
        wait_for(lambda: moved() == want, timeout=15, what="SGLang's counters to count the request")
    except AssertionError:
        assert moved() == want  # NOTE: shows both sides
    assert metric_total(url, "sglang:num_queue_reqs") == 0


def test_hook_time_and_busy_iterations_reach_metrics(server):
    """Switchboard's hook clock on ``/metrics``: one request is one arrival, and every busy
    scheduler iteration ran exactly one batch (formed and finished once each)."""
    url = server.base_url

    def counts() -> dict[str, float]:
        text = metrics_text(url)
        out = {hook: series_total(text, "switchboard_hook_calls_total", {"hook": hook})
               for hook in ("arrival", "batch_formed", "batch_finished", "order")}
        out["busy"] = series_total(text, "switchboard_scheduler_busy_iterations_total")
        out["hook_s"] = series_total(text, "switchboard_hook_seconds_total")
        out["busy_s"] = series_total(text, "switchboard_scheduler_busy_seconds_total")
        return out

    # NOTE: once an earlier request's last push is in (the counts hold still over a push period)
    before = wait_still(counts, hold_s=1.5, what="the hook clock's counts")
    body = {"text": unique_prompt(random.Random(5), 30), "sampling_params": {"temperature": 0, "max_new_tokens": 9,
                                                                  "ignore_eos": True}}
    httpx.post(url + "/generate", json=body, timeout=300).raise_for_status()

    def moved() -> dict[str, float]:
        return {k: v - before[k] for k, v in counts().items()}

    def settled() -> bool:
        m = moved()
        return m["arrival"] == 1 and m["busy"] >= 9 and m["batch_formed"] == m["batch_finished"] == m["busy"]

    try:
        wait_for(settled, timeout=15, what="the hook clock's push (at most once a second)")
    except AssertionError:
        assert moved() == {}  # NOTE: shows what moved
    m = moved()
    assert m["order"] >= 1  # NOTE: the prefill pass ranked the queue (SGLang's own order: ~0 s)
    assert 0 < m["hook_s"] < m["busy_s"]


def test_without_a_policy_the_queue_is_served_first_come_first_served(server):
    rng = random.Random(1)
    prompts = {"long": unique_prompt(rng, 150), "short": unique_prompt(rng, 10),
               "mid": unique_prompt(rng, 70), "tiny": unique_prompt(rng, 3)}
    assert QueueExperiment(server.base_url).run(prompts) == ["long", "short", "mid", "tiny"]
