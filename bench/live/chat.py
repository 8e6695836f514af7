"""Multi-turn chat against a live server and the HF transformers reference."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import openai
from openai.types.chat import ChatCompletionMessageParam

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

T = TypeVar("T")


def client(base_url: str, api_key: str = "none", **kw: Any) -> openai.OpenAI:
    """The real ``openai`` client pointed at a Switchboard server (``api_key``: its
    ``server.api_key_file`` key, if it has one)."""
    return openai.OpenAI(base_url=base_url + "/v1", api_key=api_key, **kw)


class HFReference:
    """Hugging Face transformers greedy decoding on the same checkpoint.

    NOTE: answers are memoized by (messages, max_new_tokens): greedy decoding is a
    function of its prompt, so servers that answer a conversation alike share one
    reference computation. With ``memo_dir`` the memo is also a folder of files that
    other processes on the same checkpoint and dtype share (the test workers).
    """

    def __init__(self, path: Path, dtype: str = "float32", memo_dir: Path | None = None) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(1)
        self.torch = torch
        self.tok = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).eval()
        self._answers: dict[tuple[str, int], tuple[str, int, int]] = {}
        self._memo_dir = memo_dir
        if memo_dir is not None:
            memo_dir.mkdir(parents=True, exist_ok=True)
        self._memo_scope = f"{Path(path).resolve()}|{dtype}"

    def greedy(self, messages: Sequence[Mapping[str, object]], max_new_tokens: int) -> tuple[str, int, int]:
        """``(text, prompt_tokens, completion_tokens)``; the stop token counts but is not returned."""
        key = (json.dumps(messages, sort_keys=True), max_new_tokens)
        if key not in self._answers:
            shared = self._shared_file(key)
            if shared is not None and shared.exists():
                text, n_prompt, n_new = json.loads(shared.read_text())
                self._answers[key] = (text, n_prompt, n_new)
            else:
                self._answers[key] = self._generate(messages, max_new_tokens)
                if shared is not None:
                    # NOTE: written whole, then renamed: a reader never sees half an answer
                    partial = shared.with_suffix(f".{os.getpid()}.tmp")
                    partial.write_text(json.dumps(self._answers[key]))
                    partial.replace(shared)
        return self._answers[key]

    def _shared_file(self, key: tuple[str, int]) -> Path | None:
        if self._memo_dir is None:
            return None
        digest = hashlib.sha256(f"{self._memo_scope}|{key[1]}|{key[0]}".encode()).hexdigest()
        return self._memo_dir / f"{digest}.json"

    def greedy_ids(self, ids: Sequence[int], max_new_tokens: int) -> list[int]:
        """Greedy new token ids after the prompt ``ids``, exactly ``max_new_tokens`` of them: EOS does not
        stop it (a server run with ``ignore_eos``)."""
        x = self.torch.tensor([list(ids)])
        config = self.model.generation_config
        eos = config.eos_token_id
        config.eos_token_id = None  # NOTE: restored for this reference's other users
        try:
            with self.torch.no_grad():
                out = self.model.generate(x, max_new_tokens=max_new_tokens, do_sample=False,
                                          attention_mask=self.torch.ones_like(x), pad_token_id=0)
        finally:
            config.eos_token_id = eos
        new: list[int] = out[0, len(ids):].tolist()
        return new

    def _generate(self, messages: Sequence[Mapping[str, object]], max_new_tokens: int) -> tuple[str, int, int]:
        text = self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = self.tok(text, add_special_tokens=False, return_tensors="pt").input_ids
        with self.torch.no_grad():
            out = self.model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False,
                                      attention_mask=self.torch.ones_like(ids))
        new = out[0, ids.shape[1]:].tolist()
        n_new = len(new)
        if new and new[-1] == self.tok.eos_token_id:
            new = new[:-1]
        return self.tok.decode(new, skip_special_tokens=True), ids.shape[1], n_new


@dataclass
class TurnResult:
    """One chat turn as the server answered it."""

    messages: list[ChatCompletionMessageParam]
    text: str | None
    """The answer's content (``None``: the server sent none)."""
    prompt_tokens: int
    completion_tokens: int


def run_conversations(base_url: str) -> list[TurnResult]:
    """Every turn of ``CONVERSATIONS`` through the real openai client, greedy."""
    c = client(base_url, timeout=300)
    results = []
    for turns in CONVERSATIONS:
        history: list[ChatCompletionMessageParam] = [{"role": "system", "content": SYSTEM_PROMPT}]
        for user in turns:
            messages: list[ChatCompletionMessageParam] = history + [{"role": "user", "content": user}]
            resp = c.chat.completions.create(model="default", messages=messages,
                                             max_tokens=MAX_TOKENS, temperature=0)
            text = resp.choices[0].message.content
            usage = resp.usage
            assert usage is not None, f"no token usage in the answer to {user!r}"
            results.append(TurnResult(messages, text, usage.prompt_tokens, usage.completion_tokens))
            history = messages + [{"role": "assistant", "content": text}]
    return results


def agreement(turns: list[TurnResult], hf: HFReference) -> list[bool]:
    """Per turn: does the server's greedy answer equal HF's, token count included?"""
    out = []
    for turn in turns:
        text, n_prompt, n_new = hf.greedy(turn.messages, MAX_TOKENS)
        out.append((turn.prompt_tokens, turn.text, turn.completion_tokens) == (n_prompt, text, n_new))
    return out


def loads(base_url: str) -> dict[str, Any]:
    """SGLang's live scheduler load (``/v1/loads``), rank 0."""
    rank0: dict[str, Any] = httpx.get(base_url + "/v1/loads", timeout=10).json()["loads"][0]
    return rank0


def metrics_text(base_url: str, timeout: float = 10) -> str:
    """SGLang's ``/metrics`` once (read several series from one snapshot with ``series_total``)."""
    return httpx.get(base_url + "/metrics", timeout=timeout).text


def series_total(text: str, name: str, labels: dict[str, str] | None = None) -> float:
    """The sum of the Prometheus series ``name`` in ``text`` over its label sets, or over those
    carrying every one of ``labels``."""
    wanted = [f'{k}="{v}"' for k, v in (labels or {}).items()]
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith((name + "{", name + " "))
               and all(w in line.split("}", 1)[0] for w in wanted))


def metric_total(base_url: str, name: str, timeout: float = 10, labels: dict[str, str] | None = None) -> float:
    """The sum of a Prometheus series ``name`` over its label sets (SGLang's ``/metrics``), or over
    those carrying every one of ``labels``."""
    return series_total(metrics_text(base_url, timeout), name, labels)


def wait_still(read: Callable[[], T], hold_s: float = 2.0, timeout: float = 120, what: str = "values") -> T:
    """``read()`` once two reads ``hold_s`` apart agree (a counter pushed periodically has settled)."""
    deadline = time.monotonic() + timeout
    first = read()
    while time.monotonic() < deadline:
        time.sleep(hold_s)
        now = read()
        if now == first:
            return now
        first = now
    raise AssertionError(f"{what} did not settle in {timeout:.0f} s")


def wait_for(predicate: Callable[[], object], timeout: float = 120, what: str = "condition") -> None:
    """Poll server state until ``predicate()`` holds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
