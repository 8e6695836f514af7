"""Penelope inside the live CPU server (the fidelity bar of issue 5): a KV pool small
enough that another session's request evicts the *front* of a conversation's private
history leaves a gap; the next turn recomputes only the gap, reuses the cached tail,
and its greedy tokens equal (float32) those of a stock SGLang server whose pool never
evicts (the session's shared ``stock_server``) and HF transformers'. The two sessions' shared system prompt survives the eviction. With a
host tier (``cache.host_tier_tokens``) the same gap is restored from host memory
instead: nothing is recomputed and the tokens are the same."""

from __future__ import annotations

import random
import re

import httpx
import pytest

from tests.live.harness import assert_tenants_share_nothing, tenant_cache_hits

pytestmark = pytest.mark.server

STORY = (
    "Mira kept the lighthouse on Gannet Rock for eleven winters. Her boat was painted green, "
    "with a yellow stripe along the hull, and she named it Pelican after the first bird she saw "
    "the morning she arrived. Every Tuesday the supply ship brought flour, lamp oil, letters from "
    "her brother Tomas in Lisbon, and a crate of oranges that she shared with the fishermen who "
    "sheltered in the cove during storms. The lamp needed winding every four hours, so she slept "
    "in short pieces and read old atlases between the shifts. One February a storm cracked the "
    "great lens, and for three nights she kept a ring of oil lamps burning behind the broken glass "
    "until the repair crew came from the mainland with a new prism packed in straw. The captain of "
    "the repair boat, a quiet man called Ansel, stayed for a week to finish the work and taught her "
    "to play chess on a board carved from driftwood. When spring came the gannets returned by the "
    "thousand, and the whole rock turned white with their wings.")
SYSTEM = "You answer questions about stories carefully and briefly."
Q1 = "Read this story and say in one sentence what it is about."
Q2 = "What was the name of Mira's boat, and what color was it?"
Q3 = "Who taught Mira to play chess, and what was the board made of?"
OTHER = ("A different reader asks about a different story entirely: a baker in Oslo who "
         "wakes at three every morning to shape rye loaves, feeds a starter called Olga, "
         "and sells out before the tram starts running. ")
POOL = 600
OUT = 24


@pytest.fixture(scope="module")
def tok(hf):
    return hf.tok


@pytest.fixture(scope="module")
def segments(tok):
    """Token ids of the chat: A's first prompt (system, story), A's later user turns, B's prompt."""
    def chat(user: str) -> list[int]:
        text = tok.apply_chat_template([{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}],
                                       add_generation_prompt=True, tokenize=False)
        return tok(text, add_special_tokens=False).input_ids

    def user_turn(text: str) -> list[int]:
        return tok(f"<|im_end|>\n<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n",
                   add_special_tokens=False).input_ids

    t1 = chat(STORY + "\n\n" + Q1)
    other = chat(OTHER * 16)
    shared = next(i for i, (x, y) in enumerate(zip(t1, other)) if x != y)
    return {"t1": t1, "other": other, "shared": shared, "q2": user_turn(Q2), "q3": user_turn(Q3)}


def generate(base_url: str, input_ids: list[int], n: int = OUT) -> tuple[list[int], int]:
    r = httpx.post(base_url + "/generate", timeout=600, json={
        "input_ids": input_ids, "sampling_params": {"temperature": 0, "max_new_tokens": n, "ignore_eos": True}})
    assert r.status_code == 200, r.text
    body = r.json()
    return body["output_ids"], body["meta_info"]["cached_tokens"]


def conversation(base_url: str, seg: dict) -> dict:
    """Turn 1 and 2 of session A, one request of session B (same system prompt), turn 3 of A."""
    t1 = seg["t1"]
    a1, _ = generate(base_url, t1)
    t2 = t1 + a1 + seg["q2"]
    a2, _ = generate(base_url, t2)
    # B's new tokens: 60 more than the small pool has free, so it must evict a little
    # (less than A's first prompt after the shared part, A's oldest private block)
    cached_a = len(t2) + len(a2) - 1
    n_b = seg["shared"] + POOL - cached_a + 60
    assert n_b <= len(seg["other"]) and 60 + 8 < len(t1) - seg["shared"]
    _, b_cached = generate(base_url, seg["other"][:n_b], 8)
    t3 = t2 + a2 + seg["q3"]
    a3, cached3 = generate(base_url, t3)
    return {"t2": t2, "a2": a2, "t3": t3, "a3": a3, "cached3": cached3, "b_cached": b_cached}


@pytest.fixture(scope="module")
def runs(start_server, stock_server, segments):
    small = start_server("model.dtype=float32", "+cache=penelope", f"sglang.max_total_tokens={POOL}",
                         "sglang.max_running_requests=1")
    gapped = conversation(small.base_url, segments)
    gapped["tenants"] = tenant_cache_hits(small.base_url, random.Random(5))
    metrics = httpx.get(small.base_url + "/metrics", timeout=30).text
    log = small.log_text()
    small.stop()
    hosted = start_server("model.dtype=float32", "+cache=penelope", f"sglang.max_total_tokens={POOL}",
                          "sglang.max_running_requests=1", "cache.host_tier_tokens=4096")
    restored = conversation(hosted.base_url, segments)
    restored["tenants"] = tenant_cache_hits(hosted.base_url, random.Random(6))
    host_metrics = httpx.get(hosted.base_url + "/metrics", timeout=30).text
    host_log = hosted.log_text()
    hosted.stop()
    whole = conversation(stock_server.base_url, segments)  # NOTE: its 16k pool never evicts here
    whole["tenants"] = tenant_cache_hits(stock_server.base_url, random.Random(7))
    return {"gapped": gapped, "whole": whole, "log": log, "metrics": metrics,
            "restored": restored, "host_log": host_log, "host_metrics": host_metrics}


def test_front_eviction_recomputes_exactly_the_gap_and_reuses_the_tail(runs, segments):
    shared, n_t1 = segments["shared"], len(segments["t1"])
    gap = n_t1 - shared  # A's first prompt after the shared system part: its oldest private block
    recomputes = re.findall(r"gap recompute rid=\S+ positions=\[(\d+), (\d+)\) recomputed_tokens=(\d+)", runs["log"])
    # Penelope freed the front of A's private history and nothing after it: the
    # only recompute is that gap, at its original positions.
    assert recomputes == [(str(shared), str(n_t1), str(gap))]
    gapped = runs["gapped"]
    # everything cached but the gap: the tree holds A's turn-2 prompt and answer
    # (minus the last answer token, never fed back) and the recompute filled the gap
    assert gapped["cached3"] == len(gapped["t2"]) + len(gapped["a2"]) - 1 - gap
    assert re.search(rf"switchboard_gap_recomputed_tokens(_total)? {float(gap)}", runs["metrics"]), \
        [line for line in runs["metrics"].splitlines() if "switchboard" in line]
    # control: on stock SGLang with a pool that never evicts, turn 3 hits everything
    assert runs["whole"]["cached3"] == len(gapped["t2"]) + len(gapped["a2"]) - 1


def test_shared_system_prompt_survives_the_eviction(runs, segments):
    assert runs["gapped"]["b_cached"] == segments["shared"]  # B reused A's system prompt
    assert runs["gapped"]["cached3"] >= segments["shared"]   # and it was still there for turn 3


def test_turns_after_the_gap_equal_an_unevicted_server_and_hf(runs, hf, tok):
    gapped, whole = runs["gapped"], runs["whole"]
    assert gapped["t3"] == whole["t3"]  # turns 1 and 2 agreed, so turn 3's prompt is the same
    assert gapped["a3"] == whole["a3"]
    assert "chess" in tok.decode(gapped["t3"]) and len(set(gapped["a3"])) > 4  # a real answer, not a loop
    assert hf.greedy_ids(gapped["t3"], OUT) == gapped["a3"]  # NOTE: the server ran with ignore_eos


def test_a_host_tier_restores_the_gap_instead_of_recomputing_it(runs, segments):
    shared, n_t1 = segments["shared"], len(segments["t1"])
    gap = n_t1 - shared
    restores = re.findall(r"host restore rid=\S+ positions=\[(\d+), (\d+)\) restored_tokens=(\d+)",
                          runs["host_log"])
    assert restores == [(str(shared), str(n_t1), str(gap))]
    assert "gap recompute" not in runs["host_log"]
    restored, whole = runs["restored"], runs["whole"]
    # the whole history counts as cached: the gap came back from host memory
    assert restored["cached3"] == whole["cached3"] == len(restored["t2"]) + len(restored["a2"]) - 1
    assert re.search(rf"switchboard_host_restored_tokens(_total)? {float(gap)}", runs["host_metrics"]), \
        [line for line in runs["host_metrics"].splitlines() if "switchboard" in line]
    assert restored["t3"] == whole["t3"] and restored["a3"] == whole["a3"]  # = HF's (test above)


def test_tenants_share_nothing_in_the_gap_cache_its_host_tier_and_stock(runs):
    """SGLang's ``cache_salt`` partitions the gap cache (with and without a host tier) as it does
    SGLang's own radix cache (the stock server): a tenant's repeat hits, another tenant's does not."""
    for run in ("gapped", "restored", "whole"):
        assert_tenants_share_nothing(runs[run]["tenants"])
