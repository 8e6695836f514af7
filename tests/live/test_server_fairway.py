"""Fairway inside the live CPU server: the order its rules imply, cap case included."""

from __future__ import annotations

import httpx
import pytest

from policies.scheduling import QueueView
from policies.scheduling.fairway import FairwayPolicy
from policies.views import RequestView
from tests.live.conftest import module_server
from tests.live.harness import QueueExperiment
from tests.sim.fake_server import common_prefix as lcp

pytestmark = pytest.mark.server

CAP_RATIO = 0.3
server = module_server("model.dtype=float32", "+policy=fairway", "policy.queue_threshold=0",
                       "policy.aging_weight=1.0",
                       f"policy.cap_ratio={CAP_RATIO}", "policy.cap_floor_tokens=0",
                       "sglang.max_running_requests=1")

SHARED = ("Here is a long shared document about rivers, mountains, forests and the cities "
          "that grew beside them over many centuries of trade, farming and travel. ") * 6
PROMPTS = {
    "A_uncached_long": "Tell me everything about the history of glassmaking, from sand and fire "
                       "to lenses, windows, bottles, mirrors, fibre optics and phone screens. " * 3,
    "B_cached": SHARED + "Summarize it.",
    "C_cached": SHARED + "Name one river.",
    "D_cached": SHARED + "Which city is oldest?",
    "E_uncached_short": "Say hello politely.",
}


def expected_order(tokenize, warm_ids: list[int]) -> list[str]:
    """Replay the server's passes with the pure policy on the real token counts."""
    ids = {name: tokenize(text) for name, text in PROMPTS.items()}
    cache = [warm_ids]
    policy = FairwayPolicy(queue_threshold=0, aging_weight=1.0, cap_ratio=CAP_RATIO, cap_floor_tokens=0)
    waiting = list(PROMPTS)
    clock, order = 0, []
    while waiting:
        views = tuple(RequestView(rid=n, arrival_seq=list(PROMPTS).index(n), arrival_time=0.0,
                                  num_input_tokens=len(ids[n]),
                                  num_cached_tokens=max(lcp(ids[n], c) for c in cache))
                      for n in waiting)
        first = policy.order(QueueView(views, processed_tokens=clock)).order[0]
        view = next(v for v in views if v.rid == first)
        clock += view.num_uncached_tokens
        cache.append(ids[first])
        waiting.remove(first)
        order.append(first)
    return order


def test_live_order_is_the_one_fairways_rules_imply(server, checkpoint):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(checkpoint)

    def tokenize(text: str) -> list[int]:
        rendered = tok.apply_chat_template([{"role": "user", "content": text}],
                                           add_generation_prompt=True, tokenize=False)
        return tok(rendered, add_special_tokens=False).input_ids

    warm = SHARED + "Thanks."
    r = httpx.post(server.base_url + "/v1/chat/completions", timeout=300, json={
        "model": "default", "messages": [{"role": "user", "content": warm}], "max_tokens": 1})
    assert r.status_code == 200
    expected = expected_order(tokenize, tokenize(warm))
    # The cap case happens: a cheap request passes A, then the cap puts A before a cheap one.
    a = expected.index("A_uncached_long")
    assert 0 < a < len(expected) - 1 and expected[-1] != "A_uncached_long"
    assert QueueExperiment(server.base_url).run(PROMPTS) == expected
