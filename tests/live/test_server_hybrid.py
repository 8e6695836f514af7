"""A hybrid (recurrent) model live: ``model=lfm2_tiny`` (short convolutions + attention) on the CPU server.

SGLang's greedy answers equal HF transformers' (float32); with ``+decisions=flide``
each packed question restarts its convolutions from the state at the context's
end, so its label distribution equals HF on the question's full prompt (within
1e-5) and equals the stock route on the same prompt (a one-question request).
"""

from __future__ import annotations

import httpx
import pytest

from tests.live.test_server_decisions import INPUT, QUESTIONS, check_answers, decide, prefill_batches, stock_answers

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def server(start_server):
    server = start_server("model=lfm2_tiny", "sglang.sleep_on_idle=true", "+decisions=flide")
    yield server
    server.stop()


def test_greedy_text_equals_hf(server, lfm2_hf):
    messages = [{"role": "user", "content": "Name three primary colors."}]
    r = httpx.post(server.base_url + "/v1/chat/completions", timeout=600, json={
        "model": "default", "messages": messages, "max_tokens": 16, "temperature": 0})
    assert r.status_code == 200, r.text
    body = r.json()
    text, n_prompt, n_new = lfm2_hf.greedy(messages, 16)
    assert (body["choices"][0]["message"]["content"], body["usage"]["prompt_tokens"],
            body["usage"]["completion_tokens"]) == (text, n_prompt, n_new)


def test_packed_questions_restart_from_the_context_and_equal_hf_and_stock(server, lfm2_hf):
    since = len(server.log_path.read_text())
    r = decide(server.base_url, INPUT, QUESTIONS)
    assert r.status_code == 200, r.text
    batches = prefill_batches(server, since)
    assert [seqs for seqs, _, _ in batches] == [1], batches  # one packed sequence
    check_answers(r.json()["answers"], stock_answers(server.base_url, INPUT, QUESTIONS), lfm2_hf)
