"""Probes of a live server's KV tiers (SGLang's HiCache: device, host, storage) over ``/generate``.

A prompt's first answer is computed from nothing; pushing it out of a tier
means sending enough fresh prompts after it (LRU); its repeat then says where
its prefix came from (``meta_info.cached_tokens_details``, with
``sglang.enable_cache_report=true``). Used by ``tests/live/test_server_hicache.py``
and the disk rows of ``bench.scripts.reliability``.
"""

from __future__ import annotations

import errno
import random
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench.live.chat import metric_total
from bench.live.faults import healthy

TIERS = ("device", "host", "storage")
#: SGLang's log line for each storage page it could not write (``HiCacheFile.set``).
FAILED_SAVE = "Failed to save tensor"
#: SGLang's counter of tokens written to storage.
STORED = "sglang:backuped_tokens_total"
_WORDS = ("time year people way day man thing woman life child world school state family student group "
          "country problem hand part place case week company system program question work number night "
          "point home water room mother area money story fact month lot right study book eye job word").split()


def hicache_overrides(storage: Path, device_tokens: int) -> tuple[str, ...]:
    """A server with SGLang's host tier and file storage in ``storage``, a ``device_tokens`` pool and
    per-tier cache reports.

    NOTE: float32: a repeat's answer is compared with its first token for token (in
    bfloat16 a cached-prefix pass may flip a near-tie against the full prefill)."""
    return ("model.dtype=float32", "sglang.enable_hierarchical_cache=true", f"sglang.max_total_tokens={device_tokens}",
            "sglang.enable_cache_report=true", "sglang.hicache_storage_backend=file",
            f"sglang.hicache_storage_backend_extra_config={{file_storage_path:'{storage}'}}")


def host_tokens(device_tokens: int) -> int:
    """SGLang's host tier at its default ratio (2) for a ``device_tokens`` pool, padding page included."""
    return 2 * device_tokens + 1


def fresh_text(rng: random.Random, n_words: int) -> str:
    """A prompt that shares no prefix with any other (a random tag first), of ``n_words`` common words."""
    return f"#{rng.getrandbits(48):x}: " + " ".join(rng.choice(_WORDS) for _ in range(n_words))


def generate(url: str, text: str, max_new_tokens: int = 16, salt: str | None = None,
             session: str | None = None) -> dict[str, Any]:
    """One greedy ``/generate`` answer (raises on a non-200), of ``session`` if given."""
    body: dict[str, Any] = {"text": text, "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens}}
    if salt is not None:
        body["cache_salt"] = salt
    if session is not None:
        body["session_id"] = session
    r = httpx.post(url + "/generate", json=body, timeout=300)
    r.raise_for_status()
    out: dict[str, Any] = r.json()
    return out


def tiers(answer: dict[str, Any]) -> dict[str, int]:
    """Where an answer's cached prefix came from: ``{"device": ..., "host": ..., "storage": ...}``."""
    details = answer["meta_info"].get("cached_tokens_details") or {}
    return {tier: int(details.get(tier, 0)) for tier in TIERS}


def push_out(url: str, rng: random.Random, tokens: int, n_words: int) -> int:
    """Send fresh prompts until more than ``tokens`` prompt tokens went through; return the count sent."""
    sent = 0
    while sent <= tokens:
        sent += int(generate(url, fresh_text(rng, n_words))["meta_info"]["prompt_tokens"])
    return sent


def repeats_after_push(url: str, rng: random.Random, n: int, n_words: int, push_tokens: int) -> dict[str, Any]:
    """``n`` fresh prompts, then ``push_tokens`` of others, then the ``n`` again: how the repeats were served.

    Returns requests sent, answered (200) and failed (anything else, by kind),
    repeats equal to their first answer, and the prefix tokens the repeats took
    from each tier."""
    outcomes: Counter[str] = Counter()
    firsts: list[tuple[str, str]] = []
    served = dict.fromkeys(TIERS, 0)
    equal = 0

    def ask(text: str) -> dict[str, Any] | None:
        try:
            answer = generate(url, text)
        except httpx.HTTPStatusError as exc:
            outcomes[f"HTTP {exc.response.status_code}"] += 1
            return None
        except httpx.HTTPError as exc:
            outcomes[type(exc).__name__] += 1
            return None
        outcomes["answered"] += 1
        return answer

    for _ in range(n):
        text = fresh_text(rng, n_words)
        answer = ask(text)
        if answer is not None:
            firsts.append((text, answer["text"]))
    pushed = 0
    while pushed <= push_tokens:
        answer = ask(fresh_text(rng, n_words))
        if answer is None:
            break
        pushed += int(answer["meta_info"]["prompt_tokens"])
    for text, first in firsts:
        again = ask(text)
        if again is not None:
            equal += again["text"] == first
            for tier, count in tiers(again).items():
                served[tier] += count
    return {"sent": sum(outcomes.values()), "outcomes": dict(outcomes), "repeats": len(firsts),
            "repeats_equal": equal, "repeat_tokens_from": served}


def make_unwritable(storage_dir: Path) -> None:
    """Every later write into ``storage_dir`` fails (ENOTDIR): the directory becomes a file.

    NOTE: what a read-only or vanished volume does to a writer, without the
    privileges a remount needs; pages already written are gone with it."""
    shutil.rmtree(storage_dir)
    storage_dir.write_text("not a directory: bench.live.tiers.make_unwritable\n")


def fill_up(storage_dir: Path) -> int:
    """Write a ballast file into ``storage_dir`` until its filesystem is full (ENOSPC); return its bytes.

    NOTE: chunks shrink from 1 MiB to 4 KiB, so what is left is less than a page."""
    written = 0
    with open(storage_dir / "ballast.bin", "wb", buffering=0) as ballast:
        for chunk in (1 << 20, 1 << 16, 1 << 12):
            zeros = bytes(chunk)
            while True:
                try:
                    written += ballast.write(zeros)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    return written


def storage_fault(url: str, log_path: Path, break_storage: Callable[[], object], rng: random.Random, n: int,
                  n_words: int, push_tokens: int) -> dict[str, Any]:
    """Repeats served with working storage, then ``break_storage()``, then the same with broken storage.

    Also: SGLang's failed-page log lines and its stored-token counter
    (``sglang:backuped_tokens_total``) across the fault, and health after."""
    before = repeats_after_push(url, rng, n, n_words, push_tokens)
    failed0, stored0 = log_path.read_text(errors="replace").count(FAILED_SAVE), metric_total(url, STORED, timeout=30)
    broke = break_storage()
    after = repeats_after_push(url, rng, n, n_words, push_tokens)
    failed = log_path.read_text(errors="replace").count(FAILED_SAVE) - failed0
    return {"before": before, "after": after, "break": broke, "failed_page_writes": failed,
            "stored_tokens_during_fault": metric_total(url, STORED, timeout=30) - stored0,
            "healthy_after": healthy(url, timeout=30)}
