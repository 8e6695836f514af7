"""Helpers for tests against a running Switchboard server."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai

SYSTEM_PROMPT = "You are a concise assistant. Answer in one or two sentences."

#: Three conversations sharing the system prompt; every turn's history holds the
#: earlier answers. Written once, never tuned to make a comparison pass.
CONVERSATIONS: list[list[str]] = [
    ["What is the boiling point of water at sea level?", "And in Fahrenheit?",
     "Why does it change with altitude?", "Give one example of a high-altitude city."],
    ["Name three primary colors.", "Which of them is a warm color?",
     "What color do you get by mixing two of them?", "Write a haiku about that color."],
    ["What is a prime number?", "Is 21 prime?", "List the primes below 20.", "What is their sum?"],
]
MAX_TOKENS = 48


def client(base_url: str, **kw: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url + "/v1", api_key="none", **kw)


class HFReference:
    """Hugging Face transformers greedy decoding on the same checkpoint (float32)."""

    def __init__(self, path: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(1)
        self.torch = torch
        self.tok = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()

    def greedy(self, messages: list[dict], max_new_tokens: int) -> tuple[str, int, int]:
        """``(text, prompt_tokens, completion_tokens)``."""
        text = self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = self.tok(text, add_special_tokens=False, return_tensors="pt").input_ids
        with self.torch.no_grad():
            out = self.model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False,
                                      attention_mask=self.torch.ones_like(ids))
        new = out[0, ids.shape[1]:].tolist()
        n_new = len(new)
        if new and new[-1] == self.tok.eos_token_id:
            new = new[:-1]  # the stop token is counted but not returned, as in SGLang
        return self.tok.decode(new, skip_special_tokens=True), ids.shape[1], n_new


@dataclass
class TurnResult:
    messages: list[dict]
    text: str
    prompt_tokens: int
    completion_tokens: int


def run_conversations(base_url: str) -> list[TurnResult]:
    """Every turn of ``CONVERSATIONS`` through the real openai client, greedy."""
    c = client(base_url, timeout=300)
    results = []
    for turns in CONVERSATIONS:
        history = [{"role": "system", "content": SYSTEM_PROMPT}]
        for user in turns:
            messages = history + [{"role": "user", "content": user}]
            resp = c.chat.completions.create(model="default", messages=messages,
                                             max_tokens=MAX_TOKENS, temperature=0)
            text = resp.choices[0].message.content
            results.append(TurnResult(messages, text, resp.usage.prompt_tokens, resp.usage.completion_tokens))
            history = messages + [{"role": "assistant", "content": text}]
    return results


def loads(base_url: str) -> dict:
    """SGLang's live scheduler load (``/v1/loads``), rank 0."""
    return httpx.get(base_url + "/v1/loads", timeout=10).json()["loads"][0]


def wait_for(predicate, timeout: float = 120, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


_WORDS = ("time year people way day man thing woman life child world school state family "
          "student group country problem hand part place case week company system program "
          "question work government number night point home water room mother area money "
          "story fact month lot right study book eye job word business issue side kind head "
          "house service friend father power hour game line end member law car city name").split()


def unique_prompt(rng: random.Random, n_words: int) -> str:
    """A prompt no earlier request shares (a random first line), of ``n_words`` common words."""
    words = " ".join(rng.choice(_WORDS) for _ in range(n_words))
    return f"{rng.choice(_WORDS)} {rng.choice(_WORDS)} {rng.choice(_WORDS)}: {words}"


@dataclass
class QueueExperiment:
    """A blocker occupies the single running slot; prompts queue behind it in a known order."""

    base_url: str
    finished: list[str] = field(default_factory=list)
    status: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _post(self, name: str, content: str, max_tokens: int, **extra: Any) -> None:
        body = {"model": "default", "messages": [{"role": "user", "content": content}],
                "max_tokens": max_tokens, "temperature": 0, **extra}
        r = httpx.post(self.base_url + "/v1/chat/completions", json=body, timeout=600)
        with self.lock:
            self.finished.append(name)
            self.status[name] = r.status_code

    def run(self, prompts: dict[str, str], blocker_tokens: int = 160) -> list[str]:
        """Queue ``prompts`` in dict order behind a blocker; return the completion order."""
        threads = [threading.Thread(target=self._post, args=("blocker", "Count from one to two hundred.",
                                                             blocker_tokens), kwargs={"ignore_eos": True})]
        threads[0].start()
        wait_for(lambda: loads(self.base_url)["num_running_reqs"] == 1, what="blocker running")
        for i, (name, content) in enumerate(prompts.items(), start=1):
            t = threading.Thread(target=self._post, args=(name, content, 4))
            t.start()
            threads.append(t)
            # NOTE: the next prompt is sent only once this one is in SGLang's waiting
            # queue, so the arrival order is known (server state, not sleeps).
            wait_for(lambda: loads(self.base_url)["num_waiting_reqs"] == i, what=f"{name} queued")
        assert "blocker" not in self.finished, "blocker finished before the queue was built"
        for t in threads:
            t.join(timeout=600)
            assert not t.is_alive(), "a request hung"
        assert set(self.status.values()) == {200}, self.status
        return [n for n in self.finished if n != "blocker"]
