"""Speculative decoding: how many tokens to draft in the next decode step.

Speculation pays only while the accelerator has spare compute: a verify pass
over ``b·(k+1)`` tokens costs little more than ``b`` tokens while it is
memory-bound, and up to ``k+1`` times more once it is compute-bound. The
decision is the draft length ``k`` of the next decode step (0 = plain decode).

Contract (the host's side):
  * Before each decode step (prefill-only batches excluded) the host asks
    ``draft_length`` once, with the decode batch size (decode requests only:
    prefills never count, vLLM#49548) and the lengths it can run
    (``candidates``, always ascending and holding 0). It drafts exactly the
    length answered for every request of that step.
  * A policy that also ``ObservesSpecOutcome`` is told each verified step's
    outcome: the length drafted, each request's accepted drafts (the bonus
    token excluded) and, if its ``needs.step_timing``, the step's wall time
    (draft plus verify). NOTE: outcomes arrive in step order, one per step
    asked, a step of length 0 included.
  * A policy that ``TakesStepTable`` is handed the deployment's offline table
    of step times (``speculative.table_path``) once, before the first step.
  * Changing the length between steps never changes the output: greedy output
    equals plain decoding token for token.

Contract (the policy's side): ``draft_length`` is deterministic given the view
and its past outcomes (no clocks), answers one of ``view.candidates``
(``check_decision``), and only lengths its ``needs.draft_lengths`` lists
when that is not empty.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class SpecStepView:
    """A decode step about to be drafted."""

    decode_batch_size: int
    """Requests decoding in this step (requests being prefilled excluded)."""
    candidates: tuple[int, ...]
    """Draft lengths the host can run, ascending, 0 (no drafting) included."""
    current: int
    """The length of the previous decode step (0 before the first)."""


@dataclass(frozen=True, slots=True)
class SpecOutcome:
    """One verified decode step."""

    decode_batch_size: int
    """Requests in the step."""
    draft_tokens: int
    """The draft length used (0: a plain decode step)."""
    accepted: tuple[int, ...]
    """Drafts accepted per request, each in ``0..draft_tokens`` (the bonus
    token the verify pass always yields is not counted)."""
    step_time_s: float = 0.0
    """Host wall time of drafting plus verify, in seconds (0 unless the
    policy's ``needs.step_timing``)."""


@dataclass(frozen=True, slots=True)
class DraftDecision:
    """The draft length of the next decode step."""

    draft_tokens: int
    """Tokens to draft per request (0: plain decode)."""
    reason: str = ""
    """Why, for logs and tables (``"probe"``, ``"guard"``, ...)."""


@dataclass(frozen=True, slots=True)
class StepTimeTable:
    """Measured decode step times of one deployment: ``seconds[(b, k)]`` is the
    wall time of one step of ``b`` decode requests drafting ``k`` tokens each.

    NOTE: a table is per deployment (model, hardware, flags); the host reads it
    from ``speculative.table_path`` and refuses a file that does not parse."""

    seconds: tuple[tuple[int, int, float], ...]
    """``(batch_size, draft_tokens, step_time_s)`` rows, one per measured cell."""

    def __post_init__(self) -> None:
        seen: set[tuple[int, int]] = set()
        for b, k, t in self.seconds:
            if b < 1 or k < 0 or not t > 0:
                raise ValueError(f"step-time row ({b}, {k}, {t}): needs batch >= 1, draft >= 0, time > 0")
            if (b, k) in seen:
                raise ValueError(f"step-time row ({b}, {k}) given twice")
            seen.add((b, k))

    @classmethod
    def from_json(cls, text: str) -> StepTimeTable:
        """The table a calibration wrote: JSON ``{"rows": [[batch, draft, seconds], ...], ...}``
        (other keys describe where it was measured). Raises ``ValueError`` saying what is wrong."""
        try:
            data = json.loads(text)
            rows = data["rows"]
            return cls(tuple((int(b), int(k), float(t)) for b, k, t in rows))
        except (ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"not a step-time table ({{\"rows\": [[batch, draft, seconds], ...]}}): {exc}") from exc

    def lookup(self) -> dict[tuple[int, int], float]:
        """The table as ``{(batch_size, draft_tokens): seconds}``."""
        return {(b, k): t for b, k, t in self.seconds}


@dataclass(frozen=True)
class SpeculativeNeeds:
    """What a speculation policy needs from its host.

    NOTE: the one place a host learns a policy's optional needs."""

    draft_lengths: tuple[int, ...] = ()
    """Every length the policy may answer (the host refuses a config whose
    largest exceeds ``speculative.max_draft_tokens``); empty: any candidate."""
    step_timing: bool = False
    """The policy reads ``SpecOutcome.step_time_s``: the host times every
    step (on a GPU, a synchronisation per step)."""


@runtime_checkable
class SpeculationPolicy(Protocol):
    """Chooses the draft length of each decode step."""

    needs: SpeculativeNeeds
    """What the policy needs from its host (``SpeculativeNeeds``)."""

    def draft_length(self, view: SpecStepView) -> DraftDecision:
        """The draft length of the step ``view`` describes (see module docs)."""
        ...


@runtime_checkable
class ObservesSpecOutcome(Protocol):
    """Optional face: the policy learns from each verified step."""

    def observe_step(self, outcome: SpecOutcome) -> None:
        """Called once per decode step asked, after its verify."""
        ...


@runtime_checkable
class TakesStepTable(Protocol):
    """Optional face: the policy starts from the deployment's offline table."""

    def seed_step_times(self, table: StepTimeTable) -> None:
        """Called once, before the first step, with the table the host read."""
        ...


@dataclass(frozen=True)
class SpeculativeHostConfig:
    """Host settings under ``speculative.*``: the deployment's, not the policy's.

    NOTE: both hosts read them from ``PolicySpec.host``, never from the policy."""

    algorithm: str = "NGRAM"
    """The drafter: ``NGRAM`` (n-gram lookup in the request's own tokens; the
    CPU path) or ``EAGLE``/``EAGLE3`` (a draft model; GPU only)."""
    max_draft_tokens: int = 4
    """The longest draft the host prepares for (buffers, KV reserved per
    decode step); the candidates are ``0..max_draft_tokens``."""
    table_path: str | None = None
    """A JSON table of measured step times (``bench/results/`` keeps the
    calibrated one; ``bench.scripts.tabletune_calibrate`` writes it) handed to
    a policy that ``TakesStepTable``; ``None``: none."""
    step_log: str | None = None
    """Server only: a JSONL file the scheduler appends every verified decode
    step to, as the policy saw it, with the step's request ids (what a
    calibration or a check of the policy reads); ``None``: none."""

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {self.algorithm!r}")
        if not 1 <= self.max_draft_tokens <= 16:
            raise ValueError(f"max_draft_tokens must be in 1..16, got {self.max_draft_tokens}")

    @property
    def candidates(self) -> tuple[int, ...]:
        """The lengths the host can run: ``0..max_draft_tokens``."""
        return tuple(range(self.max_draft_tokens + 1))


def load_step_table(path: str | None) -> StepTimeTable | None:
    """The table file ``speculative.table_path`` names (``None``: none), as both hosts
    read it; ``ValueError`` naming the field if it cannot be read or parsed."""
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return StepTimeTable.from_json(f.read())
    except (OSError, ValueError) as exc:
        raise ValueError(f"invalid value for 'speculative.table_path': {path}: {exc}") from exc


#: Drafters a host may be asked for (NGRAM runs on the CPU path).
ALGORITHMS = ("NGRAM", "EAGLE", "EAGLE3")


def check_decision(view: SpecStepView, needs: SpeculativeNeeds, decision: DraftDecision) -> DraftDecision:
    """Return ``decision``, or raise ``ValueError`` if the host cannot run it.

    NOTE: hosts call this on every decision; a length outside the candidates
    would size buffers the host never prepared."""
    k = decision.draft_tokens
    if k not in view.candidates:
        raise ValueError(f"speculation policy answered draft length {k}, not one of {view.candidates}")
    if needs.draft_lengths and k not in needs.draft_lengths:
        raise ValueError(f"speculation policy answered draft length {k}, outside its needs {needs.draft_lengths}")
    return decision


def check_outcome(outcome: SpecOutcome) -> SpecOutcome:
    """Return ``outcome``, or raise ``ValueError`` if it cannot be a verify's."""
    if len(outcome.accepted) != outcome.decode_batch_size:
        raise ValueError(f"{len(outcome.accepted)} accepted counts for a batch of {outcome.decode_batch_size}")
    if any(not 0 <= a <= outcome.draft_tokens for a in outcome.accepted):
        raise ValueError(f"accepted counts {outcome.accepted} outside 0..{outcome.draft_tokens}")
    return outcome
