"""Basin in the live CPU server: a 50-session burst, then 100 clients that hang up mid-stream.
Nothing crashes or hangs, admitted sessions finish every turn, held ones are served later
or refused with 429 + Retry-After; at least ``MIN_SERVED`` disconnecting clients are served before they
hang up, SGLang counts their aborts, and afterwards it holds no KV slot (no leak). Last, the
scheduler is SIGKILLed: the unit exits non-zero and leaves no process behind (the short version
of ``bench.scripts.reliability``'s kill row)."""

from __future__ import annotations

import asyncio
import json
import random
import time

import httpx
import pytest

from bench.live.chat import metric_total, wait_for
from bench.live.faults import kill_scheduler, kv_idle
from tests.live.conftest import module_server
from tests.live.harness import unique_prompt

pytestmark = pytest.mark.server

server = module_server("model.dtype=float32", "+admission=basin", "sglang.max_total_tokens=2048",
                       "admission.idle_timeout_s=3", "admission.max_wait_s=40", "admission.retry_after_s=2")

TURNS = 3


async def session(client: httpx.AsyncClient, sid: str, rng: random.Random, log: dict) -> None:
    history: list[dict] = []
    for turn in range(TURNS):
        history.append({"role": "user", "content": unique_prompt(rng, 12)})
        r = await client.post("/v1/chat/completions", headers={"X-Session-Id": sid}, json={
            "model": "default", "messages": history, "max_tokens": 12, "temperature": 0})
        if r.status_code == 429:
            assert turn == 0, f"{sid}: an admitted session was refused at turn {turn}"
            assert r.headers["retry-after"] == "2"
            log["refused"].append(sid)
            return
        assert r.status_code == 200, r.text
        history.append({"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]})
    log["completed"].append(sid)


def test_burst_of_sessions_completes_or_is_refused_and_leaks_nothing(server):
    rng = random.Random(6)
    log: dict[str, list] = {"completed": [], "refused": []}

    async def burst():
        async with httpx.AsyncClient(base_url=server.base_url, timeout=300) as client:
            await asyncio.gather(*(session(client, f"s{i}", rng, log) for i in range(50)))

    asyncio.run(asyncio.wait_for(burst(), timeout=600))
    assert len(log["completed"]) + len(log["refused"]) == 50
    assert len(log["completed"]) >= 5, log  # sessions were admitted and finished all turns
    held, later, rejected = (metric_total(server.base_url, f"switchboard_admission_{name}_total")
                             for name in ("deferred", "admitted_after_deferral", "rejected"))
    counts = f"{len(log['completed'])} completed, {len(log['refused'])} refused; held {held:g}, " \
             f"admitted later {later:g}, rejected {rejected:g}"
    # every 429 a client saw is one the gate counted, and it was refused only after being held
    # (max_held is far above 50): each held first turn ended admitted later or refused
    assert rejected == len(log["refused"]) and held == later + rejected, counts
    assert held > 0 and later > 0, counts  # the budget bound, and held sessions were served later
    assert httpx.get(server.base_url + "/health", timeout=10).status_code == 200
    wait_for(lambda: kv_idle(server.base_url), timeout=60, what="every KV slot free")


#: SGLang's counter of client aborts (``TokenizerManager.abort_request``: a client that hangs up).
ABORTED = "sglang:num_aborted_requests_total"
CLIENTS = 100
#: Served clients the disconnect test needs. NOTE: certain, not hoped for: Basin admits a new session
#: whenever none is admitted (no deadlock) and holds the others up to ``max_wait_s`` = 40 s; every
#: served client hangs up after its first chunk, SGLang aborts it (at most ~2 s later: its abort
#: task) and the abort ends that one-request session, admitting the next in line. One admission
#: per cycle of prefill + abort (< 4 s even on 2 busy cores) serves 10 within the 40 s. (Seen in
#: December: all 100 served in 17 s, 100 aborts counted.)
MIN_SERVED = 10


def test_clients_that_disconnect_mid_stream_free_their_kv(server):
    rng = random.Random(7)
    served: list[int] = []     # got their first chunk (sent once prefill produced a token), then hung up
    refused: list[int] = []    # held past max_wait_s: 429 + Retry-After, nothing allocated
    other: list[tuple] = []    # anything else is a failure
    aborted_before = metric_total(server.base_url, ABORTED)

    async def hang_up(client: httpx.AsyncClient, i: int) -> None:
        body = {"model": "default", "stream": True, "max_tokens": 200, "ignore_eos": True,
                "messages": [{"role": "user", "content": unique_prompt(rng, 10)}]}
        async with client.stream("POST", "/v1/chat/completions", json=body) as r:
            if r.status_code == 429:
                if r.headers.get("retry-after") != "2":
                    other.append((i, "Retry-After", r.headers.get("retry-after")))
                refused.append(i)
                return
            if r.status_code != 200:
                other.append((i, r.status_code, (await r.aread())[:300]))
                return
            async for line in r.aiter_lines():
                if line.startswith("data:"):
                    chunk = json.loads(line[len("data:"):])
                    if chunk.get("choices"):
                        served.append(i)
                    else:
                        other.append((i, chunk))
                    break  # the first chunk, then the client is gone

    async def crowd():
        async with httpx.AsyncClient(base_url=server.base_url, timeout=300) as client:
            await asyncio.gather(*(hang_up(client, i) for i in range(CLIENTS)))

    t0 = time.monotonic()
    asyncio.run(asyncio.wait_for(crowd(), timeout=600))
    counts = (f"{len(served)} served then hung up, {len(refused)} refused, {len(other)} other of {CLIENTS} "
              f"in {time.monotonic() - t0:.0f}s")
    assert other == [], f"{counts}: {other[:5]}"
    assert len(served) + len(refused) == CLIENTS, counts
    assert len(served) >= MIN_SERVED, f"{counts}: expected at least {MIN_SERVED} served before hanging up"
    wait_for(lambda: kv_idle(server.base_url), timeout=120, what=f"every KV slot free after {counts}")
    aborted = metric_total(server.base_url, ABORTED) - aborted_before
    assert aborted >= len(served), f"{counts}, but SGLang counted only {aborted:g} client aborts ({ABORTED})"
    assert httpx.get(server.base_url + "/health", timeout=10).status_code == 200


def test_a_killed_scheduler_ends_the_unit_nonzero_and_leaves_no_process(server):
    """Last in the module: it kills the server. SGLang's launcher sees its scheduler die and
    kills its own process tree; the supervisor exits with its status. In-flight clients lose
    their connection (an error, not a hang)."""
    result = kill_scheduler(server, exit_timeout_s=60)
    assert result["killed"], "no sglang::scheduler process under the unit"
    assert result["exit_code"] not in (None, 0), result
    assert result["exit_s"] < 30, result
    assert result["orphans"] == [], result
    assert "hung" not in result["in_flight"] and sum(result["in_flight"].values()) == 4, result
