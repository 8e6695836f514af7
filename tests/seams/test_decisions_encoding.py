"""A decision's prompts encoded once (server/sglang/decisions/encoding.py) against the tokenizer itself.

The reference is the tokenizer's own ``encode(prompt, add_special_tokens=False)`` (what SGLang's
route runs per prompt), on the default model's real tokenizer (SmolLM2: byte-level BPE, GPT-2's
pre-tokenizer) and on the same vocabulary behind Llama 3's split pattern. Prompts are rendered with
the real chat template around a shared input, and adversarial strings put whitespace runs, digits,
contractions and added tokens right where two prompts start to differ. A tokenizer of another shape
(a normalizer, a metaspace pre-tokenizer) reuses nothing and stays exact.
"""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compose import model as model_cache
from server.sglang.decisions import serving
from server.sglang.decisions.encoding import MIN_REFERENCE_CHARS, SharedPrefixEncoder, reusable, shared_chars
from tests.config.generated_models import source_of

#: Llama 3's pre-tokenizer pattern (its tokenizer.json), with a byte-level step after it.
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
#: Pieces of adversarial text: whitespace of every kind, digits, contractions, punctuation, letters
#: (ASCII, accented, CJK) and the chat template's added tokens.
PIECES = [" ", "  ", "\n", "\n\n", "\t", "\r\n", "\xa0", "\u3000", "   \n  ", "1", "12", "1234", "'s", "'ll", "'",
          "a", "word", " word", "é", "àç", "中文", ".", "...", "(", ")", ",", "!?", "-", "<|im_start|>",
          "<|im_end|>", "<|endoftext|>", "<", "|", "im_"]


@pytest.fixture(scope="module")
def smollm2() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_cache.ensure_default_model(source_of()))


def _with_backend(tokenizer: Any, edit: Any) -> Any:
    """The tokenizer with its serialized backend edited (``edit(spec)`` in place)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    edit(spec)
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)))


def _llama3(spec: dict[str, Any]) -> None:
    spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3_SPLIT}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}


def _no_added_tokens(spec: dict[str, Any]) -> None:
    spec["added_tokens"] = []


@pytest.fixture(scope="module")
def shapes(smollm2: Any) -> list[Any]:
    """SmolLM2's tokenizer, its vocabulary behind Llama 3's split, and both without added tokens:
    the smallest margin (2), where the whitespace-run rule alone keeps Llama 3's cuts exact."""
    out = [smollm2, _with_backend(smollm2, _llama3), _with_backend(smollm2, _no_added_tokens),
           _with_backend(smollm2, lambda spec: (_llama3(spec), _no_added_tokens(spec)))]
    assert [reusable(t) for t in out[2:]] == [2, 2]
    return out


def _prompts(tokenizer: Any, shared: str, questions: list[str]) -> list[str]:
    return [tokenizer.apply_chat_template([{"role": "user", "content": shared + q}], tokenize=False,
                                          add_generation_prompt=True) for q in questions]


def _check(tokenizer: Any, texts: list[str]) -> SharedPrefixEncoder:
    encoder = SharedPrefixEncoder(tokenizer)
    for text in texts:
        assert encoder.encode(text) == tokenizer.encode(text, add_special_tokens=False), repr(text)
    return encoder


def test_shared_chars() -> None:
    assert [shared_chars(a, b) for a, b in [("", ""), ("abc", "abd"), ("abc", "abc"), ("ab", "abc"), ("x", "y")]] \
        == [0, 2, 3, 2, 0]


def test_the_default_tokenizer_reuses_and_the_ids_equal_its_own(smollm2: Any) -> None:
    shared = "The customer reports that the app logs them out every few minutes since the update. " * 20
    questions = [f"\n\nQuestion {i}: is this about {w}? Answer yes or no." for i, w in
                 enumerate(["billing", "the app", "a refund", "Android 14", "  spacing  ", "\n\nnewlines"])]
    encoder = _check(smollm2, _prompts(smollm2, shared, questions))
    first = len(smollm2.encode(_prompts(smollm2, shared, questions[:1])[0], add_special_tokens=False))
    # NOTE: all but a few tokens of each later prompt come from the first
    assert encoder.reused_tokens > (len(questions) - 1) * (first - 40)


@settings(max_examples=60, deadline=None)
@given(shared=st.lists(st.sampled_from(PIECES), min_size=0, max_size=300),
       tails=st.lists(st.lists(st.sampled_from(PIECES), max_size=12), min_size=2, max_size=6))
def test_adversarial_prompts_encode_exactly(smollm2: Any, shapes: list[Any], shared: list[str],
                                            tails: list[list[str]]) -> None:
    head = "x" * MIN_REFERENCE_CHARS + "".join(shared)  # long enough to become the reference
    texts = [head + "".join(t) for t in tails]
    for tokenizer in shapes:
        _check(tokenizer, texts)
        _check(tokenizer, _prompts(smollm2, "".join(shared) * 3, ["".join(t) for t in tails]))


def _cut_at(tokenizer: Any, ref: str, other: str, limit: int) -> list[int]:
    """``other`` encoded as ``ref``'s tokens up to its last pre-token start at or before ``limit``,
    then the rest alone: a cut without the encoder's whitespace-run rule."""
    ids = tokenizer.encode(ref, add_special_tokens=False)
    enc = tokenizer.backend_tokenizer.encode(ref, add_special_tokens=False)
    b = max(o[0] for o in enc.offsets if o[0] <= limit)
    k = next(j for j, o in enumerate(enc.offsets) if o[0] == b)
    return list(ids[:k]) + tokenizer.encode(other[b:], add_special_tokens=False)


def test_the_guards_matter(smollm2: Any, shapes: list[Any]) -> None:
    """Three cuts the encoder refuses, each wrong: at the last pre-token start the prompts share
    (no margin); at an added token's start that the other prompt does not complete (a margin
    shorter than the token); on Llama 3's split, past the margin but inside a whitespace run that
    ends differently (``\\n   y`` against ``\\n   \\nz``). The encoder stays exact on all."""
    head = "y" * MIN_REFERENCE_CHARS
    for tokenizer, ref, other, margin in [(smollm2, head + "hello  world", head + "hello  \n", 0),
                                          (smollm2, head + "a <|im_end|>", head + "a <|im_ex", 2),
                                          (shapes[3], head + "x\n   y", head + "x\n   \nz", 2)]:
        wrong = _cut_at(tokenizer, ref, other, shared_chars(ref, other) - 1 - margin)
        assert wrong != tokenizer.encode(other, add_special_tokens=False)
        _check(tokenizer, [ref, other])


@pytest.mark.parametrize("shape", ["normalizer", "metaspace", "lstrip"])
def test_other_tokenizer_shapes_encode_whole(smollm2: Any, shape: str) -> None:
    def edit(spec: dict[str, Any]) -> None:
        if shape == "normalizer":
            spec["normalizer"] = {"type": "NFC"}
        elif shape == "metaspace":
            spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                                     "split": True}
        else:
            spec["added_tokens"] = [dict(a, lstrip=True) for a in spec["added_tokens"]]
    tokenizer = _with_backend(smollm2, edit)
    assert reusable(tokenizer) is None
    texts = _prompts(smollm2, "shared input " * 40, ["one?", "two?", "three?"])
    assert _check(tokenizer, texts).reused_tokens == 0
    assert reusable(smollm2) is not None and reusable(copy.deepcopy(smollm2)) is not None


def test_the_hook_encodes_with_the_requests_encoder_only(smollm2: Any) -> None:
    """Inside ``packed_score``'s encoding the route's tokenizer is the request's encoder; any
    other caller (another request interleaving on the event loop) gets SGLang's own."""
    seen: list[str] = []

    def original(self: Any, content: str, labels: list[str], kwargs: dict[str, Any], images: list[Any],
                 system: str | None) -> list[int]:
        seen.append(type(self).__name__)
        return list(self.tokenizer_manager.tokenizer.encode(content, add_special_tokens=False))

    class Route:
        tokenizer_manager = type("TM", (), {"tokenizer": smollm2})()

    text = "z" * MIN_REFERENCE_CHARS + " shared input, then a question"

    async def one(encoder: SharedPrefixEncoder | None) -> list[list[int]]:
        token = serving._ENCODER.set(encoder)
        try:
            out = []
            for q in ("a?", "b?"):
                out.append(serving.encode_question_once(original, Route(), text + q, [], {}, []))
                await asyncio.sleep(0)
            return out
        finally:
            serving._ENCODER.reset(token)

    async def both() -> tuple[list[list[int]], list[list[int]]]:
        return await asyncio.gather(one(encoder), one(None))

    encoder = SharedPrefixEncoder(smollm2)
    packed, stock = asyncio.run(both())
    assert packed == stock == [smollm2.encode(text + q, add_special_tokens=False) for q in ("a?", "b?")]
    assert encoder.reused_tokens > 0
    assert seen.count("_With") == 2 and seen.count("Route") == 2


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=12), min_size=1, max_size=6))
def test_shared_context_is_the_longest_prefix_every_prompt_shares_leaving_each_one_token(prompts):
    want = 0
    while want < min(map(len, prompts)) - 1 and len({p[want] for p in prompts}) == 1:
        want += 1
    assert serving.shared_context(prompts) == want
