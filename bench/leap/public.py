"""A public, non-templated prompt set for LEAP: one request from each eval of OpenAI's evals registry.

Source: the ``evals`` package on PyPI (``EVALS_REQUIREMENT``; MIT license: its
README says contributed eval data is licensed under the repository's MIT
license). Its wheel carries ``evals/registry/data/<eval>/*.jsonl``: some 560
evals written by different people (maths, law, chemistry, poetry, translation,
puzzles, code, a dozen languages), each sample a chat request (system and user
messages, sometimes few-shot turns). One sample per eval is one request here, so
no two prompts share a template. The wheel is fetched with pip into the cache
directory (``$SWITCHBOARD_CACHE/prompts/``) the first time, never committed.

NOTE: the split is by eval (a hash of its name), never by sample: an eval's
prompts never reach both the head's training and its judgement.
"""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from compose.model import cache_root

EVALS_REQUIREMENT = "evals==3.0.1.post1"
WHEEL_NAME = "evals-3.0.1.post1-py3-none-any.whl"
DATA_PREFIX = "evals/registry/data/"
#: Longest request kept (characters over all its messages): the CPU model serves it in seconds.
MAX_CHARS = 2000
#: Lines read from the top of each sample file (some files hold 170 MB).
LINES_READ = 200
SPLITS = ("train", "eval")


@dataclass(frozen=True)
class PublicPrompt:
    """One chat request: the eval it comes from, its split and its messages."""

    eval_name: str
    split: str
    messages: tuple[tuple[str, str], ...]

    def openai_messages(self) -> list[dict[str, str]]:
        return [{"role": role, "content": content} for role, content in self.messages]


def split_of(eval_name: str) -> str:
    """``train`` or ``eval``, fixed by the eval's name."""
    return SPLITS[int(hashlib.sha256(eval_name.encode()).hexdigest(), 16) % 2]


def wheel_path(cache: Path | None = None) -> Path:
    """The ``evals`` wheel, downloaded with pip into the cache directory on first use."""
    folder = (cache or cache_root()) / "prompts"
    wheel = folder / WHEEL_NAME
    if not wheel.exists():
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                        "--quiet", "-d", str(folder), EVALS_REQUIREMENT], check=True)
        if not wheel.exists():
            raise FileNotFoundError(f"pip download {EVALS_REQUIREMENT} did not leave {wheel}")
    return wheel


def _chat(record: object) -> tuple[tuple[str, str], ...] | None:
    """A sample's messages, if it is a chat request with a user turn and fits ``MAX_CHARS``."""
    if not isinstance(record, dict) or not isinstance(record.get("input"), list):
        return None
    messages = []
    for m in record["input"]:
        if not (isinstance(m, dict) and m.get("role") in ("system", "user", "assistant")
                and isinstance(m.get("content"), str)):
            return None
        messages.append((str(m["role"]), str(m["content"])))
    if not any(role == "user" for role, _ in messages) or sum(len(c) for _, c in messages) > MAX_CHARS:
        return None
    return tuple(messages)


def _samples(archive: zipfile.ZipFile, name: str) -> Iterator[tuple[tuple[str, str], ...]]:
    with archive.open(name) as f:
        for i, line in enumerate(f):
            if i >= LINES_READ:
                return
            try:
                chat = _chat(json.loads(line))
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if chat is not None:
                yield chat


def public_prompts(split: str, seed: int = 0, per_eval: int = 1, wheel: Path | None = None) -> list[PublicPrompt]:
    """Up to ``per_eval`` distinct requests per eval of ``split``, evals in name order, samples
    drawn with ``seed``."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    with zipfile.ZipFile(wheel or wheel_path()) as archive:
        files: dict[str, list[str]] = {}
        for name in sorted(archive.namelist()):
            if name.startswith(DATA_PREFIX) and name.endswith(".jsonl"):
                files.setdefault(name[len(DATA_PREFIX):].split("/", 1)[0], []).append(name)
        out = []
        for eval_name, names in sorted(files.items()):
            if split_of(eval_name) != split:
                continue
            rng = random.Random(f"{seed}:{eval_name}")
            candidates = sorted({chat for name in names for chat in _samples(archive, name)})
            for chat in rng.sample(candidates, min(per_eval, len(candidates))):
                out.append(PublicPrompt(eval_name, split, chat))
    return out
