"""LEAP inside the live CPU server.

* Its features exist when a request arrives and equal HF's mean input embedding
  of the prompt; the length head learns from every finished request exactly as
  an offline replay of the feedback log does.
* Its predictions reorder the queue: with one running request, queued requests
  are served in predicted-length order, where SGLang's own ``fcfs`` (the shared
  stock server) serves the same burst in arrival order.
"""

from __future__ import annotations

import json
import threading
import time

import httpx
import numpy as np
import pytest

from bench.leap.prompts import TOPICS
from bench.live.chat import loads, wait_for
from policies.predictors.rls import RlsLengthHead

pytestmark = pytest.mark.server

PROMPTS = ["What is 2+2?", "Write a short poem about the sea.", "List five colors."]
#: Templates whose answers are a word, and ones whose answers are pages.
SHORT = ("Answer yes or no: is {t} older than one hundred years?", "In one word, what color do you associate with {t}?")
LONG = ("Write a detailed essay about the history of {t}.", "Tell a story about a child who discovers {t}.")
#: The burst: long and short interleaved, so arrival order and predicted order differ.
BURST_TOPICS = ("coffee", "whales", "chess", "glaciers", "tea", "trains")
#: The blocker's length: long enough that the whole burst queues behind it.
BLOCKER_TOKENS = 384
#: Every burst request's length (``ignore_eos``): completions one request apart are
#: this many decode steps apart, so a client thread's wake-up delay cannot swap them.
BURST_TOKENS = 32


def burst_prompts() -> list[str]:
    return [(LONG if i % 2 == 0 else SHORT)[i // 2 % 2].format(t=t) for i, t in enumerate(BURST_TOPICS)]


def prompt_ids(hf, text: str):
    tok = hf.tok
    return tok(tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                       tokenize=False), add_special_tokens=False, return_tensors="pt").input_ids


def mean_embedding(hf, text: str) -> np.ndarray:
    import torch

    with torch.no_grad():
        return hf.model.get_input_embeddings()(prompt_ids(hf, text))[0].mean(0).numpy().astype(float)


@pytest.fixture(scope="module")
def head_path(hf, tmp_path_factory):
    """A head that has learned "word" templates answer in 2 tokens and "pages" ones in 200,
    from HF's embeddings of other topics than the burst's (the mechanism under test is the
    ordering; the head's accuracy on real lengths is bench/results/leap.md's)."""
    head = RlsLengthHead(dim=576)
    for t in TOPICS:
        if t in BURST_TOPICS:
            continue
        for template, label in [(s, 2) for s in SHORT] + [(g, 200) for g in LONG]:
            head.update(mean_embedding(hf, template.format(t=t)), label)
    path = tmp_path_factory.mktemp("leap") / "head.npz"
    head.save(path)
    return path


@pytest.fixture(scope="module")
def feedback_log(tmp_path_factory):
    return tmp_path_factory.mktemp("leap") / "feedback.jsonl"


@pytest.fixture(scope="module")
def server(start_server, feedback_log, head_path):
    s = start_server("model.dtype=float32", "+policy=leap", f"server.feedback_log={feedback_log}",
                     f"policy.head_path={head_path}", "sglang.max_running_requests=1")
    yield s
    s.stop()


def chat(base_url: str, text: str, max_tokens: int, **extra) -> httpx.Response:
    return httpx.post(base_url + "/v1/chat/completions", timeout=300, json={
        "model": "default", "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens,
        "temperature": 0, **extra})


def test_features_are_hf_mean_prompt_embedding_and_the_head_learns_online(server, feedback_log, head_path, hf):
    before = len(feedback_log.read_text().splitlines())
    for q in PROMPTS:
        assert chat(server.base_url, q, 24).status_code == 200
    # NOTE: a record is written just after the request's last output is streamed: wait for the last
    wait_for(lambda: len(feedback_log.read_text().splitlines()) >= before + len(PROMPTS), timeout=30,
             what="the prompts' feedback records")
    records = [json.loads(line) for line in feedback_log.read_text().splitlines()]
    ours = [r for r in records if r["num_input_tokens"] > 8][-len(PROMPTS):]  # skip warm-up/health requests
    for q, rec in zip(PROMPTS, ours):
        assert rec["num_input_tokens"] == prompt_ids(hf, q).shape[1]
        np.testing.assert_allclose(rec["features"], mean_embedding(hf, q), atol=1e-5, rtol=1e-4)
    # Every logged prediction is what the saved head, updated on the earlier finished requests
    # in log order, predicts: the server learns online, from each request once.
    replay = RlsLengthHead.load(head_path)
    for rec in records:
        assert rec["features"] is not None  # every request has them, from arrival on
        assert rec["predicted_output_tokens"] == pytest.approx(replay.predict(rec["features"]), rel=1e-6)
        if not rec["aborted"]:
            replay.update(rec["features"], rec["num_output_tokens"])


def serve_burst(base_url: str) -> tuple[list[str], float, float]:
    """A long blocker, then the burst queued behind it one by one; returns the burst's
    prompts in completion order, when the last one was sent and when the blocker ended.

    NOTE: each prompt is sent once the previous one is in SGLang's waiting queue
    (server state, not a sleep): client threads 0.1 s apart swapped places on a
    loaded machine, so the arrival order the FCFS check relies on was not known.
    NOTE: the blocker must outlast queueing six prompts on a loaded 2-core CI
    machine: 96 tokens did not once (the sixth queued 0.07 s after it ended), so
    it may run ``BLOCKER_TOKENS``; once the sixth is queued its client disconnects
    and SGLang aborts it (the burst then starts at once, as after any finish).
    NOTE: completion order is read on the client, so consecutive completions must be
    far apart: at 16 tokens without ``ignore_eos`` a one-word answer finished ~3 decode
    steps after a story, and CI's loaded client once saw them swapped. Every request
    now runs ``BURST_TOKENS`` (the order under test is by *predicted* length)."""
    done: list[tuple[float, str]] = []
    lock = threading.Lock()
    blocker_end: list[float] = []
    release = threading.Event()

    def blocker() -> None:
        with httpx.stream("POST", base_url + "/v1/chat/completions", timeout=300, json={
                "model": "default", "messages": [{"role": "user", "content": "Write a detailed essay about the history of jazz."}],
                "max_tokens": BLOCKER_TOKENS, "temperature": 0, "ignore_eos": True, "stream": True}) as r:
            r.raise_for_status()
            for _ in r.iter_lines():
                if release.is_set():
                    break  # NOTE: closing the stream is the disconnect SGLang aborts on
        blocker_end.append(time.monotonic())

    def one(text: str) -> None:
        chat(base_url, text, BURST_TOKENS, ignore_eos=True).raise_for_status()
        with lock:
            done.append((time.monotonic(), text))

    threads = [threading.Thread(target=blocker)]
    threads[0].start()
    wait_for(lambda: loads(base_url)["num_running_reqs"] == 1, what="blocker running")
    for i, text in enumerate(burst_prompts(), start=1):
        threads.append(threading.Thread(target=one, args=(text,)))
        threads[-1].start()
        wait_for(lambda i=i: bool(blocker_end) or loads(base_url)["num_waiting_reqs"] == i, what=f"prompt {i} queued")
    last_sent = time.monotonic()
    release.set()
    for t in threads:
        t.join()
    return [text for _, text in sorted(done)], last_sent, blocker_end[0]


def test_leap_serves_the_queue_in_predicted_order_where_fcfs_keeps_arrival_order(server, stock_server, head_path, hf):
    head = RlsLengthHead.load(head_path)
    predicted = {q: head.predict(mean_embedding(hf, q)) for q in burst_prompts()}
    short = {q for q in predicted if predicted[q] < 20}
    assert len(short) == 3 and all(predicted[q] > 100 for q in set(predicted) - short)

    leap_order, last_sent, blocker_end = serve_burst(server.base_url)
    assert last_sent < blocker_end, "the burst must queue behind the blocker"
    assert set(leap_order[:3]) == short, f"LEAP served {leap_order}; predictions {predicted}"
    assert leap_order != burst_prompts()

    fcfs_order, last_sent, blocker_end = serve_burst(stock_server.base_url)
    assert last_sent < blocker_end
    assert fcfs_order == burst_prompts()
