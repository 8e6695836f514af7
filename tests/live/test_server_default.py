"""The CPU server with stock SGLang behaviour: real model, real openai client, HF agreement."""

from __future__ import annotations

import os
import random
import signal
import time

import httpx
import psutil
import pytest

from bench.live.chat import HFReference, agreement, client, run_conversations
from tests.live.conftest import module_server
from tests.live.harness import QueueExperiment, unique_prompt

pytestmark = pytest.mark.server

#: ``server.shutdown_grace_s``, set explicitly: the README's default, which the stop is checked against.
GRACE_S = 10.0
#: NOTE: slack on top of a grace, for process-exit polling only: the supervisor checks its deadline every
#: 0.2 s before it SIGKILLs SGLang's process group, the killed processes still have to exit (unmapping the
#: model) and the check below polls every 0.1 s, all on 2 shared cores; 2 s covers that. A stop that
#: ignored the grace would overshoot by far more (SGLang alone takes > 8 s to exit on SIGTERM).
EXIT_MARGIN_S = 2.0

server = module_server("model.dtype=float32", "sglang.max_running_requests=1", f"server.shutdown_grace_s={GRACE_S:g}")


@pytest.fixture(scope="module")
def hf(checkpoint):
    return HFReference(checkpoint)


def test_greedy_chat_turns_equal_hf_transformers(server, hf):
    turns = run_conversations(server.base_url)
    assert len(turns) == 12
    same = agreement(turns, hf)
    assert all(same), f"turns differing from HF: {[i for i, ok in enumerate(same) if not ok]}"


def test_streaming_equals_non_streaming(server):
    c = client(server.base_url, timeout=300)
    messages = [{"role": "user", "content": "Describe a rainbow in one sentence."}]
    full = c.chat.completions.create(model="default", messages=messages, max_tokens=32, temperature=0)
    stream = c.chat.completions.create(model="default", messages=messages, max_tokens=32,
                                       temperature=0, stream=True)
    chunks = [ch.choices[0].delta.content or "" for ch in stream if ch.choices]
    assert len([c for c in chunks if c]) > 1
    assert "".join(chunks) == full.choices[0].message.content


def test_metrics_endpoint_serves_sglang_series(server):
    text = httpx.get(server.base_url + "/metrics", timeout=10).text
    for series in ("sglang:time_to_first_token_seconds", "sglang:num_queue_reqs", "sglang:prompt_tokens_total"):
        assert series in text


def test_without_a_policy_the_queue_is_served_first_come_first_served(server):
    rng = random.Random(1)
    prompts = {"long": unique_prompt(rng, 150), "short": unique_prompt(rng, 10),
               "mid": unique_prompt(rng, 70), "tiny": unique_prompt(rng, 3)}
    assert QueueExperiment(server.base_url).run(prompts) == ["long", "short", "mid", "tiny"]


def _alive(procs: list[psutil.Process], groups: set[int]) -> list[str]:
    """Processes of ``procs`` or in the process ``groups`` that have not exited (zombies have)."""
    found = {p.pid: p for p in procs}
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) in groups:
                found.setdefault(p.pid, p)
        except (ProcessLookupError, PermissionError):
            pass
    alive = []
    for p in found.values():
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(f"{p.pid} {p.name()}")
        except psutil.NoSuchProcess:
            pass
    return alive


def assert_stops_within_grace(server, sig: signal.Signals, grace_s: float) -> None:
    """``sig`` to the server stops every SGLang process within ``grace_s`` (+ exit polling slack), no orphans."""
    procs = server.descendants()
    assert len(procs) >= 3, [p.name() for p in procs]  # SGLang main, scheduler, detokenizer
    groups = {os.getpgid(p.pid) for p in procs} - {os.getpgid(server.proc.pid)}  # SGLang's own group
    assert groups, "SGLang runs in the supervisor's process group"
    limit = grace_s + EXIT_MARGIN_S
    t0 = time.monotonic()
    elapsed = server.stop(sig, timeout=limit)  # NOTE: past ``limit`` it kills everything itself
    while (alive := _alive(procs, groups)) and time.monotonic() - t0 < limit:
        time.sleep(0.1)
    gone = time.monotonic() - t0
    assert not alive, f"{gone:.1f}s after {sig.name} (grace {grace_s:g}s + {EXIT_MARGIN_S:g}s) still alive: {alive}"
    assert elapsed <= limit, f"the server took {elapsed:.1f}s to stop on {sig.name}: over its grace " \
                             f"{grace_s:g}s + {EXIT_MARGIN_S:g}s"
    assert server.proc.returncode == 0


def test_ctrl_c_stops_every_sglang_process_within_the_shutdown_grace(server):
    assert_stops_within_grace(server, signal.SIGINT, GRACE_S)
