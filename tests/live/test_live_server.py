"""Live replay against the real CPU server: ~12 requests through SGLang's bench_serving."""

from __future__ import annotations

import httpx
import pytest

from bench.live.replay import LiveReplayError, replay_live
from bench.schema import LiveApi, LiveConfig
from tests.sim.helpers import req, trace_of

pytestmark = pytest.mark.server

VOCAB = 49152


@pytest.fixture(scope="module")
def server(stock_server):
    return stock_server


def test_replay_measures_the_real_server_and_its_prefix_cache(server):
    # three sessions of closed-loop turns whose prompts extend the previous turn's
    # blocks, plus open-loop requests sharing a 2-block system prompt
    reqs = [req("sys-0", 0.0, 40, 6, blocks=[1, 2, 3])]
    reqs += [req(f"sys-{i}", 0.6 * i, 40, 6, blocks=[1, 2, 10 + i]) for i in range(1, 5)]
    for s in range(3):
        base = 100 * (s + 1)
        reqs.append(req(f"s{s}-0", 0.1 + 0.3 * s, 33, 5, blocks=[base, base + 1, base + 2], session_id=f"s{s}"))
        reqs.append(req(f"s{s}-1", 0.0, 70, 5, blocks=[base, base + 1, base + 2, base + 3, base + 4],
                        session_id=f"s{s}", after=f"s{s}-0", delay_s=0.2))
    trace = trace_of(reqs, block_size=16)
    run = replay_live(trace, LiveConfig(endpoint=server.base_url, api=LiveApi.generate), VOCAB)
    recs = {r.rid: r for r in run.records}
    assert all(r.status == "finished" for r in recs.values()), [r.reason for r in recs.values()]
    for r in recs.values():
        assert r.output_tokens == next(t.output_tokens for t in reqs if t.rid == r.rid)
        assert 0 < r.ttft < 30 and r.finish_s >= r.first_token_s
    # NOTE: radix matches are token-exact: at least the shared blocks, and a
    # fresh block's first token matches by chance with probability ~1/49135.
    assert recs["sys-0"].cached_tokens == 0
    assert all(32 <= recs[f"sys-{i}"].cached_tokens < 34 for i in range(1, 5))
    for s in range(3):
        assert 33 <= recs[f"s{s}-1"].cached_tokens < 50  # its predecessor's prompt (+ no output)
        assert recs[f"s{s}-1"].arrival_s >= recs[f"s{s}-0"].finish_s + 0.2
    assert run.meta["cache_flushed"] and run.meta["loads_error"] is None


def test_completions_api_replays_token_id_prompts(server):
    trace = trace_of([req(f"c{i}", 0.1 * i, 24, 4) for i in range(3)])
    run = replay_live(trace, LiveConfig(endpoint=server.base_url, warmup_requests=0), VOCAB)
    assert [r.status for r in run.records] == ["finished"] * 3
    assert all(r.cached_tokens is None and r.output_tokens == 4 for r in run.records)
    # NOTE: one time per streamed chunk; under CPU load SGLang can stream two tokens
    # in one completions chunk (bench_serving splits only generate's chunks)
    assert all(1 <= len(r.token_times) <= 4 for r in run.records)


def test_a_vocabulary_the_server_lacks_is_refused_before_it_can_crash_it(server):
    trace = trace_of([req("v", 0.0, 24, 2)])
    with pytest.raises(LiveReplayError, match="token id 59999 is not in the vocabulary"):
        replay_live(trace, LiveConfig(endpoint=server.base_url), 60000)
    assert httpx.get(server.base_url + "/health", timeout=10).status_code == 200
