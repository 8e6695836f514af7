"""Encode a decision's prompts once: every prompt after the first reuses the first's tokens.

SGLang's ``/v1/decisions`` renders each question into a full prompt (the chat
template around the shared input, then the question) and tokenizes every
prompt whole: N questions over an input of T tokens tokenize N x T tokens.
On the tiny hybrid LFM2 that is half of a packed request's latency (~100 ms of
~210 ms for 32 questions over 2,048 tokens with SmolLM2's tokenizer).
``SharedPrefixEncoder`` encodes the first prompt whole and every later prompt
as the first's tokens up to a *cut* ``B`` followed by ``encode(prompt[B:])``.

Exactness (the ids equal ``tokenizer.encode(prompt, add_special_tokens=False)``)
rests on how a Hugging Face fast tokenizer encodes: added tokens are split out
first (left-most longest), each piece between them is split into pre-tokens by
a regex, and the model (BPE) encodes each pre-token alone. ``B`` is a pre-token
start of the first prompt (a word start in its encoding) that both prompts
share with margin: every decision that ends a pre-token at or before ``B``
reads characters before the end of the whitespace run at ``B`` (regex
alternatives stop at the first character outside their class, and
``\\s+(?!\\S)`` or ``\\s*[\\r\\n]+`` at the end of that run) or an added
token's length past its start, so with those characters shared the two prompts
split identically up to ``B``, and ``B`` is a split of the second prompt too,
from which its tail encodes alone as it would in place (no pattern looks behind).

NOTE: reuse is allowed only for tokenizers of that shape, read from the
tokenizer's own serialization (``reusable``): no normalizer; a ``ByteLevel``
pre-tokenizer without ``add_prefix_space`` (GPT-2, SmolLM2), alone or after one
isolating ``Split`` (Llama 3, Qwen 2); a BPE model without dropout; added tokens
without ``lstrip``/``rstrip``/``single_word``; no truncation or padding. Any other
tokenizer, and a reference whose backend encoding differs from the tokenizer's,
encodes every prompt whole: SGLang's own behaviour.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
from typing import Any

#: A prompt shorter than this is encoded whole and never becomes the reference:
#: reuse saves nothing on it (a label, a short question).
MIN_REFERENCE_CHARS = 256


def reusable(tokenizer: Any) -> int | None:
    """The added-token margin (longest added token, in characters, plus 2) when the
    tokenizer encodes split prompts exactly (see module docs); ``None`` otherwise.
    Read once per tokenizer (``_SHAPES``)."""
    key = id(tokenizer)
    if key not in _SHAPES:
        _SHAPES[key] = (tokenizer, _margin(tokenizer))
    return _SHAPES[key][1]


#: ``id(tokenizer) -> (tokenizer, reusable(tokenizer))`` (the tokenizer kept, so its id stays its own).
_SHAPES: dict[int, tuple[Any, int | None]] = {}


def _margin(tokenizer: Any) -> int | None:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or getattr(tokenizer, "split_special_tokens", False):
        return None
    if backend.normalizer is not None or backend.truncation or backend.padding:
        return None
    model = backend.model
    if type(model).__name__ != "BPE" or model.dropout not in (None, 0, 0.0):
        return None
    pre = backend.pre_tokenizer
    if pre is None or not _exact_pre_tokenizer(json.loads(pre.__getstate__())):
        return None
    added = list(backend.get_added_tokens_decoder().values())
    if any(a.lstrip or a.rstrip or a.single_word for a in added):
        return None
    return max((len(a.content) for a in added), default=0) + 2


def _byte_level(pt: dict[str, Any], use_regex: bool) -> bool:
    return pt.get("type") == "ByteLevel" and not pt.get("add_prefix_space") and bool(pt.get("use_regex")) == use_regex


def _exact_pre_tokenizer(pt: dict[str, Any]) -> bool:
    if _byte_level(pt, use_regex=True):
        return True
    if pt.get("type") != "Sequence":
        return False
    steps = pt.get("pretokenizers") or []
    return (len(steps) == 2 and steps[0].get("type") == "Split" and steps[0].get("behavior") == "Isolated"
            and not steps[0].get("invert") and _byte_level(steps[1], use_regex=False))


def shared_chars(a: str, b: str) -> int:
    """Length of the longest common prefix of ``a`` and ``b`` (binary search over C-level compares)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(frozen=True)
class _Reference:
    """The first prompt: its text, ids, and where each of its pre-tokens starts."""

    text: str
    ids: list[int]
    starts: list[int]
    """Character offset of each pre-token's first token, ascending."""
    first_token: list[int]
    """Index of that token."""


class SharedPrefixEncoder:
    """``tokenizer.encode(text, add_special_tokens=False)``, reusing the first long prompt's
    tokens (one per decision request: the prompts of one request share its input)."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._margin = reusable(tokenizer)
        self._ref: _Reference | None = None
        self.reused_tokens = 0
        """Tokens taken from the reference instead of encoded (for logs and tests)."""

    def encode(self, text: str) -> list[int]:
        ref = self._ref
        if ref is not None:
            cut = self._cut(ref, text)
            if cut is not None:
                chars, tokens = cut
                self.reused_tokens += tokens
                return ref.ids[:tokens] + self._whole(text[chars:])
        ids = self._whole(text)
        if ref is None and self._margin is not None and len(text) >= MIN_REFERENCE_CHARS:
            self._ref = self._reference(text, ids)
        return ids

    def _whole(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False))

    def _reference(self, text: str, ids: list[int]) -> _Reference | None:
        enc = self._tokenizer.backend_tokenizer.encode(text, add_special_tokens=False)
        if list(enc.ids) != ids:
            # NOTE: the backend is not what the tokenizer runs (a wrapper that changes ids):
            # nothing is reused, every prompt is encoded whole.
            self._margin = None
            return None
        # NOTE: an Encoding builds a fresh list on every ``offsets`` access: read it once
        offsets = enc.offsets
        starts, first = [], []
        previous: Any = object()
        for j, (word, (begin, _)) in enumerate(zip(enc.word_ids, offsets, strict=True)):
            if word is None or word != previous:
                starts.append(begin)
                first.append(j)
            previous = word
        # NOTE: a cut must cover its tokens exactly: keep only starts where the previous
        # token ends (offsets of byte-level tokens are contiguous; this guards the rest)
        keep = [i for i, j in enumerate(first) if j > 0 and offsets[j - 1][1] == starts[i]]
        return _Reference(text, ids, [starts[i] for i in keep], [first[i] for i in keep])

    def _cut(self, ref: _Reference, text: str) -> tuple[int, int] | None:
        """``(B, k)``: ``text[:B]`` is ``ref.ids[:k]`` exactly (module docs), or ``None``."""
        assert self._margin is not None
        shared = shared_chars(ref.text, text)
        i = bisect.bisect_right(ref.starts, shared - self._margin) - 1
        while i >= 0:
            b = ref.starts[i]
            # NOTE: the whitespace run at B must end (at a shared character) before the
            # prompts differ: the split at B depends on where it ends.
            run_end = b
            while run_end < shared and text[run_end].isspace():
                run_end += 1
            if run_end + 2 <= shared:
                return b, ref.first_token[i]
            i -= 1
        return None
