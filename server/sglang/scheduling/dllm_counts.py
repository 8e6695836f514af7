"""One request's counts in a diffusion LM's block rounds.

The round host (``dllm.py``) keeps them as the request's kind record
(``state.kind_record``); finished-request reports read them back
(``finished_dllm_view``), so feedback needs nothing of the round host. No
SGLang, no torch. NOTE: invariant: of ``server/`` it imports only the leaf
``state.py``, so it reaches nothing through its imports
(tests/config/test_boundaries.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from policies.views import DllmView
from server.sglang.scheduling.state import kind_record


@dataclass
class DllmState:
    """What the host counts for one request (rounds, never clocks)."""

    last_round: int
    """The round it last ran in, or the round count when it arrived."""
    block_size: int
    words: int = 0
    lines: int = 0
    rounds_run: int = 0
    denoise_rounds: int = 0
    shared_rounds: int = 0
    """Rounds it ran in that carried prompt and denoising blocks together."""
    longest_wait: int = 0
    """The most rounds in a row it was passed over."""

    def view(self, prompt_blocks_left: int, **progress: Any) -> DllmView:
        """These counts as a ``DllmView``, with the host's view of its progress."""
        return DllmView(block_size=self.block_size, prompt_blocks_left=prompt_blocks_left,
                        denoise_rounds=self.denoise_rounds, prompt_words=self.words, prompt_lines=self.lines,
                        rounds_run=self.rounds_run, shared_rounds=self.shared_rounds,
                        longest_wait=self.longest_wait, **progress)


def finished_dllm_view(req: Any) -> DllmView | None:
    """The final counts of a diffusion LM's request leaving the system (``None``
    for a request the round host never saw)."""
    state = kind_record(req, DllmState)
    return None if state is None else state.view(prompt_blocks_left=0)
