"""``+speculative=table``: an operator's table of draft length per batch-size
range, as vLLM (``num_speculative_tokens_per_batch_size``, ``[start, end, k]``
ranges) and TensorRT-LLM (``draft_len_schedule``) take it. Nothing checks the
table against the hardware: that is what ``tabletune`` adds."""

from __future__ import annotations

from collections.abc import Sequence

from policies.speculative import DraftDecision, SpecStepView, SpeculativeNeeds

#: A hand-written table of the usual shape: long drafts alone, none under load.
DEFAULT_RANGES = ((1, 1, 3), (2, 4, 2), (5, 8, 1), (9, 1 << 20, 0))


class TablePolicy:
    """Draft the length of the range holding the decode batch size (0 outside every range)."""

    def __init__(self, ranges: Sequence[Sequence[int]] = DEFAULT_RANGES) -> None:
        rows = tuple((int(r[0]), int(r[1]), int(r[2])) for r in ranges if len(r) == 3)
        if len(rows) != len(ranges):
            raise ValueError(f"ranges: each row must be [start_bs, end_bs, draft_tokens], got {list(ranges)}")
        for start, end, k in rows:
            if not 1 <= start <= end or k < 0:
                raise ValueError(f"ranges: row [{start}, {end}, {k}] needs 1 <= start_bs <= end_bs, draft_tokens >= 0")
        ordered = sorted(rows)
        for (_, end, _), (start, _, _) in zip(ordered, ordered[1:], strict=False):
            if start <= end:
                raise ValueError(f"ranges: batch sizes {start}..{end} fall in two rows")
        self.ranges = tuple(ordered)
        """``(start_bs, end_bs, draft_tokens)`` rows, inclusive, disjoint."""
        self.needs = SpeculativeNeeds(draft_lengths=tuple(sorted({0} | {k for _, _, k in ordered})))
        """Its lengths (and 0, outside the table); no step timing."""

    def draft_length(self, view: SpecStepView) -> DraftDecision:
        b = view.decode_batch_size
        for start, end, k in self.ranges:
            if start <= b <= end:
                return DraftDecision(k, f"table {start}..{end}")
        return DraftDecision(0, "outside the table")
