"""``+speculative=sglang_adaptive``: SGLang 0.5.23's adaptive speculative step rule
(``--speculative-adaptive``, acceptance only), as a pure twin.

SGLang's rule (``sglang/srt/speculative/adaptive_spec_params.py``,
``AdaptiveSpeculativeParams`` routing to one ``AdaptiveStepSlot`` per batch
size; ``AdaptiveController`` in ``adaptive_runtime_state.py`` applies it):

* **Slots.** The config names batch sizes (``DEFAULT_ADAPTIVE_CONFIG``: 1, 8,
  32, 64), each with its candidate steps and hysteresis. A decode batch of
  ``b`` requests uses the slot of the largest configured batch size ``<= b``
  (the smallest slot when ``b`` is below all); with CUDA graphs on, ``b`` is
  first padded to the smallest captured graph batch size ``>= b``.
* **State per slot.** Current steps ``s`` (``initial_steps`` if among the
  slot's candidates, else its middle candidate ``cands[len // 2]``), an EMA
  ``e`` of accepted drafts starting at ``s - 1``, and a verify count ``n``.
* **Each verify** (a non-empty batch, routed to its slot): if ``s > 0``,
  ``e = (1 - ema_alpha) * e + ema_alpha * mean(accepted)``; ``n += 1``. Only
  when ``n > warmup_batches`` and ``(n - warmup_batches) % update_interval == 0``
  is ``s`` recomputed.
* **Recompute.** From ``s = 0``: probe the next candidate up (if ``e < 0``, ``e``
  restarts at that candidate ``- 1``). Else step down while
  ``e <= (0.5 if prev == 0 else prev - 0.5) + down_hysteresis`` (``prev``: the
  next lower candidate); if it did not step down, step up while
  ``e > s - 0.5 + up_hysteresis``. With ``ceiling_coeff > 0``, a target not
  above ``s`` is lowered to at most ``max(1, ceil(e * ceiling_coeff))``.
* **Each decode step** drafts the routed slot's current ``s``.

Mapping to this contract:

* SGLang's ``speculative_num_steps`` (EAGLE, ``topk=1``) is our draft length
  ``k``. SGLang's ``speculative_num_draft_tokens = steps + 1`` counts the
  verified root token too; both verify ``k + 1`` tokens per request.
* SGLang feeds the rule ``num_correct_drafts_per_req``: the verify's
  ``accept_lens`` (which include the bonus token) minus
  ``num_non_draft_tokens_per_req`` (1 for EAGLE;
  ``BatchResultProcessor._resolve_spec_v2_tokens``). So its "accept length"
  EMA is an EMA of accepted drafts, the bonus excluded: exactly
  ``SpecOutcome.accepted``, passed through unchanged. (The slot's own
  docstring formula ``round(ema_accept_len) + 1`` predates that and is stale.)
* SGLang routes by the decode batch's request count (``len(batch.reqs)`` at
  verify, ``seq_lens.shape[0]`` at draft): ``decode_batch_size``.
* A step of length 0 still reaches SGLang's rule (counted, EMA untouched), as
  our host reports length-0 steps too.

NOTE: the twin answers in the order its host calls it. SGLang's overlap
scheduler feeds step ``t``'s verify after step ``t + 1`` was launched, so there
step ``t + 1``'s length never sees step ``t``; a host that reports each outcome
before the next ask reacts one step sooner. The rule itself is identical.

NOTE: a slot's steps may exceed what the host can run (the default slot 1 goes
up to 7; ``speculative.max_draft_tokens`` defaults to 4). The twin then answers
the largest of ``view.candidates`` not above it (reason ``"... clamped"``) and
keeps SGLang's state unchanged: its EMA then sees at most the clamped length
accepted. ``needs.draft_lengths`` is therefore empty (any candidate): listing
the slots' steps would make such a host refuse the default config outright.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from policies.speculative import DraftDecision, SpecOutcome, SpecStepView, SpeculativeNeeds

# SGLang 0.5.23's DEFAULT_ADAPTIVE_CONFIG, by column, and AdaptiveStepSlot's fallbacks.
DEFAULT_BATCH_SIZES = (1, 8, 32, 64)
DEFAULT_CANDIDATE_STEPS = ((1, 3, 5, 7), (0, 1, 3), (0, 1), (0,))
DEFAULT_UP_HYSTERESIS = (0.0, 0.0, 0.0, 0.0)
DEFAULT_DOWN_HYSTERESIS = (-0.25, 0.0, 0.0, 0.0)
DEFAULT_CEILING_COEFF = (0.0, 0.0, 0.0, 0.0)
_SLOT_FALLBACKS = {"up_hysteresis": 0.0, "down_hysteresis": -0.25, "ceiling_coeff": 0.0}
_GLOBAL_FALLBACKS = {"ema_alpha": 0.2, "update_interval": 5, "warmup_batches": 10}


class _Slot:
    """One batch-size slot's state: SGLang's ``AdaptiveStepSlot``, arithmetic for arithmetic."""

    __slots__ = ("batch_size", "candidates", "up", "down", "ceiling", "steps", "ema", "count", "reason")

    def __init__(self, batch_size: int, candidates: tuple[int, ...], up: float, down: float, ceiling: float,
                 initial_steps: int) -> None:
        self.batch_size = batch_size
        self.candidates = candidates
        self.up, self.down, self.ceiling = up, down, ceiling
        self.steps = initial_steps if initial_steps in candidates else candidates[len(candidates) // 2]
        self.ema = float(self.steps - 1)
        self.count = 0
        self.reason = f"sglang slot {batch_size}"

    def update(self, accepted: tuple[int, ...], alpha: float, interval: int, warmup: int) -> None:
        if not accepted:
            return
        if self.steps > 0:
            batch_avg = sum(accepted) / len(accepted)
            self.ema = (1 - alpha) * self.ema + alpha * batch_avg
        self.count += 1
        if self.count <= warmup or (self.count - warmup) % interval != 0:
            return
        self._recompute()

    def _recompute(self) -> None:
        cands = self.candidates
        old = self.steps
        idx = old_idx = cands.index(old)
        if old == 0:
            idx = min(idx + 1, len(cands) - 1)
            target = cands[idx]
            if target > 0 and self.ema < 0:
                self.ema = float(target - 1)
            self.steps = target
            return
        while idx > 0:
            prev = cands[idx - 1]
            drop = 0.5 if prev == 0 else prev - 0.5
            drop += self.down
            if self.ema <= drop:
                idx -= 1
            else:
                break
        if not idx < old_idx:
            while idx < len(cands) - 1:
                rise = cands[idx] - 0.5 + self.up
                if self.ema > rise:
                    idx += 1
                else:
                    break
        target = cands[idx]
        if self.ceiling > 0:
            ceiling = max(1, math.ceil(self.ema * self.ceiling))
            if ceiling < target <= old:
                while idx > 0 and cands[idx] > ceiling:
                    idx -= 1
                target = cands[idx]
        self.steps = target


@dataclass(frozen=True)
class SglangAdaptivePolicy:
    """SGLang's adaptive step rule: per batch-size slot, an EMA of accepted
    drafts moves the draft length among the slot's candidates (see module docs).

    Per-slot parameters are columns, one entry per ``batch_sizes`` entry; a
    hysteresis or ceiling given as one number applies to every slot.
    ``from_sglang_config`` reads SGLang's own JSON form."""

    needs: ClassVar[SpeculativeNeeds] = SpeculativeNeeds(draft_lengths=(), step_timing=False)
    """Any candidate (slot steps above the host's maximum are clamped to it); no step timing."""

    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES
    """The slots' batch sizes (SGLang's integer config keys): a batch of ``b``
    uses the largest ``<= b`` (the smallest when ``b`` is below all)."""
    candidate_steps: Sequence[Sequence[int]] = DEFAULT_CANDIDATE_STEPS
    """Per slot, the draft lengths it moves among (sorted, duplicates dropped)."""
    up_hysteresis: float | Sequence[float] = DEFAULT_UP_HYSTERESIS
    """Per slot: step up while the EMA exceeds ``steps - 0.5`` plus this."""
    down_hysteresis: float | Sequence[float] = DEFAULT_DOWN_HYSTERESIS
    """Per slot: step down while the EMA is at most ``lower - 0.5`` (``0.5``
    when the lower candidate is 0) plus this."""
    ceiling_coeff: float | Sequence[float] = DEFAULT_CEILING_COEFF
    """Per slot: when ``> 0``, a length not above the current one is capped at
    ``max(1, ceil(EMA * ceiling_coeff))``; 0: no cap."""
    ema_alpha: float = 0.2
    """Weight of each verify's mean accepted drafts in its slot's EMA."""
    update_interval: int = 5
    """A slot recomputes its length every this many of its verifies (after warmup)."""
    warmup_batches: int = 10
    """A slot's first verifies that only feed its EMA (its length stays put)."""
    initial_steps: int | None = None
    """SGLang's ``--speculative-num-steps``: each slot starts there if it is
    one of its candidates, else at its middle candidate. ``None``: SGLang's
    resolution, the middle of all slots' candidates (3 for the defaults)."""
    cuda_graph_bs: Sequence[int] | None = None
    """Captured CUDA-graph decode batch sizes: SGLang pads a batch size up to the
    smallest of them ``>= b`` before choosing its slot. ``None`` (or empty):
    graphs off, no padding."""

    _slots: tuple[_Slot, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        sizes = _ints("batch_sizes", self.batch_sizes, minimum=1)
        n = len(sizes)
        if n == 0:
            raise ValueError("batch_sizes must name at least one slot")
        if len(set(sizes)) != n:
            raise ValueError(f"batch_sizes must not repeat, got {list(sizes)}")
        raw: object = self.candidate_steps
        if not isinstance(raw, Sequence) or isinstance(raw, str | bytes) or len(raw) != n:
            raise ValueError(f"candidate_steps needs one list per batch size ({n}), got {self.candidate_steps!r}")
        cands = tuple(tuple(sorted(set(_ints(f"candidate_steps[{i}]", c, minimum=0))))
                      for i, c in enumerate(self.candidate_steps))
        if any(not c for c in cands):
            raise ValueError(f"candidate_steps: each slot needs at least one length, got {self.candidate_steps!r}")
        up = _per_slot("up_hysteresis", self.up_hysteresis, n)
        down = _per_slot("down_hysteresis", self.down_hysteresis, n)
        ceil = _per_slot("ceiling_coeff", self.ceiling_coeff, n)
        if any(c < 0 for c in ceil):
            raise ValueError(f"ceiling_coeff must be >= 0, got {list(ceil)}")
        alpha = float(self.ema_alpha)
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"ema_alpha must be in [0, 1], got {self.ema_alpha}")
        interval = _int("update_interval", self.update_interval)
        if interval < 1:
            raise ValueError(f"update_interval must be >= 1, got {self.update_interval}")
        warmup = _int("warmup_batches", self.warmup_batches)
        if warmup < 0:
            raise ValueError(f"warmup_batches must be >= 0, got {self.warmup_batches}")
        union = sorted({s for c in cands for s in c})
        if self.initial_steps is None:
            initial = None
        else:
            initial = _int("initial_steps", self.initial_steps)
            if initial not in union:
                raise ValueError(f"initial_steps must be one of the candidate steps {union}, got {initial}")
        graph_bs = None
        if self.cuda_graph_bs is not None:
            graph_bs = tuple(sorted(_ints("cuda_graph_bs", self.cuda_graph_bs, minimum=1))) or None

        order = sorted(range(n), key=lambda i: sizes[i])
        for name, value in (("batch_sizes", tuple(sizes[i] for i in order)),
                            ("candidate_steps", tuple(cands[i] for i in order)),
                            ("up_hysteresis", tuple(up[i] for i in order)),
                            ("down_hysteresis", tuple(down[i] for i in order)),
                            ("ceiling_coeff", tuple(ceil[i] for i in order)),
                            ("ema_alpha", alpha), ("update_interval", interval), ("warmup_batches", warmup),
                            ("initial_steps", initial), ("cuda_graph_bs", graph_bs)):
            object.__setattr__(self, name, value)
        start = union[len(union) // 2] if initial is None else initial
        object.__setattr__(self, "_slots", tuple(
            _Slot(sizes[i], cands[i], up[i], down[i], ceil[i], start) for i in order))

    @classmethod
    def from_sglang_config(cls, config: Mapping[str, Any], *, initial_steps: int | None = None,
                           cuda_graph_bs: Sequence[int] | None = None) -> SglangAdaptivePolicy:
        """The twin of SGLang's ``--speculative-adaptive-config`` JSON (a dict
        as ``json.load`` reads it; integer-string keys are slots, other keys
        defaults under every slot's own). ``ema_alpha``, ``update_interval``
        and ``warmup_batches`` must come out the same in every slot."""
        entries = sorted((int(k), v) for k, v in config.items() if str(k).isdigit())
        if not entries:
            raise ValueError(f"the config names no batch-size slot, keys {list(config)}")
        merged = [{**config, **entry} for _, entry in entries]
        shared: dict[str, Any] = {}
        for name, fallback in _GLOBAL_FALLBACKS.items():
            values = {m.get(name, fallback) for m in merged}
            if len(values) != 1:
                raise ValueError(f"{name} differs between slots ({sorted(values)}); the twin holds one")
            shared[name] = values.pop()
        per_slot = {name: tuple(m.get(name, fallback) for m in merged) for name, fallback in _SLOT_FALLBACKS.items()}
        return cls(
            batch_sizes=tuple(bs for bs, _ in entries),
            candidate_steps=tuple(tuple(m.get("candidate_steps") or ()) for m in merged),
            up_hysteresis=per_slot["up_hysteresis"], down_hysteresis=per_slot["down_hysteresis"],
            ceiling_coeff=per_slot["ceiling_coeff"], ema_alpha=shared["ema_alpha"],
            update_interval=shared["update_interval"], warmup_batches=shared["warmup_batches"],
            initial_steps=initial_steps, cuda_graph_bs=cuda_graph_bs)

    def _route(self, batch_size: int) -> _Slot:
        graph_bs = self.cuda_graph_bs
        if graph_bs:
            i = bisect.bisect_left(graph_bs, batch_size)
            if i < len(graph_bs):
                batch_size = graph_bs[i]
        i = bisect.bisect_right(self.batch_sizes, batch_size) - 1
        return self._slots[max(0, i)]

    def slot_state(self, batch_size: int) -> tuple[int, float]:
        """``(steps, ema)`` of the slot a batch of ``batch_size`` uses (steps unclamped)."""
        slot = self._route(batch_size)
        return slot.steps, slot.ema

    def draft_length(self, view: SpecStepView) -> DraftDecision:
        slot = self._route(view.decode_batch_size)
        k = slot.steps
        if k in view.candidates:
            return DraftDecision(k, slot.reason)
        fit = max((c for c in view.candidates if c <= k), default=view.candidates[0])
        return DraftDecision(fit, f"{slot.reason}: {k} clamped")

    def observe_step(self, outcome: SpecOutcome) -> None:
        self._route(outcome.decode_batch_size).update(
            outcome.accepted, self.ema_alpha, self.update_interval, self.warmup_batches)


def _int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        raise ValueError(f"{name} must be an integer, got {value!r}")
    return int(value)


def _ints(name: str, values: object, minimum: int) -> tuple[int, ...]:
    if isinstance(values, str | bytes | Mapping) or not isinstance(values, Sequence):
        raise ValueError(f"{name} must be a list of integers, got {values!r}")
    out = tuple(_int(name, v) for v in values)
    if any(v < minimum for v in out):
        raise ValueError(f"{name} must hold integers >= {minimum}, got {list(out)}")
    return out


def _per_slot(name: str, value: object, n: int) -> tuple[float, ...]:
    """One float per slot: a sequence of ``n``, or one number for all."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        values: tuple[object, ...] = (value,) * n
    elif isinstance(value, Sequence) and not isinstance(value, str | bytes) and len(value) == n:
        values = tuple(value)
    else:
        raise ValueError(f"{name} needs a number or one per batch size ({n}), got {value!r}")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ValueError(f"{name} must hold finite numbers, got {value!r}")
        out.append(float(v))
    return tuple(out)
