"""Feedback from finished requests, for policies that learn online.

A policy of any kind that also implements ``ObservesFinished`` is told about
every request that leaves the system (finished or aborted), once, by its host
(the SGLang adapter or the simulator). Learning predictors (LEAP's length
head, Basin's session lifetimes) use it; nothing else is fed back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from policies.views import DllmView


@dataclass(frozen=True, slots=True)
class FinishedView:
    """A request that just left the system."""

    rid: str
    now: float
    """Host time, in seconds."""
    num_input_tokens: int
    """Prompt tokens."""
    num_output_tokens: int
    """Tokens generated."""
    num_cached_tokens: int = 0
    """Prompt tokens served from the prefix cache at its first prefill."""
    session_id: str | None = None
    aborted: bool = False
    """Aborted (client gone, rejected after admission, error) rather than finished."""
    features: tuple[float, ...] | None = None
    """The features the request was ranked on (``RequestView.features``), if any (LEAP)."""
    dllm: DllmView | None = None
    """A diffusion LM's request: its final block-round counts (``denoise_rounds``
    is the true number of denoising rounds it took)."""


@runtime_checkable
class ObservesFinished(Protocol):
    """Optional second face of a policy: it learns from finished requests."""

    def observe_finished(self, view: FinishedView) -> None:
        """Called once per request that left the system."""
        ...


@runtime_checkable
class EndsSessions(Protocol):
    """Optional face of a policy that tracks sessions: the host reports explicit ends."""

    def end_session(self, session_id: str, now: float) -> None:
        """The client ended ``session_id`` (SGLang's ``/close_session``)."""
        ...


@runtime_checkable
class PredictsOutputLength(Protocol):
    """Optional face of a policy that predicts output lengths from captured
    features: hosts log its prediction beside each finished request."""

    def predict_output_tokens(self, features: tuple[float, ...]) -> float:
        """Predicted output tokens of a request with ``features``."""
        ...
