"""Fitting the cost model's constants to measured forward-pass times.

A ``Point`` is one measured iteration (a prefill batch or a decode step) and
knows the ``CostModel`` call that models it. A ``Form`` names the
``AcceleratorConfig`` fields it sets and those it fits; ``fit`` minimizes the
squared log ratio model/measured (relative errors, so a 70 ms decode step
weighs as much as a 3 s prefill), over log parameters (all stay positive).
Peak FLOP/s and bandwidth stay as configured: only their efficiencies (at most
1) and the overheads are fitted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from bench.schema import AcceleratorConfig, ModelProfileConfig
from bench.sim.cost import CostModel

#: Starting value of a fitted field the accelerator leaves at 0 or null.
_START = {"request_overhead_s": 1e-3, "kv_bandwidth_efficiency": 0.1, "gemm_overhead_s": 0.01}


@dataclass(frozen=True)
class Point:
    """One measured forward iteration."""

    kind: str
    """``prefill`` (``requests`` fresh prompts of ``tokens`` tokens in one batch)
    or ``decode`` (``requests`` running, ``tokens`` of context each)."""
    requests: int
    tokens: int
    measured_s: float

    def model(self, cost: CostModel) -> float:
        if self.kind == "decode":
            return cost.decode_time(self.requests, self.requests * self.tokens)
        return cost.prefill_time([(self.tokens, 0)] * self.requests)

    @property
    def label(self) -> str:
        if self.kind == "decode":
            return f"decode {self.requests} x {self.tokens} ctx"
        return f"prefill {self.requests} x {self.tokens}" if self.requests > 1 else f"prefill {self.tokens}"


@dataclass(frozen=True)
class Form:
    """A cost-model form: fields it sets, fields it fits."""

    name: str
    free: tuple[str, ...]
    fixed: dict[str, Any] = field(default_factory=dict)
    doc: str = ""

    def without(self, name: str) -> Form:
        """This form with ``name`` kept as configured rather than fitted."""
        return replace(self, free=tuple(k for k in self.free if k != name))


#: The roofline as the GPU profiles use it.
ROOFLINE = Form("roofline", ("prefill_mfu", "decode_mfu", "bandwidth_efficiency", "iteration_overhead_s"),
                fixed={"overlap_compute_memory": True, "kv_bandwidth_efficiency": None,
                       "request_overhead_s": 0.0, "gemm_min_tokens": 0, "gemm_overhead_s": 0.0},
                doc="overhead + max(FLOPs / FLOP/s, bytes / bandwidth)")
#: The CPU extension (``bench/sim/cost.py``): compute and memory add, KV traffic
#: has its own bandwidth, every request in an iteration costs a fixed time, and
#: so does packing the weights once an iteration has ``gemm_min_tokens`` tokens
#: (``fit_additive`` picks that threshold).
ADDITIVE = Form("additive", ("prefill_mfu", "decode_mfu", "kv_bandwidth_efficiency",
                             "iteration_overhead_s", "request_overhead_s", "gemm_overhead_s"),
                fixed={"overlap_compute_memory": False},
                doc="overhead + requests * request overhead + GEMM packing + FLOPs / FLOP/s "
                    "+ weights / bw + KV / kv_bw (bandwidth_efficiency kept: per iteration, "
                    "the weight time and the overhead are one constant)")
#: Thresholds ``fit_additive`` tries for ``gemm_min_tokens``.
GEMM_THRESHOLDS = (2, 3, 4, 5, 6, 8, 12, 16)
#: NOTE: in a decode step the request overhead and the decode FLOPs both grow with
#: the batch; only prefill batches of several requests tell them apart, so
#: without such points ``request_overhead_s`` must stay fixed (``Form.without``).


@dataclass(frozen=True)
class Fit:
    """A fitted form and its errors."""

    form: Form
    accelerator: AcceleratorConfig
    errors: np.ndarray
    """model / measured - 1, per point."""

    @property
    def max_abs_error(self) -> float:
        return float(np.abs(self.errors).max())

    @property
    def mean_abs_error(self) -> float:
        return float(np.abs(self.errors).mean())

    def params(self) -> dict[str, Any]:
        """The fields this form sets or fits, as fitted."""
        acc = asdict(self.accelerator)
        return {k: acc[k] for k in (*self.form.fixed, *self.form.free)}


def _is_efficiency(name: str) -> bool:
    return name.endswith(("_mfu", "_efficiency"))


def at_bound(fitted: Fit) -> list[str]:
    """Efficiencies the fit pushed to 1 (their peak is likely set too low)."""
    return [k for k, v in fitted.params().items() if _is_efficiency(k) and v is not None and v > 0.999]


def predict(points: Sequence[Point], accel: AcceleratorConfig, model: ModelProfileConfig) -> np.ndarray:
    """Modelled seconds of every point."""
    cost = CostModel(accel, model)
    return np.array([p.model(cost) for p in points])


def fit(points: Sequence[Point], accel: AcceleratorConfig, model: ModelProfileConfig,
        form: Form) -> Fit:
    """Least-squares fit of ``form``'s free fields to ``points`` (see module docs)."""
    from scipy.optimize import least_squares

    if len(points) < len(form.free):
        raise ValueError(f"{len(points)} points cannot fit {len(form.free)} constants")
    base = replace(accel, **form.fixed)
    # NOTE: an efficiency above 1 would mean the peak is wrong; the bound keeps a
    # flat direction (decode FLOPs against request overhead) from running off.
    upper = np.array([0.0 if _is_efficiency(k) else np.inf for k in form.free])
    start = np.minimum(np.log([getattr(base, k) or _START[k] for k in form.free]), upper - 1e-6)
    measured = np.log([p.measured_s for p in points])

    def with_params(x: np.ndarray) -> AcceleratorConfig:
        # NOTE: Any as in ``Form.fixed``: the free fields are float fields of the
        # accelerator, which a dict keyed by field name cannot say to the type checker.
        params: dict[str, Any] = {k: float(math.exp(v)) for k, v in zip(form.free, x)}
        return replace(base, **params)

    def residuals(x: np.ndarray) -> np.ndarray:
        r: np.ndarray = np.log(predict(points, with_params(x), model)) - measured
        return r

    result = least_squares(residuals, start, bounds=(np.full(len(upper), -np.inf), upper),
                           method="trf", x_scale=1.0)
    fitted = with_params(result.x)
    errors = predict(points, fitted, model) / np.exp(measured) - 1
    return Fit(form, fitted, errors)


def fit_additive(points: Sequence[Point], accel: AcceleratorConfig, model: ModelProfileConfig,
                 form: Form = ADDITIVE, thresholds: Sequence[int] = GEMM_THRESHOLDS) -> Fit:
    """``form`` fitted at every ``gemm_min_tokens`` threshold; the best by squared
    log error (a threshold no point separates fits like no packing step at all)."""
    fits = [fit(points, accel, model, replace(form, fixed={**form.fixed, "gemm_min_tokens": t}))
            for t in thresholds]
    return min(fits, key=lambda f: float(np.sum(np.log1p(f.errors) ** 2)))
