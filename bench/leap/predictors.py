"""Output-length predictors judged offline on a live feedback log, as LEAP's head learns inside the server.

Every predictor here is the same RLS head (``policies/predictors/rls.py``, LEAP's
configured ``forgetting``/``ridge``/``prior_tokens``) on different features,
replayed online in the order the server finished the requests: each request is
predicted *before* the head learns from it, exactly as the server's head did.

* ``head``: LEAP's own features (the serving model's mean prompt embedding, as
  the server logged them).
* ``prompt length``: ``log(1 + prompt tokens)``, a one-feature regression.
* ``proxy``: the final hidden state (after the last norm) of a *separate* copy
  of the model, run over the chat-templated prompt and mean-pooled: one extra
  forward pass per request before it can be scheduled.

Costs are per request on this CPU (one thread), tokenization excluded (the
server has the tokens already): the embedding gather and mean, or the proxy's
forward pass, plus the head's prediction.

NOTE: the ``head`` replay must reproduce the server's logged predictions (same
features, same updates, same order); ``replay_gap`` reports how far it is.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.scripts.common import option_default
from bench.scripts.leap_curve import spearman
from policies.predictors.rls import RlsLengthHead
from policies.scheduling.leap import RIDGE_BY_FEATURES


@dataclass(frozen=True)
class Logged:
    """One finished request of the feedback log, joined with the prompt that was sent."""

    rid: str
    eval_name: str
    split: str
    messages: list[dict[str, str]]
    num_input_tokens: int
    num_output_tokens: int
    features: tuple[float, ...]
    server_prediction: float


def shipped_ridge(dim: int) -> float:
    """The ridge a server's LEAP head of ``dim`` features starts with: ``conf/policy/leap.yaml``'s,
    or when null the policy's choice for its feature set.

    NOTE: the policy runs the prompt-length features as a head of width 1 and the model's as wider."""
    held = option_default("policy", "leap", "ridge")
    return float(held) if held is not None else RIDGE_BY_FEATURES["prompt_length" if dim == 1 else "model"]


def _head(dim: int, ridge: float | None = None) -> RlsLengthHead:
    """A fresh head of ``dim`` features with LEAP's configured settings (``ridge``: that one instead)."""
    settings = {key: float(option_default("policy", "leap", key)) for key in ("forgetting", "prior_tokens")}
    return RlsLengthHead(dim, ridge=shipped_ridge(dim) if ridge is None else ridge, **settings)


def online(features: Sequence[Sequence[float]], true: Sequence[int], ridge: float | None = None) -> np.ndarray:
    """Predict-then-learn over the requests in order: each request's prediction before its update
    (``ridge``: instead of LEAP's configured one)."""
    rls = _head(len(features[0]), ridge)
    out = np.empty(len(true))
    for i, (x, y) in enumerate(zip(features, true)):
        out[i] = rls.predict(x)
        rls.update(x, y)
    return out


#: The ridge priors ``ridge_sweep`` tries (LEAP's ``ridge``: ``P`` starts at ``I / ridge``).
RIDGES = (0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0)


def ridge_sweep(features: Sequence[Sequence[float]], true: Sequence[int]) -> dict[float, float]:
    """Spearman of the online predictions over ``features``/``true`` (in order) for every ridge of ``RIDGES``.

    NOTE: fed the ``train`` evals only: LEAP's ``ridge`` is chosen here, never on the ``eval`` evals
    the table judges."""
    return {ridge: spearman(online(features, true, ridge), np.asarray(true)) for ridge in RIDGES}


def best_ridge(sweep: dict[float, float]) -> float:
    """The ridge with the highest Spearman; a tie within 0.005 goes to the smaller (weaker) prior."""
    top = max(sweep.values())
    return min(r for r, v in sweep.items() if v >= top - 0.005)


def trained_head(features: Sequence[Sequence[float]], true: Sequence[int]) -> RlsLengthHead:
    """A head with LEAP's settings that has learned from ``features``/``true`` in order."""
    rls = _head(len(features[0]))
    for x, y in zip(features, true):
        rls.update(x, y)
    return rls


def prompt_length_features(records: Sequence[Logged]) -> list[tuple[float]]:
    return [(float(np.log1p(r.num_input_tokens)),) for r in records]


class ProxyModel:
    """A separate copy of the checkpoint, used only to read prompts (module docs)."""

    def __init__(self, checkpoint: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(1)
        self.torch = torch
        self.tok = AutoTokenizer.from_pretrained(checkpoint)
        self.model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()

    def ids(self, messages: list[dict[str, str]]) -> list[int]:
        ids = self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        return [int(i) for i in ids]

    def features(self, ids: list[int]) -> tuple[tuple[float, ...], float]:
        """The mean final hidden state over ``ids``, and the seconds its forward pass took."""
        x = self.torch.tensor([ids])
        t0 = time.perf_counter()
        with self.torch.no_grad():
            hidden = self.model(x, output_hidden_states=True).hidden_states[-1][0].mean(0)
        return tuple(float(v) for v in hidden), time.perf_counter() - t0

    def embedding_seconds(self, ids: list[int]) -> float:
        """What LEAP's server-side features cost: the embedding gather and mean over ``ids``."""
        x = self.torch.tensor(ids)
        t0 = time.perf_counter()
        with self.torch.no_grad():
            self.model.get_input_embeddings()(x).mean(0)
        return time.perf_counter() - t0


def predict_seconds(dim: int, repeats: int = 200) -> float:
    """The head's own prediction cost for ``dim`` features (median of ``repeats``)."""
    rls = _head(dim)
    x = [float(v) for v in np.random.default_rng(0).normal(size=dim)]
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        rls.predict(x)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def judge(pred: np.ndarray, true: np.ndarray, mask: np.ndarray, cap: int) -> dict[str, Any]:
    """Spearman and the log-error model (``log(pred / true)``) over the ``mask``ed requests;
    Spearman again over those under the output cap (capped outputs tie at it)."""
    p, t = pred[mask], np.maximum(true[mask], 1)
    err = np.log(p) - np.log(t)
    uncapped = t < cap
    return {"requests": int(mask.sum()), "spearman": spearman(p, t),
            "spearman_uncapped": spearman(p[uncapped], t[uncapped]) if uncapped.sum() > 10 else float("nan"),
            "uncapped": int(uncapped.sum()),
            "log_error_mean": float(err.mean()), "log_error_std": float(err.std())}


def replay_gap(learned: Sequence[tuple[Sequence[float], int, float]]) -> float:
    """Largest relative gap between the server's logged predictions and the offline replay of its
    head over ``learned``: every ``(features, output tokens, logged prediction)`` the server's head
    learned from, in order (warm-up and health probes included)."""
    replay = online([f for f, _, _ in learned], [n for _, n, _ in learned])
    logged = np.array([p for _, _, p in learned])
    return float(np.max(np.abs(replay - logged) / logged))
