"""max_queue admission in the live CPU server: 429 + Retry-After, nothing lost or hung;
fuzzed bad input gets a 4xx, never a 500 or a dead server; then a SIGTERM shutdown within a
short ``server.shutdown_grace_s`` with no orphans."""

from __future__ import annotations

import random
import signal
import threading

import httpx
import openai
import pytest

from bench.live.chat import client, loads, wait_for
from bench.live.fuzz import fuzz
from tests.live.conftest import module_server
from tests.live.harness import assert_stops_within_grace, unique_prompt

pytestmark = pytest.mark.server

#: ``server.shutdown_grace_s``: shorter than SGLang's own exit on SIGTERM (its watchdog looks every
#: 5 s, then stops the schedulers), so the stop is bounded by the supervisor's SIGKILL at the grace.
GRACE_S = 1.0

server = module_server("model.dtype=float32", "+admission=max_queue", "admission.max_waiting=2",
                       "admission.retry_after_s=2", "sglang.max_running_requests=1",
                       f"server.shutdown_grace_s={GRACE_S:g}")


def chat_body(content: str, max_tokens: int, **extra) -> dict:
    return {"model": "default", "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens, "temperature": 0, **extra}


def test_past_max_waiting_requests_get_429_with_retry_after_and_admitted_ones_finish(server):
    rng = random.Random(3)
    url = server.base_url + "/v1/chat/completions"
    results: dict[str, httpx.Response] = {}

    def post(name: str, body: dict) -> None:
        results[name] = httpx.post(url, json=body, timeout=600)

    admitted = [threading.Thread(target=post, args=("blocker", chat_body("Count to fifty.", 120, ignore_eos=True)))]
    admitted[0].start()
    wait_for(lambda: loads(server.base_url)["num_running_reqs"] == 1, what="blocker running")
    for i in (1, 2):
        t = threading.Thread(target=post, args=(f"queued{i}", chat_body(unique_prompt(rng, 5), 4)))
        t.start()
        admitted.append(t)
        wait_for(lambda i=i: loads(server.base_url)["num_waiting_reqs"] == i, what=f"queued{i} waiting")

    # Plain HTTP, non-streaming: a real 429 with Retry-After.
    r = httpx.post(url, json=chat_body("one too many", 4), timeout=60)
    assert r.status_code == 429
    assert r.headers["retry-after"] == "2"
    assert "max_waiting=2" in r.json()["message"]

    # The real openai client (retries off), streaming and not: RateLimitError with the header.
    c = client(server.base_url, max_retries=0, timeout=60)
    for stream in (False, True):
        with pytest.raises(openai.RateLimitError) as err:
            resp = c.chat.completions.create(model="default", messages=[{"role": "user", "content": "hi"}],
                                             max_tokens=4, stream=stream)
            if stream:
                list(resp)
        assert err.value.response.headers["retry-after"] == "2"

    for t in admitted:
        t.join(timeout=600)
        assert not t.is_alive(), "an admitted request hung"
    assert {n: r.status_code for n, r in results.items()} == {"blocker": 200, "queued1": 200, "queued2": 200}
    assert all(r.json()["choices"][0]["message"]["content"] for r in results.values())
    load = loads(server.base_url)
    assert load["num_waiting_reqs"] == 0 and load["num_running_reqs"] == 0


#: The fuzzer's seed and case count in the suite (``bench.scripts.reliability`` runs more seeds).
FUZZ_SEED, FUZZ_CASES = 31, 150

#: Requests that took SGLang 0.5.23 down (a dead scheduler, an OOM-killed server) or answered
#: 500 before the guards (found by the fuzzer: seed 1, seed 31 to case 400).
CRASHERS = [
    ("/v1/completions", {"model": "default", "prompt": [0, -1], "max_tokens": 2}, "token id -1"),
    ("/v1/completions", {"model": "default", "prompt": "hi", "max_tokens": 2, "n": 2 ** 31}, "more than 128"),
    ("/generate", {"input_ids": [1, 49152], "sampling_params": {"max_new_tokens": 2}}, "token id 49152"),
    ("/generate", {"text": "hi", "session_params": {"a": 1}}, "invalid session_params"),
    ("/generate", {"text": "hi", "sampling_params": []}, "sampling_params is an empty list"),
    ("/v1/chat/completions", "text", "invalid request body"),
    ("/v1/chat/completions", {"model": "default", "messages": [{"role": "user", "content": "hi"}],
                              "response_format": [1, 2]}, "invalid request body"),
]


def test_fuzzed_requests_get_a_clear_4xx_never_a_500_and_the_server_stays_healthy(server):
    def healthy() -> bool:
        return httpx.get(server.base_url + "/health", timeout=60).status_code == 200

    for path, body, message in CRASHERS:
        r = httpx.post(server.base_url + path, json=body, timeout=60)
        assert r.status_code == 400 and message in r.text, (path, body, r.status_code, r.text[:300])
        assert healthy(), (path, body)
    bad = fuzz(server.base_url, FUZZ_SEED, FUZZ_CASES, healthy)
    assert not bad, [(o.case.index, o.case.endpoint, o.case.what, o.status, o.detail) for o in bad]
    load = loads(server.base_url)
    assert load["num_waiting_reqs"] == 0 and load["num_running_reqs"] == 0


def test_sigterm_stops_every_sglang_process_within_the_shutdown_grace(server):
    assert_stops_within_grace(server, signal.SIGTERM, GRACE_S)
