"""Scute in the live CPU server (float32): one adapter of each type, made with
PEFT from the default model, all loaded at startup and served in one batch.

* Concurrent requests for the five adapters and the base model, three prompts
  each, all in flight together: every request's 16 greedy tokens equal PEFT's
  own model for its adapter in HF transformers.
* The same through the streaming chat API (the real ``openai`` client).
* Runtime load/unload through SGLang's endpoints (an unloaded adapter that is
  requested again is reloaded, as SGLang does); unsupported PEFT types are
  refused at load naming the type; a request naming an unknown adapter is
  answered 400 before anything is allocated.
"""

from __future__ import annotations

import concurrent.futures as cf
import re
from pathlib import Path

import httpx
import pytest

from bench.live import peft_adapters as pa
from bench.live.chat import client

pytestmark = pytest.mark.server

PROMPTS = ["What is 2+2?", "Name a color you like and say why.", "Write a haiku about rain."]
TOKENS = 16
NAMES = list(pa.CONFIGS)


@pytest.fixture(scope="module")
def adapters(checkpoint, tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("adapters")
    made = {name: pa.make(checkpoint, name, cfg, folder, seed=i + 1) for i, (name, cfg) in enumerate(pa.CONFIGS.items())}
    made["late"] = pa.make(checkpoint, "late", pa.CONFIGS["lora"], folder, seed=99)
    for name, (cfg, _) in pa.REFUSED.items():
        made[name] = pa.make(checkpoint, name, cfg, folder, seed=7)
    return made


@pytest.fixture(scope="module")
def prompt_ids(hf) -> list[list[int]]:
    tok = hf.tok
    return [tok(tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False),
                add_special_tokens=False).input_ids for p in PROMPTS]


@pytest.fixture(scope="module")
def reference(checkpoint, adapters, prompt_ids) -> dict[str | None, list[list[int]]]:
    """PEFT's greedy tokens per adapter (``None``: the base model)."""
    ref = {name: pa.greedy(checkpoint, adapters[name], prompt_ids, TOKENS) for name in [*NAMES, "late"]}
    ref[None] = pa.greedy(checkpoint, None, prompt_ids, TOKENS)
    return ref


@pytest.fixture(scope="module")
def server(start_server, adapters):
    paths = ",".join(f"{n}:'{adapters[n]}'" for n in NAMES)
    # NOTE: every request in flight together: above the CPU default of 8 running requests
    srv = start_server("model.dtype=float32", "+adapters=scute", f"adapters.paths={{{paths}}}",
                       "adapters.max_per_batch=7", "sglang.sleep_on_idle=true", "sglang.max_running_requests=32")
    yield srv
    srv.stop()


def generate(base_url: str, ids: list[int], adapter: str | None) -> httpx.Response:
    body = {"input_ids": ids, "sampling_params": {"temperature": 0, "max_new_tokens": TOKENS, "ignore_eos": True}}
    if adapter is not None:
        body["lora_path"] = adapter
    return httpx.post(base_url + "/generate", json=body, timeout=900)


def test_mixed_batch_equals_peft_for_every_adapter(server, prompt_ids, reference):
    jobs = [(name, i) for name in [None, *NAMES] for i in range(len(prompt_ids))]
    with cf.ThreadPoolExecutor(len(jobs)) as pool:
        answers = list(pool.map(lambda j: generate(server.base_url, prompt_ids[j[1]], j[0]), jobs))
    wrong = []
    for (name, i), r in zip(jobs, answers, strict=True):
        assert r.status_code == 200, r.text
        if r.json()["output_ids"] != reference[name][i]:
            wrong.append((name, i, r.json()["output_ids"], reference[name][i]))
    assert not wrong, f"{len(wrong)} of {len(jobs)} differ from PEFT: {wrong[:3]}"
    # NOTE: the adapters change the output; equal tokens are not the base model's.
    assert all(reference[n] != reference[None] for n in NAMES)
    log = server.log_text()
    assert "Scute loaded" in log and "scute as backend" in log.lower()
    # NOTE: 18 requests, 3 per adapter (and base): a forward batch of 16 or
    # more holds every adapter type and the base model together.
    in_batch = [int(a) + int(b) for a, b in re.findall(r"Prefill batch, #new-seq: (\d+).*?#running-req: (\d+)", log)]
    assert max(in_batch) >= 16, in_batch


def test_streaming_chat_equals_peft(server, hf, reference):
    c = client(server.base_url, timeout=900)

    def stream(name: str) -> str:
        chunks = c.chat.completions.create(
            model=f"default:{name}", messages=[{"role": "user", "content": PROMPTS[0]}], max_tokens=TOKENS,
            temperature=0, stream=True, extra_body={"ignore_eos": True})
        return "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)

    with cf.ThreadPoolExecutor(len(NAMES)) as pool:
        texts = dict(zip(NAMES, pool.map(stream, NAMES), strict=True))
    for name in NAMES:
        assert texts[name] == hf.tok.decode(reference[name][0], skip_special_tokens=True), name


def test_runtime_load_unload_and_unknown_adapter(server, adapters, prompt_ids, reference):
    url = server.base_url
    r = httpx.post(url + "/load_lora_adapter", json={"lora_name": "late", "lora_path": str(adapters["late"])},
                   timeout=300)
    assert r.status_code == 200 and r.json()["success"], r.text
    assert generate(url, prompt_ids[1], "late").json()["output_ids"] == reference["late"][1]
    r = httpx.post(url + "/unload_lora_adapter", json={"lora_name": "late"}, timeout=300)
    assert r.status_code == 200 and r.json()["success"], r.text
    # NOTE: SGLang remembers an unloaded adapter and reloads it on demand
    # (tokenizer_manager._resolve_lora_path): converted again, still exact.
    again = generate(url, prompt_ids[1], "late")
    assert again.status_code == 200 and again.json()["output_ids"] == reference["late"][1], again.text
    assert server.log_text().count("Scute loaded late") == 2
    unknown = generate(url, prompt_ids[1], "nope")
    assert unknown.status_code == 400 and "nope" in unknown.text, unknown.text
    # NOTE: still serving every other adapter, exactly.
    assert generate(url, prompt_ids[2], "oft").json()["output_ids"] == reference["oft"][2]


@pytest.mark.parametrize("name", sorted(pa.REFUSED))
def test_unsupported_types_are_refused_naming_the_type(server, adapters, name):
    r = httpx.post(server.base_url + "/load_lora_adapter", json={"lora_name": name, "lora_path": str(adapters[name])},
                   timeout=300)
    body = r.json()
    assert not body["success"]
    assert f"PEFT type {pa.REFUSED[name][1]} is not supported" in body["error_message"], body
