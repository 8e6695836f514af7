"""A packed decision request inside SGLang's scheduler: its layout, positions and readouts.

``serving.py`` sends one sequence per group of questions: the shared context
(``C`` tokens), then each question's suffix. Its layout travels with the
request as ``sampling_params.custom_params[LAYOUT_KEY] = [C, q_1, ..., q_N]``
(SGLang's own private channel to the scheduler, ``custom_params``), with the
readout indices (the last token of each question) as SGLang's own setwise
readout (``token_indices_to_pool``) and ``logprob_start_len = C`` (which also
caps a prefix-cache match at the context's end).

When SGLang builds a forward batch (``ForwardBatch.init_new``) this module
finds the packed rows, rewrites their positions (each question continues from
the context's end: ``kernels.segment_mask.packed_positions``), shifts their
readouts into the pass's coordinates (SGLang reads them relative to the
extend, after any prefix-cache hit) and files the rows' layouts by request id
for the attention (``attention.py``).

NOTE: a layout is only trusted when it matches the request exactly (lengths
sum to the prompt, readouts at each question's end, prefill only); any other
``custom_params`` value is ignored with a warning and the request runs as
SGLang's own, so a client of ``/generate`` cannot break the scheduler with it.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import torch

from kernels.segment_mask import packed_positions, packed_segment_ids
from server.sglang.scheduling.state import kind_record, put_kind_record

log = logging.getLogger(__name__)

#: The ``custom_params`` key carrying ``[C, q_1, ..., q_N]``.
LAYOUT_KEY = "__switchboard_flide"


@dataclass(frozen=True)
class PackedLayout:
    """One packed sequence: the context, then each question's suffix."""

    context: int
    """Tokens of the shared context."""
    questions: tuple[int, ...]
    """Tokens of each question's suffix, in order (each >= 1)."""

    @property
    def length(self) -> int:
        return self.context + sum(self.questions)

    def readouts(self) -> list[int]:
        """Absolute index of each question's last token (where its label is read)."""
        return [self.context + end - 1 for end in accumulate(self.questions)]

    def segment_ids(self) -> torch.Tensor:
        return packed_segment_ids(self.context, self.questions)

    def to_params(self) -> list[int]:
        return [self.context, *self.questions]

    @classmethod
    def parse(cls, value: Any) -> PackedLayout:
        """The layout ``to_params`` wrote; ``ValueError`` saying what is wrong."""
        if not isinstance(value, list) or len(value) < 2 or not all(type(x) is int for x in value):
            raise ValueError(f"{LAYOUT_KEY} must be [context, q_1, ..., q_N] of ints, got {value!r}")
        if value[0] < 1 or min(value[1:]) < 1:
            raise ValueError(f"{LAYOUT_KEY}: a context and every question need at least 1 token, got {value}")
        return cls(value[0], tuple(value[1:]))


@dataclass
class _Checked:
    """A request's layout as checked once (``None``: not packed, or refused)."""

    layout: PackedLayout | None = None


def layout_of(req: Any) -> PackedLayout | None:
    """``req``'s packed layout, checked against the request once (see module NOTE)."""
    checked = kind_record(req, _Checked)
    if checked is None:
        checked = _check(req)
        put_kind_record(req, checked)
    return checked.layout


def _check(req: Any) -> _Checked:
    params = getattr(req.sampling_params, "custom_params", None) or {}
    if LAYOUT_KEY not in params:
        return _Checked()
    try:
        layout = PackedLayout.parse(params[LAYOUT_KEY])
        if layout.length != len(req.origin_input_ids):
            raise ValueError(f"lengths sum to {layout.length}, the prompt has {len(req.origin_input_ids)} tokens")
        if list(req.token_indices_to_pool or ()) != layout.readouts():
            raise ValueError("token_indices_to_pool is not each question's last token")
        if req.sampling_params.max_new_tokens != 0 or req.logprob_start_len != layout.context:
            raise ValueError("a packed request is prefill only, its logprobs from the context's end")
    except ValueError as exc:
        log.warning("switchboard: request %s: ignoring its packed layout (%s); it runs unpacked", req.rid, exc)
        return _Checked()
    return _Checked(layout)


@dataclass(frozen=True)
class PackedRow:
    """A packed request's row in one forward batch."""

    layout: PackedLayout
    prefix: int
    """Tokens of the sequence already cached (a prefix-cache hit, at most the context)."""


#: The packed requests whose pass was built and not yet finished, by request id.
#: NOTE: keyed by id, not hung on the forward batch: SGLang's runners copy the
#: batch (``dataclasses.replace``) before the model runs, keeping only its fields;
#: ``rids`` is one. An entry leaves when the request is cached (``admission.py``);
#: the oldest leave first beyond ``_MAX_ROWS`` (aborted requests).
_ROWS: OrderedDict[str, PackedRow] = OrderedDict()
_MAX_ROWS = 4096


def packed_rows(rids: list[str] | None) -> dict[int, PackedRow]:
    """The packed rows of a forward batch with request ids ``rids``, by row."""
    if not rids or not _ROWS:
        return {}
    return {i: row for i, rid in enumerate(rids) if (row := _ROWS.get(rid)) is not None}


def forget(rid: str) -> None:
    """The request's pass is over (it is being cached)."""
    _ROWS.pop(rid, None)


def after_init_new(ret: Any, cls: Any, batch: Any, model_runner: Any, *args: Any, **kwargs: Any) -> Any:
    """``ForwardBatch.init_new`` AFTER hook: positions, readouts and layouts of packed rows."""
    mode = ret.forward_mode
    if not mode.is_extend() or mode.is_target_verify() or ret.extend_seq_lens_cpu is None:
        return ret
    start = 0
    for i, req in enumerate(batch.reqs):
        n = ret.extend_seq_lens_cpu[i]
        layout = layout_of(req)
        if layout is not None:
            prefix = ret.extend_prefix_lens_cpu[i]
            # NOTE: a packed request's match is capped at its context (logprob_start_len),
            # and it is never chunked (admission.py): the pass holds all its questions.
            if prefix > layout.context or prefix + n != layout.length:
                raise RuntimeError(f"switchboard: packed request {req.rid} in a pass of {prefix}+{n} tokens, "
                                   f"its layout has {layout.length} ({layout.context} of context)")
            positions = packed_positions(layout.segment_ids())[prefix:]
            ret.positions[start:start + n] = positions.to(ret.positions.device, ret.positions.dtype)
            shifted = [r - prefix for r in layout.readouts()]
            req.token_indices_to_pool = shifted
            if ret.token_indices_to_pool is not None:
                ret.token_indices_to_pool[i] = torch.tensor(shifted, dtype=torch.int64)
            _ROWS[req.rid] = PackedRow(layout, prefix)
            _ROWS.move_to_end(req.rid)
        start += n
    while len(_ROWS) > _MAX_ROWS:
        _ROWS.popitem(last=False)
    return ret
