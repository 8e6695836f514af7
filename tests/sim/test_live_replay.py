"""Live replay end to end through SGLang's bench_serving, against an in-process fake server."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.config import compose_bench, resolve_bench
from bench.live.replay import WARMUP_SHAPE, LiveReplayError, replay_live
from bench.report import summary_markdown
from bench.run import run_bench
from bench.schema import LiveApi, LiveConfig
from bench.traces.paths import default_data_root
from tests.data import needs_data
from tests.sim.fake_server import FakeSGLang, Running
from tests.sim.helpers import req, trace_of

HIGH = 49152


@pytest.fixture
def fake():
    running = Running(FakeSGLang())
    yield running
    running.stop()


def live(url: str, **kw) -> LiveConfig:
    return LiveConfig(endpoint=url, **{"warmup_requests": 1, "loads_interval_s": 0.05, **kw})


def shared_trace():
    """``b`` shares two 16-token blocks with ``a``; ``c`` follows ``a`` closed-loop."""
    return trace_of([
        req("a", 0.0, 40, 5, blocks=[1, 2, 3]),
        req("b", 0.3, 50, 4, blocks=[1, 2, 4, 5]),
        req("c", 0.0, 20, 3, blocks=[9, 10], session_id="s", after="a", delay_s=0.05),
    ], block_size=16)


def test_generate_records_real_stream_timing_and_the_servers_cache_hits(fake):
    run = replay_live(shared_trace(), live(fake.url, api=LiveApi.generate), HIGH)
    recs = {r.rid: r for r in run.records}
    assert set(recs) == {"a", "b", "c"} and all(r.status == "finished" for r in recs.values())
    for r in recs.values():
        assert r.output_tokens == len(r.token_times) == {"a": 5, "b": 4, "c": 3}[r.rid]
        assert r.arrival_s < r.first_token_s == r.token_times[0] <= r.finish_s == r.token_times[-1]
        assert np.all(np.diff(r.token_times) > 0)
    assert recs["b"].cached_tokens == 32 and recs["a"].cached_tokens == 0  # the shared blocks only
    assert recs["b"].prefill_tokens == 50 - 32
    assert recs["c"].arrival_s >= recs["a"].finish_s + 0.05  # closed loop, as the client saw it
    assert abs(recs["b"].arrival_s - 0.3) < 0.1
    sent = [s for s in fake.fake.seen if s.path == "/generate"]
    assert len(sent) == 1 + 3  # warm-up + replay
    body = sent[-1].body
    assert body["sampling_params"] == {"temperature": 0.0, "max_new_tokens": body["sampling_params"][
        "max_new_tokens"], "ignore_eos": True, "skip_special_tokens": False}
    assert run.meta["cache_flushed"] is True and run.meta["loads_samples"] > 0
    assert run.timeline.capacity == 1000 and np.isnan(run.timeline.kv_cached).all()


def test_completions_records_have_no_cached_tokens(fake):
    run = replay_live(shared_trace(), live(fake.url, extra_body={"top_k": 1}), HIGH)
    assert all(r.status == "finished" and r.cached_tokens is None for r in run.records)
    body = [s for s in fake.fake.seen if s.path == "/v1/completions"][-1].body
    assert isinstance(body["prompt"], list) and all(17 <= t < HIGH for t in body["prompt"])
    assert body["ignore_eos"] is True and body["stream"] is True
    assert body["skip_special_tokens"] is False and body["top_k"] == 1
    assert not run.meta["cached_tokens_reported"]


def test_a_429_is_a_rejection_and_its_follower_still_goes(fake):
    fake.fake.reject_len = 50
    run = replay_live(shared_trace(), live(fake.url, api=LiveApi.generate), HIGH)
    recs = {r.rid: r for r in run.records}
    assert recs["b"].status == "rejected" and "Too Many Requests" in recs["b"].reason
    assert recs["b"].output_tokens == 0 and recs["b"].finish_s >= recs["b"].arrival_s
    assert recs["a"].status == recs["c"].status == "finished"


def test_an_unreachable_server_or_a_wrong_vocabulary_stops_the_replay_before_any_request(fake):
    with pytest.raises(LiveReplayError, match="cannot reach"):
        replay_live(shared_trace(), live("http://127.0.0.1:9"), HIGH)
    fake.fake.vocab_size = 32000
    with pytest.raises(LiveReplayError, match="token id 49151 is not in the vocabulary"):
        replay_live(shared_trace(), live(fake.url), HIGH)
    assert fake.fake.seen == []
    fake.fake.vocab_size, fake.fake.reject_len = HIGH, WARMUP_SHAPE[0]
    with pytest.raises(LiveReplayError, match="warm-up request .* failed: Too Many Requests"):
        replay_live(shared_trace(), live(fake.url), HIGH)


@needs_data(default_data_root() / "azure_llm_2023")
def test_run_bench_live_and_simulated_replay_the_same_shaped_requests(fake, tmp_path):
    overrides = ["trace=azure_conversation", "trace.window_end_s=60", "trace.time_scale=0.02",
                 "accelerator=cpu", "model_profile=smollm2-135m", "live.input_scale=0.0625",
                 "live.output_scale=0.03", "live.max_output_tokens=4", "live.api=generate",
                 "live.warmup_requests=0", "output.progress=false"]
    live_run = run_bench(resolve_bench(compose_bench([*overrides, f"live.endpoint={fake.url}"])),
                         tmp_path / "live")
    sim_run = run_bench(resolve_bench(compose_bench(overrides)), tmp_path / "sim")
    assert live_run["meta"]["mode"] == "live" and sim_run["meta"]["mode"] == "sim"
    assert live_run["meta"]["shape"] == sim_run["meta"]["shape"]
    live_rows = (tmp_path / "live" / "requests.csv").read_text().splitlines()[1:]
    sim_rows = (tmp_path / "sim" / "requests.csv").read_text().splitlines()[1:]
    key = lambda row: (row.split(",")[0], row.split(",")[4])  # rid, input tokens  # noqa: E731
    assert sorted(map(key, live_rows)) == sorted(map(key, sim_rows)) and len(live_rows) > 10
    assert live_run["summary"]["finished"] == live_run["summary"]["requests"]
    text = (tmp_path / "live" / "summary.md").read_text()
    assert text == summary_markdown(json.loads((tmp_path / "live" / "metrics.json").read_text()))
    assert "measured live" in text and "Policies: the server's own" in text
    for name in ("ttft_cdf.png", "windows.png"):
        assert (tmp_path / "live" / name).stat().st_size > 0


def test_arrival_instants_are_sent_in_trace_order_and_each_reaches_the_server_once(fake):
    """Three instants of 12 requests each, 0.5 s apart: the client sends every
    request at or after its instant, the instants in order, and the server gets
    each request once. NOTE: the order *at the server* is not asserted: each
    request opens its own connection, and on a loaded CI machine the first
    instant's cold connections reached the server after a request of the
    second (0.5 s late; seen twice, at 0.1 s and 0.5 s spacing). The replay
    does not serialize connections, and should not: that would add client lag."""
    trace = trace_of([req(f"r{i:02d}", 0.5 * (i // 12), 20 + i, 2) for i in range(36)])
    run = replay_live(trace, live(fake.url, api=LiveApi.generate, warmup_requests=0), HIGH)
    seen = [len(s.body["input_ids"]) - 20 for s in fake.fake.seen]
    assert sorted(seen) == list(range(36))
    sent = sorted(run.records, key=lambda r: r.arrival_s)
    instants = [int(r.rid[1:]) // 12 for r in sent]
    assert instants == sorted(instants), [r.rid for r in sent]
    assert all(r.arrival_s >= 0.5 * (int(r.rid[1:]) // 12) - 1e-3 for r in sent)
