"""``/v1/decisions`` answered by packing (Flide): SGLang's route, its schema, its arithmetic.

SGLang renders every question of a decision request into a full prompt (the
chat template around the shared input, then the question) and scores the N
prompts as N requests. This hook keeps all of that (validation, rendering,
labels, the response) and replaces only the scoring step, ``_score``:

1. the prompts' longest common prefix is the context ``C`` (capped so every
   question keeps at least one token); question ``i``'s suffix is the rest of
   its prompt: the same ids at the same positions as the prompt alone;
2. the policy (``policies.decisions``) decides, pass by pass, which questions
   go into one packed sequence (context, then their suffixes), within the
   prefill budget (SGLang's chunk size: a packed sequence is never chunked);
3. each pass is one request per group, read out at each question's last token
   (SGLang's setwise readout), its layout in ``custom_params`` (``layout.py``);
4. the label probabilities are SGLang's own arithmetic on those logprobs.

NOTE: the answer equals stock ``/v1/decisions`` on the same prompts: each
question's readout is the next-token distribution after its full prompt.
``usage.prompt_tokens`` stays the stock value (the prompts' total); the
tokens actually computed are logged at debug level.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from policies.decisions import (
    DecisionsPolicy,
    Group,
    PackView,
    PendingDecision,
    check_pack,
    longest_sequence,
)
from server.sglang.decisions.encoding import SharedPrefixEncoder
from server.sglang.decisions.layout import LAYOUT_KEY, PackedLayout

log = logging.getLogger(__name__)
_ids = itertools.count()


def shared_context(prompts: Sequence[Sequence[int]]) -> int:
    """Tokens every prompt shares from its start, leaving each at least one of its own."""
    rows = [list(p) for p in prompts]
    # NOTE: commonprefix walks once, between the least and the greatest prompt (not once per prompt)
    return max(0, min(len(os.path.commonprefix(rows)), min(len(p) for p in rows) - 1))


@dataclass
class PackingHost:
    """What the route hands the policy: one decision request at a time."""

    policy: DecisionsPolicy
    holds_context: bool = True
    """The prefix cache keeps a computed context for the next pass. NOTE: never
    claimed for a recurrent model (``score(recurrent=True)``): its state is cached
    only at a request's end, so a split request repeats its context."""

    def budget(self, server_args: Any) -> int:
        """The most tokens one packed sequence may hold: SGLang's chunk size (else its
        prefill budget)."""
        chunk = server_args.chunked_prefill_size
        return int(chunk) if chunk is not None and chunk > 0 else int(server_args.max_prefill_tokens)

    async def score(self, serving: Any, prompts: list[list[int]], label_ids: list[list[int]], raw_request: Any,
                    temperature: float, recurrent: bool = False) -> Any:
        """SGLang's ``ScoreResult`` for the prompts, computed in packed passes."""
        from sglang.srt.managers.tokenizer_manager_score_mixin import ScoreResult

        tm = serving.tokenizer_manager
        context = shared_context(prompts)
        request = PendingDecision(f"decision-{next(_ids)}", context,
                                  tuple((i, len(p) - context) for i, p in enumerate(prompts)), time.monotonic())
        budget = self.budget(tm.server_args)
        if longest_sequence(request) > budget:
            raise ValueError(f"a question with its shared input is {longest_sequence(request)} tokens; "
                             f"the prefill budget is {budget} (SGLang's chunked_prefill_size)")
        rows: dict[int, list[Any]] = {}
        computed = 0
        while request.question_tokens:
            view = PackView((request,), budget, time.monotonic())
            pack = self.policy.next_pack(view)
            check_pack(view, pack, packed=True)
            outs = await self._run(tm, prompts, context, pack.groups, label_ids, raw_request)
            for group, out in zip(pack.groups, outs, strict=True):
                readouts = out["meta_info"]["input_token_ids_logprobs"]
                rows.update(zip(group.questions, readouts, strict=True))
                computed += out["meta_info"].get("prompt_tokens", 0) - out["meta_info"].get("cached_tokens", 0)
            done = {i for g in pack.groups for i in g.questions}
            request = PendingDecision(request.request_id, context,
                                      tuple(q for q in request.question_tokens if q[0] not in done),
                                      request.arrived, self.holds_context and not recurrent)
        scores, token_logprobs = [], []
        for i, labels in enumerate(label_ids):
            lp = tm._extract_logprobs_for_tokens(rows[i], labels)
            scores.append(tm._convert_logprobs_to_scores(lp, labels, True, temperature))
            token_logprobs.append([lp[t] for t in labels])
        log.debug("switchboard: decision of %d questions, %d shared tokens: %d tokens computed",
                  len(prompts), context, computed)
        return ScoreResult(scores=scores, prompt_tokens=sum(len(p) for p in prompts), token_logprobs=token_logprobs)

    @staticmethod
    async def _run(tm: Any, prompts: list[list[int]], context: int, groups: Sequence[Group],
                   label_ids: list[list[int]], raw_request: Any) -> list[dict[str, Any]]:
        """One pass: a packed request per group, sent together; their outputs in order."""
        from sglang.srt.managers.io_struct import GenerateReqInput

        inputs, readouts, labels, params = [], [], [], []
        for g in groups:
            layout = PackedLayout(context, tuple(len(prompts[i]) - context for i in g.questions))
            inputs.append(prompts[g.questions[0]][:context] + [t for i in g.questions for t in prompts[i][context:]])
            readouts.append(layout.readouts())
            labels.append(list(dict.fromkeys(t for i in g.questions for t in label_ids[i])))
            params.append({"max_new_tokens": 0, "custom_params": {LAYOUT_KEY: layout.to_params()}})
        one = len(groups) == 1
        obj = GenerateReqInput(
            input_ids=inputs[0] if one else inputs, token_ids_logprob=labels[0] if one else labels,
            return_logprob=True, logprob_start_len=context, stream=False,
            sampling_params=params[0] if one else params, token_indices_to_pool=readouts[0] if one else readouts)
        out = await tm.generate_request(obj, raw_request).__anext__()
        return [out] if one else list(out)


#: The host the route uses in this process (set by the binding's ``install``).
HOST: PackingHost | None = None


async def packed_score(original: Any, serving: Any, adapted_request: Any, raw_request: Any,
                       temperature: float = 1.0) -> Any:
    """``OpenAIServingDecisions._score`` AROUND hook: pack when the host can."""
    from sglang.srt.entrypoints.openai.serving_decisions import OpenAIServingDecisions, _encode_all

    if HOST is None or type(serving) is not OpenAIServingDecisions:
        # NOTE: /v1/systemone subclasses the route; it keeps SGLang's own scoring
        return await original(serving, adapted_request, raw_request, temperature)
    # NOTE: the encoder is this request's (a context variable: requests whose questions
    # interleave on the event loop each see their own); SGLang's route is encoded whole
    encoder = SharedPrefixEncoder(serving.tokenizer_manager.tokenizer)
    encoding = _ENCODER.set(encoder)
    try:
        prompts, label_ids, images = await _encode_all(adapted_request)
    finally:
        _ENCODER.reset(encoding)
    log.debug("switchboard: decision prompts encoded, %d tokens reused", encoder.reused_tokens)
    model_config = serving.tokenizer_manager.model_config
    if any(images) or len(prompts) < 2 or not _packable(model_config):
        return await original(serving, iter(list(zip(prompts, label_ids, images, strict=True))), raw_request,
                              temperature)
    result = await HOST.score(serving, prompts, label_ids, raw_request, temperature, _recurrent(model_config))
    return prompts, label_ids, result


#: The prompt encoder of the decision request being encoded (``packed_score``); ``None``: SGLang's own.
_ENCODER: ContextVar[SharedPrefixEncoder | None] = ContextVar("switchboard_decision_encoder", default=None)


def encode_question_once(original: Any, serving: Any, content: str, labels: list[str],
                         chat_template_kwargs: dict[str, Any], images: list[Any], system: str | None = None) -> Any:
    """``OpenAIServingDecisions._encode_question`` AROUND hook: SGLang's rendering, checks and
    label ids, with the prompt encoded by the request's ``SharedPrefixEncoder`` (``encoding.py``:
    the same ids, the shared input tokenized once)."""
    encoder = _ENCODER.get()
    if encoder is None or images:
        return original(serving, content, labels, chat_template_kwargs, images, system)
    return original(_With(serving, tokenizer_manager=_With(serving.tokenizer_manager, tokenizer=_With(
        serving.tokenizer_manager.tokenizer, encode=_encode_with(encoder, serving.tokenizer_manager.tokenizer)))),
        content, labels, chat_template_kwargs, images, system)


class _With:
    """``obj`` with some attributes replaced (everything else is ``obj``'s own, bound to it)."""

    def __init__(self, obj: Any, **replaced: Any) -> None:
        self.__dict__.update(replaced, _obj=obj)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_obj"], name)


def _encode_with(encoder: SharedPrefixEncoder, tokenizer: Any) -> Any:
    def encode(text: str, add_special_tokens: bool = True, **kwargs: Any) -> list[int]:
        if add_special_tokens or kwargs:
            return list(tokenizer.encode(text, add_special_tokens=add_special_tokens, **kwargs))
        return encoder.encode(text)
    return encode


#: Hybrid architectures whose recurrent layers restart each packed question from the
#: context's end (``conv.py``: LFM2's short convolutions).
RESTARTABLE = frozenset({"Lfm2ForCausalLM"})


def _recurrent(model_config: Any) -> bool:
    """A hybrid model with recurrent layers (SGLang's "mamba-ish" models)."""
    from sglang.srt.configs.hybrid_arch import mambaish_config

    return mambaish_config(model_config) is not None


def _packable(model_config: Any) -> bool:
    """Attention-only models, and hybrids whose recurrent layers restart per question;
    any other hybrid keeps SGLang's own scoring (its state at the context's end
    is not reachable mid-sequence)."""
    return not _recurrent(model_config) or set(model_config.hf_config.architectures or ()) <= RESTARTABLE
