"""Requests SGLang would accept and then crash on get a 400 in the HTTP process.

Found by ``bench.live.fuzz`` (seed 1) against SGLang 0.5.23 on CPU:
- token ids outside the vocabulary (``/v1/completions`` with ``"prompt": [0, -1]``,
  ``/generate`` with ``input_ids``) pass the tokenizer manager and reach the
  model's embedding, where ``IndexError`` kills the scheduler process: one
  request takes the whole server down (on CUDA the same read is a device-side
  assert, as fatal);
- ``n`` (parallel samples) is expanded into that many requests before any
  check: ``"n": 2147483648`` on ``/v1/completions`` grew the HTTP process past
  20 GiB until the kernel's OOM killer took the server down. ``n`` is capped at
  ``MAX_PARALLEL_SAMPLES``, OpenAI's own limit for the same field;
- ``sampling_params`` that is an empty list (or a list of non-objects): an
  ``IndexError`` (``AttributeError``) where SGLang reads its first item, a 500;
- ``session_params`` that are not SessionParams (an unknown key, a list, a
  wrong-typed field) raise ``TypeError`` in the tokenizer manager (a 500), or
  with a wrong-typed field travel on to the scheduler unchecked.

``check_fanout`` runs before SGLang expands a request (``normalize_batch_and_arguments``),
``check_request`` before SGLang's own ``_validate_one_request``: BEFORE hooks, in
the HTTP process only (the tokenizer manager lives there), raising
``ValueError``, which SGLang's handlers already answer with 400. Every request
passes it once, text-prompted ones too (their ids come from the tokenizer and
always pass); the cost is one min/max over the prompt's ids.
"""

from __future__ import annotations

from typing import Any

#: OpenAI's bound on ``n``; more samples of one prompt are the client's loop to run.
MAX_PARALLEL_SAMPLES = 128

#: Where SGLang expands a request into its batch and ``n`` samples (a row of the hook contract).
NORMALIZE_TARGET = "sglang.srt.managers.io_struct.GenerateReqInput.normalize_batch_and_arguments"
#: SGLang's per-request validation in the tokenizer manager (a row of the hook contract).
VALIDATE_TARGET = "sglang.srt.managers.tokenizer_manager.TokenizerManager._validate_one_request"


def out_of_vocabulary(input_ids: list[int] | None, vocab_size: int) -> str | None:
    """Why ``input_ids`` cannot be embedded (``None``: they can)."""
    if not input_ids:
        return None
    low, high = min(input_ids), max(input_ids)
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        return f"token id {bad} is outside the vocabulary; valid ids are [0, {vocab_size})"
    return None


def bad_session_params(session_params: Any) -> str | None:
    """Why ``session_params`` is not one SGLang ``SessionParams`` (``None``: it is, or is absent)."""
    if not session_params:
        return None  # NOTE: SGLang treats any falsy value as "no session"
    import msgspec
    from sglang.srt.managers.io_struct import SessionParams

    if not isinstance(session_params, dict):
        return f"session_params must be an object, got {type(session_params).__name__}"
    try:
        # NOTE: SessionParams is a msgspec Struct: its constructor checks names, not types;
        # converting its builtins back checks the types.
        msgspec.convert(msgspec.to_builtins(SessionParams(**session_params)), SessionParams)
    except (TypeError, msgspec.ValidationError) as exc:
        return f"invalid session_params: {exc}"
    return None


def too_many_samples(sampling_params: Any) -> str | None:
    """Why ``sampling_params`` (a dict, or a batch's list of them) cannot be expanded: an
    empty list or one of non-objects (SGLang reads ``[0].get``: IndexError, a 500), or ``n``."""
    if isinstance(sampling_params, list) and not sampling_params:
        return "sampling_params is an empty list"
    if isinstance(sampling_params, list) and not all(isinstance(p, dict) for p in sampling_params):
        return "sampling_params must be an object or a list of objects"
    batch = sampling_params if isinstance(sampling_params, list) else [sampling_params]
    for params in batch:
        n = params.get("n") if isinstance(params, dict) else None
        # NOTE: only a count can fan out; other types are SGLang's to refuse (bool is an int).
        if isinstance(n, int) and not isinstance(n, bool) and n > MAX_PARALLEL_SAMPLES:
            return f"n={n} samples is more than {MAX_PARALLEL_SAMPLES} per request"
    return None


def check_fanout(self: Any) -> None:
    """BEFORE hook on ``GenerateReqInput.normalize_batch_and_arguments``: raise ``ValueError`` (a 400)."""
    problem = too_many_samples(self.sampling_params)
    if problem is not None:
        raise ValueError(problem)


def check_request(self: Any, obj: Any, input_ids: list[int] | None) -> None:
    """BEFORE hook on ``TokenizerManager._validate_one_request``: raise ``ValueError`` (a 400)."""
    problem = out_of_vocabulary(input_ids, self.model_config.vocab_size) or bad_session_params(
        getattr(obj, "session_params", None))
    if problem is not None:
        raise ValueError(problem)


def install_input_guard() -> None:
    """Register the hook; the launcher calls it before SGLang's ``load_plugins`` applies hooks."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(NORMALIZE_TARGET, check_fanout, HookType.BEFORE)
    HookRegistry.register(VALIDATE_TARGET, check_request, HookType.BEFORE)
