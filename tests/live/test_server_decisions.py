"""``+decisions=flide`` live: SGLang's ``/v1/decisions`` answered by packing, on the CPU server.

Each question's label distribution from the packed passes equals HF transformers
on that question's full rendered prompt (float32, ``|Δp| <= 1e-5``) and equals the
stock route on the same prompts (a request of one question is SGLang's own
``_score``, untouched: asked one by one, the questions give the stock answers
without a second server); SGLang's own log shows the packed passes (one
sequence of ``C + Σq`` tokens instead of N prompts); a request larger than one
pass is split, its later passes reading the context from the prefix cache; a
question too long for a pass is a 400.
"""

from __future__ import annotations

import re

import httpx
import pytest

pytestmark = pytest.mark.server

#: A packed sequence must fit one pass: small, so the split path is reached with short inputs.
CHUNK = 768
INPUT = ("Ticket 4411. The customer reports that the mobile app logs them out every few minutes "
         "since the last update. They use Android 14 on a Pixel 8, reinstalled the app twice, "
         "and cleared the cache. Other users on the same plan do not report it. The customer "
         "is polite but says they will cancel the subscription if it is not fixed this week. ")
QUESTIONS = [
    {"type": "yes_no", "id": "urgent", "question": "Is this ticket urgent?"},
    {"type": "choice", "id": "team", "question": "Which team should handle it?",
     "options": [{"name": "billing"}, {"name": "mobile engineering"}, {"name": "sales"}]},
    {"type": "score", "id": "anger", "question": "How angry is the customer?",
     "levels": ["calm", "annoyed", "angry", "furious"]},
    {"type": "yes_no", "id": "refund", "question": "Does the customer ask for a refund?"},
    {"type": "choice", "id": "platform", "question": "Which platform is affected?",
     "options": [{"name": "iOS"}, {"name": "Android"}, {"name": "web"}, {"name": "desktop"}]},
    {"type": "yes_no", "id": "reinstalled", "question": "Did the customer reinstall the app?"},
]


@pytest.fixture(scope="module")
def server(start_server):
    server = start_server("model.dtype=float32", "sglang.sleep_on_idle=true", "+decisions=flide",
                          f"sglang.chunked_prefill_size={CHUNK}")
    yield server
    server.stop()


def decide(base_url: str, text: str, questions: list[dict]) -> httpx.Response:
    return httpx.post(base_url + "/v1/decisions", timeout=600, json={
        "input": text, "questions": questions, "return_prompt_token_ids": True})


def hf_probabilities(hf, prompt_ids: list[int], label_ids: list[int]) -> list[float]:
    torch = hf.torch
    with torch.no_grad():
        logits = hf.model(torch.tensor([prompt_ids])).logits[0, -1]
    return torch.softmax(torch.log_softmax(logits, -1)[label_ids], -1).tolist()


def prefill_batches(server, since: int) -> list[tuple[int, int, int]]:
    """``(new sequences, new tokens, cached tokens)`` of each prefill batch SGLang logged after ``since``."""
    text = server.settled_log_since(since)
    return [tuple(int(x) for x in m.groups()) for m in re.finditer(
        r"Prefill batch[^\n]*#new-seq: (\d+), #new-token: (\d+), #cached-token: (\d+)", text)]


def stock_answers(base_url: str, text: str, questions: list[dict]) -> dict:
    """Each question asked alone: SGLang's own scoring of the same rendered prompt."""
    answers = {}
    for q in questions:
        r = decide(base_url, text, [q])
        assert r.status_code == 200, r.text
        answers.update(r.json()["answers"])
    return answers


def check_answers(got: dict, want: dict, hf) -> None:
    assert got.keys() == want.keys()
    for qid, answer in got.items():
        ref = want[qid]
        assert answer["prompt_token_ids"] == ref["prompt_token_ids"], qid
        assert answer["label_token_ids"] == ref["label_token_ids"], qid
        names = list(answer["probabilities"])
        assert names == list(ref["probabilities"])
        p = [answer["probabilities"][n] for n in names]
        assert p == pytest.approx([ref["probabilities"][n] for n in names], abs=1e-5), qid
        assert p == pytest.approx(hf_probabilities(hf, answer["prompt_token_ids"], answer["label_token_ids"]),
                                  abs=1e-5), qid
        assert answer["label_mass"] == pytest.approx(ref["label_mass"], abs=1e-5), qid


def test_one_packed_pass_answers_as_stock_and_hf(server, hf):
    since = len(server.log_text())
    r = decide(server.base_url, INPUT, QUESTIONS)
    assert r.status_code == 200, r.text
    batches = prefill_batches(server, since)
    got = r.json()
    want = stock_answers(server.base_url, INPUT, QUESTIONS)
    check_answers(got["answers"], want, hf)
    assert got["usage"]["prompt_tokens"] == sum(len(a["prompt_token_ids"]) for a in want.values())
    prompts = [a["prompt_token_ids"] for a in got["answers"].values()]
    shared = next(i for i in range(min(map(len, prompts))) if len({p[i] for p in prompts}) > 1)
    packed = shared + sum(len(p) - shared for p in prompts)
    # NOTE: one sequence of context + every question's suffix, computed once
    assert [(seqs, new + cached) for seqs, new, cached in batches] == [(1, packed)], batches


def test_a_request_larger_than_a_pass_is_split_and_reuses_its_cached_context(server, hf):
    questions = QUESTIONS + [{**q, "id": q["id"] + "2", "question": q["question"] + " Answer carefully."}
                             for q in QUESTIONS] * 2
    questions = [{**q, "id": f"{q['id']}-{i}"} for i, q in enumerate(questions)]
    since = len(server.log_text())
    r = decide(server.base_url, INPUT * 2, questions)
    assert r.status_code == 200, r.text
    batches = prefill_batches(server, since)
    check_answers(r.json()["answers"], stock_answers(server.base_url, INPUT * 2, questions), hf)
    assert len(batches) >= 2 and all(new + cached <= CHUNK for _, new, cached in batches), batches
    assert all(cached > 0 for _, _, cached in batches[1:]), "later passes read the context from the cache"


def test_a_question_that_cannot_fit_a_pass_is_a_400(server):
    r = decide(server.base_url, INPUT * 12, QUESTIONS[:2])
    assert r.status_code == 400, r.text
    assert "chunked_prefill_size" in r.text
