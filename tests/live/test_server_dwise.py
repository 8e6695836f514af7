"""DWISE inside the live CPU server, on the tiny random diffusion LM (``model=sdar_tiny``).

With random weights every generation block of k masks takes exactly k + 1
rounds (docs/dwise-notes.md §3.1), so each request's rounds are known from its
prompt and ``max_new_tokens``, and completion orders can be asserted exactly:

* DWISE (every request holds a slot, two blocks a round) serves the least work
  first; stock SGLang at the same round capacity (``max_running_requests=2``)
  admits in arrival order and runs what it admitted to the end. Both finish
  in the order of their simulator twins (``bench/sim/dllm``) on the same
  recorded requests.
* Every request's greedy output is the same with and without DWISE.
* Prompt and denoising blocks share rounds; a long request is never passed
  over more than the aging bound under a stream of short ones.
Server-side order and counts come from each server's feedback log (one record
per finished request, in finishing order).
"""

from __future__ import annotations

import json
import math
import threading
import time

import httpx
import pytest

from bench.live.chat import wait_for
from bench.sim.dllm import DllmParams, DllmSimulator, LinearRoundCost, TinyLive, tiny_live_rounds
from policies.scheduling.dwise import DwisePolicy
from tests.sim.helpers import req as sim_req
from tests.sim.helpers import trace_of

pytestmark = pytest.mark.server

B = 4  # SGLang's SDAR block size
SLOTS, ROUND_BLOCKS, MAX_WAIT = 8, 2, 6
#: (prompt, max_new_tokens); prompts under one block start denoising at once.
BURST = [("Tell me a long story.", 48), ("Hi", 4), ("Count to three.", 24), ("Why?", 8),
         ("Name a color.", 16), ("Ok", 12)]


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    root = tmp_path_factory.mktemp("dwise")
    return root / "dwise.jsonl", root / "stock.jsonl"


@pytest.fixture(scope="module")
def dwise(start_server, logs):
    s = start_server("model=sdar_tiny", "+policy=dwise", f"policy.slots={SLOTS}",
                     f"policy.round_blocks={ROUND_BLOCKS}", f"policy.max_wait_rounds={MAX_WAIT}",
                     "policy.online=false", f"server.feedback_log={logs[0]}", "sglang.sleep_on_idle=true")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def stock(start_server, logs):
    s = start_server("model=sdar_tiny", f"sglang.max_running_requests={ROUND_BLOCKS}",
                     f"server.feedback_log={logs[1]}", "sglang.sleep_on_idle=true")
    yield s
    s.stop()


def generate(base_url: str, batch: list[tuple[str, int]]) -> list[dict]:
    """One ``/generate`` call for the whole batch: SGLang queues it in list order."""
    r = httpx.post(base_url + "/generate", timeout=600, json={
        "text": [p for p, _ in batch],
        "sampling_params": [{"max_new_tokens": n, "temperature": 0, "ignore_eos": True} for _, n in batch]})
    r.raise_for_status()
    return r.json()


def finished(log, rids) -> list[dict]:
    """The feedback records of ``rids``, in the order the server finished them.

    NOTE: the scheduler writes a record just after it streams the request's last output, so a
    client can hold its answer before the record is on disk: wait (briefly) for every one."""
    wanted = set(rids)

    def records() -> list[dict]:
        return [r for r in map(json.loads, log.read_text().splitlines()) if r["rid"] in wanted]

    wait_for(lambda: len(records()) == len(wanted), timeout=30, what=f"{len(wanted)} feedback records")
    return records()


def twin_finish_rounds(prompt_tokens: list[int], policy, slots: int) -> list[int]:
    """Each request's finishing round in the simulator's twin (``bench/sim/dllm``):
    the same requests arriving together in list order, the tiny model's rounds."""
    trace = trace_of([sim_req(str(i), 0.0, p, n) for i, (p, (_, n)) in enumerate(zip(prompt_tokens, BURST))])
    sim = DllmSimulator(trace, DllmParams(B, slots, ROUND_BLOCKS, TinyLive(), LinearRoundCost()), policy)
    sim.run()
    return [sim.requests[str(i)].finish_round for i in range(len(BURST))]


def agrees(order: list[int], finish_round: list[int]) -> bool:
    """The server finished the requests in the twin's order (ties either way)."""
    return all(finish_round[a] <= finish_round[b] for a, b in zip(order, order[1:]))


def test_dwise_serves_least_work_first_and_stock_keeps_arrival_order(dwise, stock, logs):
    out_d = generate(dwise.base_url, BURST)
    out_s = generate(stock.base_url, BURST)
    rid_d = [o["meta_info"]["id"] for o in out_d]
    rid_s = [o["meta_info"]["id"] for o in out_s]
    recs_d, recs_s = finished(logs[0], rid_d), finished(logs[1], rid_s)
    prompt = [r["num_input_tokens"] for r in sorted(recs_d, key=lambda r: rid_d.index(r["rid"]))]
    size = [tiny_live_rounds(p, n, B) for p, (_, n) in zip(prompt, BURST)]
    assert sorted(set(size)) == sorted(size), f"rounds must differ to order them: {size}"
    order_d = [rid_d.index(r["rid"]) for r in recs_d]
    order_s = [rid_s.index(r["rid"]) for r in recs_s]
    # DWISE: least work first. Its estimates (online=false: the prior, capped by what
    # max_new_tokens allows) rank by block counts, so requests within a block of each
    # other may tie; the shortest finishes first, the longest last.
    assert order_d[0] == size.index(min(size)) and order_d[-1] == size.index(max(size)), (order_d, size)
    # Both orders are the simulator twins': SGLang's own dLLM scheduling and DWISE's walk
    dwise_twin = DwisePolicy(slots=SLOTS, round_blocks=ROUND_BLOCKS, max_wait_rounds=MAX_WAIT, online=False)
    assert agrees(order_d, twin_finish_rounds(prompt, dwise_twin, SLOTS)), order_d
    stock_rounds = twin_finish_rounds(prompt, None, ROUND_BLOCKS)
    assert agrees(order_s, stock_rounds), (order_s, stock_rounds)
    assert order_s != order_d
    for rec, i in zip(recs_d, order_d):  # DWISE's host counted every round of every request
        assert rec["dllm"]["rounds_run"] == size[i]
    # Ordering never changes results: the same tokens for every request.
    for a, b in zip(out_d, out_s):
        assert a["output_ids"] == b["output_ids"] and a["text"] == b["text"]
        assert len(a["output_ids"]) == a["meta_info"]["completion_tokens"]


def test_prompt_and_denoising_blocks_share_rounds(dwise, logs):
    long_prompt = " ".join(["word"] * 60)
    out = generate(dwise.base_url, [("Hi", 32), (long_prompt, 8), ("Why?", 32)])
    recs = finished(logs[0], [o["meta_info"]["id"] for o in out])
    assert len(recs) == 3
    assert all(r["dllm"]["shared_rounds"] > 0 for r in recs), [r["dllm"] for r in recs]


def test_nothing_starves_under_a_stream_of_short_requests(dwise, logs):
    long_out: list[dict] = []
    worker = threading.Thread(target=lambda: long_out.extend(generate(dwise.base_url, [("Write an essay.", 64)])))
    worker.start()
    short_rids: list[str] = []
    deadline = time.monotonic() + 240
    while worker.is_alive() and time.monotonic() < deadline:  # shorts keep every slot busy
        short_rids += [o["meta_info"]["id"] for o in generate(dwise.base_url, [("Hi", 4)] * (SLOTS - 1))]
    worker.join(timeout=60)
    assert long_out, "the long request did not finish while short ones kept arriving"
    rec = finished(logs[0], [long_out[0]["meta_info"]["id"]])[0]["dllm"]
    shorts = finished(logs[0], short_rids)
    # NOTE: the stream's thickness is judged by its effect (the long request waited MAX_WAIT rounds
    # behind shorts, below), not by a count: how many shorts fit beside a 64-token request depends
    # on the machine's load (a full suite once failed at 14 of the former 2 * SLOTS = 16)
    assert len(shorts) >= SLOTS, "the stream was too thin to test anything"
    # NOTE: policies/scheduling/dwise.py's bound, once the request holds a slot
    assert rec["longest_wait"] <= MAX_WAIT + math.ceil(SLOTS / ROUND_BLOCKS), rec
    assert rec["longest_wait"] >= MAX_WAIT, "shorts never outranked it: no starvation pressure"
