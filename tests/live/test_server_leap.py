"""LEAP inside the live CPU server: the captured prefill hidden state is exactly HF's, and
the length head learns from every finished request (feedback log)."""

from __future__ import annotations

import json

import httpx
import pytest

pytestmark = pytest.mark.server

PROMPTS = ["What is 2+2?", "Write a short poem about the sea.", "List five colors."]


@pytest.fixture(scope="module")
def feedback_log(tmp_path_factory):
    return tmp_path_factory.mktemp("leap") / "feedback.jsonl"


@pytest.fixture(scope="module")
def server(start_server, feedback_log):
    s = start_server("model.dtype=float32", "+policy=leap", f"server.feedback_log={feedback_log}")
    yield s
    s.stop()


def test_captured_features_equal_hf_hidden_state_and_the_head_learns(server, feedback_log, hf):
    import torch

    for q in PROMPTS:
        r = httpx.post(server.base_url + "/v1/chat/completions", timeout=300, json={
            "model": "default", "messages": [{"role": "user", "content": q}], "max_tokens": 24, "temperature": 0})
        assert r.status_code == 200
    records = [json.loads(line) for line in feedback_log.read_text().splitlines()]
    ours = [r for r in records if r["num_input_tokens"] > 8][-len(PROMPTS):]  # skip warm-up/health requests
    tok, model = hf.tok, hf.model
    for q, rec in zip(PROMPTS, ours):
        ids = tok(tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                          tokenize=False), add_special_tokens=False, return_tensors="pt").input_ids
        assert rec["num_input_tokens"] == ids.shape[1]
        with torch.no_grad():
            hidden = model(ids, output_hidden_states=True).hidden_states[15][0, -1]
        assert torch.allclose(torch.tensor(rec["features"]), hidden, atol=1e-3, rtol=1e-4)
    predictions = [r["predicted_output_tokens"] for r in records]
    assert predictions[0] == pytest.approx(64.0)  # prior, before any update
    assert len(set(round(p, 6) for p in predictions)) == len(predictions)  # it learned each time
