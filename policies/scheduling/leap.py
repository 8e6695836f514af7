"""``+policy=leap``: shortest predicted remaining output first, lengths predicted from
the serving model's own representation of the prompt by a linear head learned online.

* **Features.** By default the host computes, when a request arrives and
  before it is first ranked, the mean of the serving model's input token
  embeddings over the prompt: the residual stream entering decoder layer 0,
  pooled (``RequestView.features``). It is a gather from the embedding table
  the server already holds: no forward pass, no encoder model. With
  ``hidden_state_layer=k`` the feature is instead the input hidden state of
  layer ``k`` at the last prompt token, which exists only after the prefill.
* **Prompt-length regression** (``features="prompt_length"``): the head reads
  only ``log(1 + prompt tokens)``, the baseline LEAP's paper compares against
  (``bench/results/leap_predictors.md``); no features are captured.
* **Prediction.** A ``LengthPredictor`` (default ``RlsLengthHead``: log-length,
  recursive least squares with forgetting) starts from zero knowledge (or a
  saved head, ``head_path``) and is corrected after every finished request.
* **Order.** Requests are ranked by predicted remaining tokens
  ``max(1, predicted - generated)``; a request without features is ranked by
  the prior (the running mean of finished lengths). Aging divides the rank by
  ``1 + waited / aging_tokens`` (waiting on the prefill-token clock), so
  nothing starves.

NOTE: inside SGLang the queue decides which request is prefilled, and so
starts decoding, next: the prediction that drives it must exist before the
prefill. The prompt embedding does; a layer-``k`` hidden state does not (with
``hidden_state_layer`` set, fresh arrivals share the prior and keep arrival
order; only requests that come back to the queue are reordered). The
simulator gives LEAP one prediction per request at arrival, with the error
measured for the prompt-embedding head live (``bench/results/leap.md``).

NOTE: the policy ranks columns (``rank``): one vectorized prediction over the
rows that carry features and one sort per pass, whatever the queue length.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from policies.feedback import FinishedView
from policies.predictors import LengthPredictor
from policies.predictors.rls import RlsLengthHead
from policies.scheduling import SchedulingNeeds
from policies.scheduling.columns import ColumnarOrder, QueueColumns

#: The head's ridge prior by feature set when ``policy.ridge`` is null. NOTE: each chosen on
#: the public prompt set's ``train`` evals only (``bench/scripts/leap_predictors.py``, whose
#: ``--check-defaults`` fails when a rebuild chooses another): the 576 embedding features
#: overfit a few hundred requests without a strong prior; the one prompt-length feature
#: wants the weakest.
RIDGE_BY_FEATURES = {"model": 100.0, "prompt_length": 0.1}


class LeapPolicy(ColumnarOrder):
    """LEAP scheduling (see module docs)."""


    def __init__(self, hidden_state_layer: int | None = None, feature_dim: int = 576,
                 forgetting: float = 0.999, ridge: float | None = None, prior_tokens: float = 64.0,
                 aging_tokens: float = 4194304.0, head_path: str | None = None, features: str = "model") -> None:
        if (hidden_state_layer is not None and hidden_state_layer < 0) or aging_tokens <= 0:
            raise ValueError("need hidden_state_layer >= 0 (or None) and aging_tokens > 0")
        if features not in ("model", "prompt_length"):
            raise ValueError(f"policy.features must be 'model' or 'prompt_length', got {features!r}")
        if features == "prompt_length" and hidden_state_layer is not None:
            raise ValueError("policy.features=prompt_length reads no hidden state: leave hidden_state_layer null")
        self.prompt_length = features == "prompt_length"
        model = not self.prompt_length
        self.needs = SchedulingNeeds(cache_hits=False, prompt_embedding=model and hidden_state_layer is None,
                                     hidden_state_layer=hidden_state_layer)
        """No prefix matching (the order reads predicted lengths only); features:
        the prompt's mean input embedding at arrival, or (``hidden_state_layer``)
        a layer's hidden state after prefill, or none (``prompt_length``)."""
        feature_dim = 1 if self.prompt_length else feature_dim
        ridge = RIDGE_BY_FEATURES[features] if ridge is None else ridge
        self.aging_tokens = aging_tokens
        self.predictor: LengthPredictor = (
            RlsLengthHead.load(Path(head_path)) if head_path else
            RlsLengthHead(feature_dim, forgetting=forgetting, ridge=ridge, prior_tokens=prior_tokens))
        self._log_sum = math.log1p(prior_tokens)
        self._count = 1

    @property
    def prior_tokens(self) -> float:
        """Geometric-mean output length of finished requests (the no-features guess)."""
        return math.expm1(self._log_sum / self._count)

    def predict_output_tokens(self, features: tuple[float, ...]) -> float:
        """The head's current prediction for a request with ``features``."""
        return float(self.predictor.predict(features))

    def rank(self, queue: QueueColumns) -> np.ndarray:
        if self.prompt_length:  # NOTE: every request has its prompt length from arrival
            total = self.predictor.predict_many(np.log1p(queue.num_input_tokens.astype(float))[:, None])
        else:
            total = np.full(len(queue), self.prior_tokens)
            if len(queue.feature_rows):
                total[queue.feature_rows] = self.predictor.predict_many(queue.features)
        remaining = np.maximum(total - queue.num_output_tokens, 1.0)
        waited = np.maximum(float(queue.processed_tokens) - queue.arrival_processed_tokens, 0.0)
        order: np.ndarray = np.lexsort((queue.arrival_seq, remaining / (1.0 + waited / self.aging_tokens)))
        return order

    def observe_finished(self, view: FinishedView) -> None:
        if view.aborted:
            return
        self._log_sum += math.log1p(view.num_output_tokens)
        self._count += 1
        features = (math.log1p(view.num_input_tokens),) if self.prompt_length else view.features
        if features is not None:
            self.predictor.update(features, view.num_output_tokens)
