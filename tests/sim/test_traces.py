"""Trace loaders on the real files: counts, spans and lengths as data/README.md states."""

from __future__ import annotations

import ast
import json
import lzma
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from bench.traces import transforms
from bench.traces.azure import load_azure
from bench.traces.claude_code import load_claude_code, read_session, session_files
from bench.traces.mooncake import load_mooncake
from bench.traces.paths import DATA_ROOT_ENV, default_data_root, resolve_data_root, resolve_trace_path
from bench.traces.servegen import WINDOW_S, client_ids, load_servegen
from tests.data import needs_data

ROOT = default_data_root()
pytestmark = needs_data(ROOT / "README.md")


@pytest.fixture(scope="module")
def mooncake():
    return load_mooncake(ROOT / "mooncake" / "conversation_trace.jsonl", name="mc")


def test_mooncake_matches_the_readme(mooncake):
    reqs = mooncake.requests
    assert len(reqs) == 12031
    assert mooncake.duration_s == pytest.approx(3537, abs=0.5)
    assert len(reqs) / mooncake.duration_s == pytest.approx(3.40, abs=0.005)
    inputs = [r.input_tokens for r in reqs]
    assert np.mean(inputs) == pytest.approx(12035, abs=0.5)
    assert np.median(inputs) == 6909 and max(inputs) == 126195
    assert np.mean([r.output_tokens for r in reqs]) == pytest.approx(343, abs=0.5)
    assert mooncake.block_size == 512
    assert all(len(r.block_ids) == math.ceil(r.input_tokens / 512) for r in reqs)
    assert all(r.block_ids[0] == 0 for r in reqs)  # one shared first block


def test_mooncake_ideal_hit_ratio_matches_the_readme(mooncake):
    seen: set[int] = set()
    blocks = hits = tokens = hit_tokens = 0
    for r in mooncake.requests:
        for i, b in enumerate(r.block_ids):
            size = r.block_tokens(512, i)
            blocks, tokens = blocks + 1, tokens + size
            if b in seen:
                hits, hit_tokens = hits + 1, hit_tokens + size
        seen.update(r.block_ids)
    assert round(hits / blocks, 3) == 0.366
    assert round(hit_tokens / tokens, 3) == 0.374


def test_azure_conversation_matches_the_readme():
    trace = load_azure(ROOT / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv", name="az")
    assert len(trace.requests) == 19366
    assert trace.duration_s == pytest.approx(3502, abs=0.5)
    assert np.mean([r.input_tokens for r in trace.requests]) == pytest.approx(1155, abs=0.5)
    assert np.mean([r.output_tokens for r in trace.requests]) == pytest.approx(211, abs=0.5)
    assert max(r.input_tokens for r in trace.requests) == 14050
    assert all(r.block_ids is None for r in trace.requests)
    assert trace.requests[1].arrival_s == pytest.approx(50.9951690 - 46.6805900)


CC = ROOT / "kv_cache_tester_cc_traces"
N_SESSIONS = 25


def test_claude_code_folder_has_568_sessions():
    assert len(session_files(CC)) == 568


@pytest.fixture(scope="module")
def cc():
    return load_claude_code(CC, name="cc", session_rate=0.1, max_sessions=N_SESSIONS, seed=3)


def test_claude_code_keeps_every_request_and_links_turns_closed_loop(cc):
    raw = [read_session(p) for p in session_files(CC)[:N_SESSIONS]]
    top = sum(1 for s in raw for r in s["requests"] if r["type"] != "subagent")
    nested = sum(len(r["requests"]) for s in raw for r in s["requests"] if r["type"] == "subagent")
    assert len(cc.requests) == top + nested
    roots = list(cc.roots())
    assert len(roots) == N_SESSIONS  # one open-loop request per session: its first turn
    by_rid = {r.rid: r for r in cc.requests}
    first = raw[0]["requests"]
    second = next(r for r in first[1:] if r["type"] != "subagent")
    follower = by_rid[f"cc-{raw[0]['id']}-{first.index(second)}"]
    assert follower.after == f"cc-{raw[0]['id']}-0" and follower.delay_s == second["think_time"]
    assert cc.block_size == 64 and cc.session_scoped_blocks
    assert all(len(r.block_ids or ()) == r.input_tokens // 64 for r in cc.requests)


def test_claude_code_sessions_get_disjoint_block_ids(cc):
    owner: dict[int, str] = {}
    for r in cc.requests:
        session = r.session_id.split("/")[0]
        for b in r.block_ids or ():
            assert owner.setdefault(b, session) == session
    assert max(owner) < cc.block_id_span


def test_claude_code_subagents_start_after_their_parent_turn():
    # trace_0003 starts a sub-agent after its first turn (README sample).
    trace = load_claude_code(CC, name="cc", max_sessions=2)
    subs = [r for r in trace.requests if r.session_id and "/" in r.session_id]
    assert subs, "the README's sample sub-agent is missing"
    first_sub = next(r for r in subs if r.rid.endswith("-0"))
    parent = next(r for r in trace.requests if r.rid == first_sub.after)
    assert "/" not in parent.session_id
    # launched 134.227 s after the session start, the parent ended at 0 + 7.27 s
    assert first_sub.delay_s == pytest.approx(134.227 - 7.27, abs=1e-6)


def test_claude_code_halves_are_disjoint_stable_and_cover_every_session():
    from bench.traces.claude_code import split_of

    files = session_files(CC)
    halves = Counter(split_of(f) for f in files)
    assert set(halves) == {"tuning", "evaluation"} and sum(halves.values()) == 568
    assert min(halves.values()) > 0.4 * 568  # a hash, roughly half each
    tune = load_claude_code(CC, name="cc", max_sessions=8, split="tuning")
    held = load_claude_code(CC, name="cc", max_sessions=8, split="evaluation")
    sessions = lambda t: {r.session_id.split("/")[0] for r in t.requests}  # noqa: E731 (sub-agents: parent)
    assert len(sessions(tune)) == len(sessions(held)) == 8 and not sessions(tune) & sessions(held)
    # NOTE: the first 8 of a half are the first 8 of its files in name order, whatever else is there
    first = [f for f in files if split_of(f) == "evaluation"][:8]
    assert sessions(held) == {f"cc-{read_session(f).get('id', f.name.split('.')[0])}" for f in first}
    with pytest.raises(ValueError, match="split must be all, tuning or evaluation"):
        load_claude_code(CC, max_sessions=1, split="held-out")


def test_claude_code_session_starts_are_seeded():
    a = load_claude_code(CC, max_sessions=5, seed=1)
    b = load_claude_code(CC, max_sessions=5, seed=1)
    c = load_claude_code(CC, max_sessions=5, seed=2)
    starts = lambda t: [r.arrival_s for r in t.roots()]  # noqa: E731
    assert starts(a) == starts(b) != starts(c)
    assert starts(a)[0] == 0.0


SG = ROOT / "servegen"


def _expected_servegen_count(model_dir: Path, start: float, end: float, scale: float) -> tuple[int, int]:
    low = high = 0
    for client in client_ids(model_dir):
        data = json.loads(lzma.open(model_dir / f"chunk-{client}-dataset.json.xz", "rt").read())
        with_lengths = sorted(float(t) for t, v in data.items() if v["input_tokens"] != "{}")
        for line in lzma.open(model_dir / f"chunk-{client}-trace.csv.xz", "rt"):
            w, rate, _, pattern, *_ = line.strip().split(",")
            w, rate = float(w), float(rate)
            if pattern and rate > 0 and start <= w < end and with_lengths and with_lengths[0] <= w:
                n = math.ceil(rate * scale * WINDOW_S)
                low, high = low + max(n - 1, 0), high + n
    return low, high


def test_servegen_synthesizes_the_published_rates():
    model_dir = SG / "data" / "language" / "m-small"
    assert len(client_ids(model_dir)) == 38
    start, hours = 86400.0 + 12 * 3600, 1
    trace = load_servegen(SG, name="sg", category="language", model="m-small", start_s=start,
                          duration_s=hours * 3600, seed=7, rate_scale=0.05)
    low, high = _expected_servegen_count(model_dir, start, start + hours * 3600, 0.05)
    assert low <= len(trace.requests) <= high and low > 1000
    assert all(0 <= r.arrival_s < hours * 3600 for r in trace.requests)
    again = load_servegen(SG, name="sg", category="language", model="m-small", start_s=start,
                          duration_s=hours * 3600, seed=7, rate_scale=0.05)
    assert [(r.arrival_s, r.input_tokens) for r in again.requests] == \
        [(r.arrival_s, r.input_tokens) for r in trace.requests]


def test_servegen_lengths_come_from_the_client_distribution():
    model_dir = SG / "data" / "reason" / "deepseek-r1"
    client = client_ids(model_dir)[0]
    trace = load_servegen(SG, name="sg", category="reason", model="deepseek-r1", clients=[client],
                          start_s=0, duration_s=6 * 3600, seed=1)
    data = json.loads(lzma.open(model_dir / f"chunk-{client}-dataset.json.xz", "rt").read())
    pmf = ast.literal_eval(data["0"]["input_tokens"])
    assert trace.requests and all(r.input_tokens in pmf for r in trace.requests)
    mean = sum(k * p for k, p in pmf.items()) / sum(pmf.values())
    sample = np.mean([r.input_tokens for r in trace.requests])
    assert sample == pytest.approx(mean, rel=0.15)


def test_servegen_rejects_clients_without_lengths():
    with pytest.raises(ValueError, match="no dataset"):
        load_servegen(SG, category="language", model="m-large", clients=[0])


# ------------------------------------------------------------------ transforms
def test_window_and_time_scale(mooncake):
    w = transforms.window(mooncake, 600, 1200)
    assert all(0 <= r.arrival_s < 600 for r in w.requests)
    expected = sum(1 for r in mooncake.requests if 600 <= r.arrival_s < 1200)
    assert len(w.requests) == expected
    slow = transforms.scale_time(w, 2.0)
    assert [r.arrival_s for r in slow.requests] == [2 * r.arrival_s for r in w.requests]


def test_surge_multiplies_the_rate_inside_its_window_only(mooncake):
    w = transforms.window(mooncake, 0, 1200)
    surged = transforms.inject_surges(w, [transforms.Surge(300, 600, 3.0)], seed=0)
    count = lambda t, lo, hi: sum(1 for r in t.requests if lo <= r.arrival_s < hi)  # noqa: E731
    assert count(surged, 300, 600) == 3 * count(w, 300, 600)
    assert count(surged, 0, 300) == count(w, 0, 300) and count(surged, 600, 1200) == count(w, 600, 1200)
    surged.validate()
    # a copy shares with earlier traffic what its original shared, nothing of the original's new blocks
    originals = {r.rid: r for r in w.requests}
    seen_before = set()
    for r in w.requests:
        if r.arrival_s >= 300:
            break
        seen_before.update(r.block_ids)
    for r in surged.requests:
        if "@" not in r.rid:
            continue
        orig = originals[r.rid.split("@")[0]]
        kept = [a for a, b in zip(r.block_ids, orig.block_ids) if a == b]
        assert kept[0] == 0 and all(b >= w.block_id_span for b in r.block_ids[len(kept):])
        assert len(r.block_ids) == len(orig.block_ids) and r.input_tokens == orig.input_tokens


def test_fractional_surge_and_thinning(mooncake):
    w = transforms.window(mooncake, 0, 900)
    inside = sum(1 for r in w.requests if 0 <= r.arrival_s < 900)
    up = transforms.inject_surges(w, [transforms.Surge(0, 900, 1.5)], seed=1)
    down = transforms.inject_surges(w, [transforms.Surge(0, 900, 0.5)], seed=1)
    assert len(up.requests) == pytest.approx(1.5 * inside, rel=0.06)
    assert len(down.requests) == pytest.approx(0.5 * inside, rel=0.06)


def test_surge_copies_whole_sessions(cc):
    surged = transforms.inject_surges(cc, [transforms.Surge(0, 1e6, 2.0)])
    assert len(surged.requests) == 2 * len(cc.requests)
    copies = [r for r in surged.requests if "@" in r.rid]
    assert all(r.after is None or r.after.endswith("@s" + r.rid.split("@s")[1]) for r in copies)
    # session-scoped ids: a copied session shares no block with any other session
    assert not {b for r in copies for b in r.block_ids or ()} & {b for r in cc.requests for b in r.block_ids or ()}
    assert Counter(r.session_id for r in copies).keys().isdisjoint({r.session_id for r in cc.requests})


def test_data_root_resolution(monkeypatch, tmp_path):
    monkeypatch.setenv(DATA_ROOT_ENV, str(tmp_path))
    assert default_data_root() == tmp_path
    assert resolve_data_root(None) == tmp_path
    assert resolve_data_root("/elsewhere") == Path("/elsewhere")
    (tmp_path / "t.jsonl").write_text("")
    assert resolve_trace_path("t.jsonl", tmp_path) == tmp_path / "t.jsonl"
    with pytest.raises(FileNotFoundError, match="trace.path"):
        resolve_trace_path("missing.jsonl", tmp_path)


def test_mooncake_derived_sessions_link_later_turns_closed_loop():
    from array import array

    from bench.traces.mooncake import derive_sessions
    from bench.traces.trace import TraceRequest

    def tr(rid, t, blocks):
        return TraceRequest(rid, t, 512 * len(blocks), 10, array("q", blocks))

    out = {r.rid: r for r in derive_sessions([
        tr("a", 0.0, [0, 1, 2]), tr("b", 5.0, [0, 3]), tr("c", 9.0, [0, 1, 2, 4, 5]),
        tr("d", 20.0, [0, 1, 2, 4, 6]), tr("e", 21.0, [0, 7])])}
    # a -> c -> d share >= 2 blocks; b and e share only the system block 0
    assert (out["c"].after, out["c"].delay_s, out["c"].session_id) == ("a", 9.0, "a")
    assert (out["d"].after, out["d"].delay_s, out["d"].session_id) == ("c", 11.0, "a")
    assert [out[k].after for k in "abe"] == [None, None, None]


def test_mooncake_sessions_on_the_real_trace():
    t = load_mooncake(ROOT / "mooncake" / "conversation_trace.jsonl", name="mc", sessions=True)
    t.validate()
    assert len(t.requests) == 12031
    assert len(list(t.roots())) == 7373  # conversations
    assert len({r.session_id for r in t.requests}) == 7373
