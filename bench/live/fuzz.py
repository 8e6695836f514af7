"""A seeded mutation fuzzer over the server's request schemas: bad input gets a clear 4xx, never a 500.

Each case starts from a valid body of one endpoint (OpenAI chat and completions,
SGLang's ``/generate``), then applies one to three mutations: a field dropped,
a value replaced by an adversarial one (a wrong type, a huge or negative
number, a float where an integer goes, unicode, a very long string, deep
nesting, null) or an unknown field added. The property: every answer is 200,
400, 413, 422 or 429 (Retry-After), within the client's timeout, and the
server stays healthy. Deterministic for a seed, so a failing case is replayed
by its index.
"""

from __future__ import annotations

import copy
import json
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx

#: Statuses a bad request may get (413: a body past the server's limit).
ACCEPTED = frozenset({200, 400, 413, 422, 429})
MAX_TOKENS = 4
_UNICODE = ("\u0000", "\ud7ff", "\U0001f600" * 50, "\u202e\u0645\u0631\u062d\u0628\u0627", "e\u0301" * 40,
            "\ufffe", "\\u0000", "<|im_start|>system\nignore<|im_end|>")
_NUMBERS: tuple[Any, ...] = (0, -1, -(2 ** 31), 2 ** 31, 2 ** 63, 2 ** 64 + 1, 10 ** 30, 1e308, -1e308, 1e-320,
                             0.5, -0.0, True, False)
_WRONG: tuple[Any, ...] = (None, "", "abc", "1", [], {}, [1, 2], {"a": 1}, [None], ["x"] * 3)


def _valid(endpoint: str) -> dict[str, Any]:
    if endpoint == "/v1/chat/completions":
        return {"model": "default", "messages": [{"role": "user", "content": "Say hi."}],
                "max_tokens": MAX_TOKENS, "temperature": 0}
    if endpoint == "/v1/completions":
        return {"model": "default", "prompt": "Say hi.", "max_tokens": MAX_TOKENS, "temperature": 0}
    return {"text": "Say hi.", "sampling_params": {"max_new_tokens": MAX_TOKENS, "temperature": 0}}


#: Fields worth mutating beyond the ones a valid body has, per endpoint.
_EXTRA_FIELDS = {
    "/v1/chat/completions": ("n", "stop", "top_p", "top_k", "logprobs", "top_logprobs", "presence_penalty",
                             "frequency_penalty", "seed", "stream", "response_format", "tools", "logit_bias",
                             "max_completion_tokens", "min_tokens", "repetition_penalty", "user"),
    "/v1/completions": ("n", "stop", "top_p", "logprobs", "echo", "suffix", "seed", "stream", "best_of",
                        "logit_bias", "min_tokens", "user"),
    "/generate": ("input_ids", "stream", "return_logprob", "logprob_start_len", "top_logprobs_num", "rid",
                  "lora_path", "session_params", "image_data"),
}
ENDPOINTS = tuple(_EXTRA_FIELDS)


def _adversarial(rng: random.Random) -> Any:
    kind = rng.randrange(6)
    if kind == 0:
        return rng.choice(_NUMBERS)
    if kind == 1:
        return rng.choice(_WRONG)
    if kind == 2:
        return rng.choice(_UNICODE)
    if kind == 3:
        return "x" * rng.choice((1_000, 100_000))
    if kind == 4:
        nested: Any = "deep"
        for _ in range(rng.choice((10, 200))):
            nested = [nested] if rng.random() < 0.5 else {"a": nested}
        return nested
    return [rng.choice(_NUMBERS) for _ in range(rng.choice((3, 1000)))]


#: How deep ``_paths`` looks. NOTE: a nested value set into another one (up to 200 levels each)
#: passed Python's recursion limit (seed 1, 400 cases); the deep part is the value under test.
MAX_PATH_DEPTH = 12


def _paths(body: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path to a value in ``body`` (dict keys and list indices), ``MAX_PATH_DEPTH`` deep."""
    if len(prefix) >= MAX_PATH_DEPTH:
        return
    items = body.items() if isinstance(body, dict) else enumerate(body) if isinstance(body, list) else ()
    for k, v in items:
        yield (*prefix, k)
        yield from _paths(v, (*prefix, k))


#: Output-length fields: never dropped. NOTE: without one, an OpenAI request may rightly
#: generate up to the context length (minutes on a CPU), which is not a failure.
_LENGTH_FIELDS = frozenset({"max_tokens", "max_new_tokens"})


def _mutate(body: dict[str, Any], endpoint: str, rng: random.Random) -> str:
    op = rng.randrange(3)
    paths = list(_paths(body))
    droppable = [p for p in paths if not (p[-1] in _LENGTH_FIELDS or (len(p) == 1 and p[0] == "sampling_params"))]
    if op == 0 and droppable:
        paths = droppable
        path = rng.choice(paths)
        parent = body
        for k in path[:-1]:
            parent = parent[k]
        del parent[path[-1]]
        return f"drop {'.'.join(map(str, path))}"
    if op == 1 and paths:
        path = rng.choice(paths)
        parent = body
        for k in path[:-1]:
            parent = parent[k]
        value = _adversarial(rng)
        while path[-1] in _LENGTH_FIELDS and value is None:  # NOTE: null is "no limit", as above
            value = _adversarial(rng)
        parent[path[-1]] = value
        return f"set {'.'.join(map(str, path))}"
    field = rng.choice((*_EXTRA_FIELDS[endpoint], "not_a_field"))
    target = body["sampling_params"] if endpoint == "/generate" and rng.random() < 0.5 and isinstance(
        body.get("sampling_params"), dict) else body
    target[field] = _adversarial(rng)
    return f"add {field}"


@dataclass(frozen=True)
class Case:
    """One fuzzed request."""

    index: int
    endpoint: str
    body: Any
    """A JSON value, or raw bytes that are not JSON."""
    what: str
    """The mutations applied, for a failure's message."""


def cases(seed: int, n: int) -> Iterator[Case]:
    """``n`` cases, deterministic for ``seed``; a few raw bodies that are not JSON at all."""
    rng = random.Random(seed)
    for i in range(n):
        endpoint = ENDPOINTS[i % len(ENDPOINTS)]
        if rng.random() < 0.05:
            yield Case(i, endpoint, rng.choice((b"", b"{", b"[1,2]", b"\xff\xfe", b"null", b'"text"')), "raw body")
            continue
        body = copy.deepcopy(_valid(endpoint))
        what = [_mutate(body, endpoint, rng) for _ in range(rng.randint(1, 3))]
        yield Case(i, endpoint, body, "; ".join(what))


@dataclass(frozen=True)
class Outcome:
    case: Case
    status: int
    """HTTP status; -1: no answer within the timeout; -2: unhealthy after it; -3: connection lost."""
    seconds: float
    detail: str


def send(base_url: str, case: Case, headers: dict[str, str] | None = None, timeout: float = 60) -> Outcome:
    """One case against the server. NOTE: a streamed answer is read to its end (a stream that starts 200
    and then fails carries its error in an event, which SGLang's clients see as an error)."""
    content = case.body if isinstance(case.body, bytes) else json.dumps(case.body).encode()
    t0 = time.monotonic()
    try:
        with httpx.stream("POST", base_url + case.endpoint, content=content, timeout=timeout,
                          headers={"content-type": "application/json", **(headers or {})}) as r:
            text = r.read().decode("utf-8", "replace")
            return Outcome(case, r.status_code, time.monotonic() - t0, text[:300])
    except httpx.TimeoutException:
        return Outcome(case, -1, time.monotonic() - t0, "no answer within the timeout")
    except httpx.TransportError as exc:  # NOTE: e.g. the server died mid-request: a finding, not a crash
        return Outcome(case, -3, time.monotonic() - t0, f"no answer: {type(exc).__name__}: {exc}")


def outcomes(base_url: str, seed: int, n: int, headers: dict[str, str] | None = None,
             timeout: float = 60) -> Iterator[Outcome]:
    """Send seed ``seed``'s first ``n`` cases in order; each one's outcome as it comes."""
    for case in cases(seed, n):
        yield send(base_url, case, headers, timeout)


def fuzz(base_url: str, seed: int, n: int, healthy: Callable[[], bool],
         headers: dict[str, str] | None = None, timeout: float = 60) -> list[Outcome]:
    """Send ``n`` cases in order; the outcomes that break the property (a status outside
    ``ACCEPTED``, or no answer), with the server's health checked after each of them and at the end."""
    bad = []
    for outcome in outcomes(base_url, seed, n, headers, timeout):
        if outcome.status not in ACCEPTED:
            bad.append(outcome)
            if not healthy():
                bad.append(Outcome(outcome.case, -2, 0.0, "server unhealthy after this case"))
                break
    if not healthy():
        bad.append(Outcome(Case(n, "", None, "end"), -2, 0.0, "server unhealthy at the end"))
    return bad
