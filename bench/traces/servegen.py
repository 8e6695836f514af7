"""ServeGen workload synthesis (alibaba/ServeGen ``data/``, Xiang et al., NSDI'26).

ServeGen publishes distributions, not requests. Per client (``chunk-N``):

* ``chunk-N-trace.csv``: consecutive 600 s windows ``window_start_s, rate, cv,
  pattern, arg1, arg2``: mean rate (req/s) and the fitted inter-arrival
  distribution (``Gamma``: shape ``arg1``, scale ``arg2``; ``Weibull``: shape
  ``arg1``, scale ``arg2``); an empty pattern means no traffic;
* ``chunk-N-dataset.json``: per 6 h window, probability mass functions of
  ``input_tokens`` and ``output_tokens`` as Python dict literals.

Arrivals are synthesized as ServeGen's own generator does: per client window,
``ceil(rate * window)`` inter-arrival gaps drawn from the fitted distribution,
rescaled to fill the window, accumulated from its start; lengths are drawn from
the latest non-empty dataset window at or before it. Only clients with a
dataset file can be synthesized (language/m-small and reason/deepseek-r1 here).
Everything is seeded: the same config gives the same requests.
"""

from __future__ import annotations

import ast
import json
import lzma
import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from bench.traces.trace import Trace, TraceRequest

#: Length of one ServeGen rate window, in seconds.
WINDOW_S = 600.0


def _read_text(path: Path) -> str:
    if path.suffix == ".xz":
        with lzma.open(path, "rt") as f:
            return f.read()
    return path.read_text()


def _find(folder: Path, stem: str) -> Path | None:
    for candidate in (folder / stem, folder / f"{stem}.xz"):
        if candidate.exists():
            return candidate
    return None


def client_ids(folder: Path) -> list[int]:
    """Clients of a category/model folder that have a dataset (synthesizable)."""
    ids = {int(p.name.split("-")[1]) for p in folder.glob("chunk-*-dataset.json*")}
    return sorted(ids)


def read_windows(path: Path) -> list[tuple[float, float, str, float, float]]:
    """``(start_s, rate, pattern, arg1, arg2)`` of every window with traffic."""
    windows = []
    for line in _read_text(path).splitlines():
        if not line.strip():
            continue
        start, rate, _cv, pattern, arg1, arg2 = line.strip().split(",")
        if pattern and float(rate) > 0:
            windows.append((float(start), float(rate), pattern, float(arg1), float(arg2)))
    return windows


class LengthDistributions:
    """A client's per-window length PMFs, parsed only when first used."""

    def __init__(self, path: Path) -> None:
        raw = json.loads(_read_text(path))
        # NOTE: a window with an empty PMF has no data: it does not count.
        self._windows = sorted(
            (float(t), fields) for t, fields in raw.items()
            if all(fields.get(f, "{}").strip() not in ("", "{}") for f in ("input_tokens", "output_tokens")))
        self._parsed: dict[float, dict[str, tuple[np.ndarray, np.ndarray]]] = {}

    def at(self, t: float) -> dict[str, tuple[np.ndarray, np.ndarray]] | None:
        """``{field: (values, cdf)}`` of the latest window starting at or before ``t``."""
        chosen = None
        for start, fields in self._windows:
            if start > t:
                break
            chosen = (start, fields)
        if chosen is None:
            return None
        start, fields = chosen
        if start not in self._parsed:
            pmfs = {}
            for field in ("input_tokens", "output_tokens"):
                pmf = ast.literal_eval(fields[field])
                values = np.array(sorted(pmf), dtype=np.int64)
                cdf = np.cumsum([pmf[v] for v in values])
                pmfs[field] = (values, cdf / cdf[-1])
            self._parsed[start] = pmfs
        return self._parsed[start]


def _gaps(pattern: str, shape: float, scale: float, n: int, rng: np.random.Generator) -> np.ndarray:
    if pattern == "Gamma":
        return rng.gamma(shape, scale, size=n)
    if pattern == "Weibull":
        return scale * rng.weibull(shape, size=n)
    raise ValueError(f"unknown ServeGen arrival pattern {pattern!r}")


def _sample(values: np.ndarray, cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    out: np.ndarray = values[np.minimum(np.searchsorted(cdf, u), len(values) - 1)]
    return out


def synthesize_client(client: int, windows: Iterable[tuple[float, float, str, float, float]],
                      dataset: LengthDistributions, start_s: float, end_s: float, seed: int, name: str,
                      rate_scale: float = 1.0) -> tuple[list[TraceRequest], int]:
    """One client's requests in ``[start_s, end_s)``; also the windows skipped
    for lack of a length distribution."""
    rng = np.random.default_rng([seed, client])
    out: list[TraceRequest] = []
    skipped = 0
    for w_start, rate, pattern, shape, scale in windows:
        if w_start + WINDOW_S <= start_s or w_start >= end_s:
            continue
        pmfs = dataset.at(w_start)
        if pmfs is None:
            skipped += 1
            continue
        n = math.ceil(rate * rate_scale * WINDOW_S)
        if n == 0:
            continue
        gaps = _gaps(pattern, shape, scale, n, rng)
        # NOTE: ServeGen rescales the gaps so they fill the window exactly.
        times = w_start + np.cumsum(gaps * (WINDOW_S / gaps.sum()))
        times = times[(times < w_start + WINDOW_S) & (times >= start_s) & (times < end_s)]
        n_in = _sample(*pmfs["input_tokens"], rng.random(len(times)))
        n_out = _sample(*pmfs["output_tokens"], rng.random(len(times)))
        for k, (t, i, o) in enumerate(zip(times, n_in, n_out)):
            out.append(TraceRequest(rid=f"{name}-{client}-{int(w_start)}-{k}",
                                    arrival_s=float(t) - start_s,
                                    input_tokens=max(1, int(i)), output_tokens=max(1, int(o))))
    return out, skipped


def load_servegen(folder: Path, name: str = "servegen", category: str = "language",
                  model: str = "m-small", clients: list[int] | None = None,
                  start_s: float = 0.0, duration_s: float = 3600.0, seed: int = 0,
                  rate_scale: float = 1.0) -> Trace:
    """Synthesize ``duration_s`` seconds of ServeGen traffic from ``start_s``
    (seconds into the ServeGen time series) for ``category/model``, every
    client's per-window rate multiplied by ``rate_scale`` (ServeGen's own way
    to retarget a workload; the arrival patterns keep their shape)."""
    if rate_scale <= 0:
        raise ValueError(f"rate_scale must be > 0, got {rate_scale}")
    base = folder / "data" if (folder / "data").is_dir() else folder
    model_dir = base / category / model
    if not model_dir.is_dir():
        raise FileNotFoundError(f"no ServeGen folder {model_dir}")
    available = client_ids(model_dir)
    chosen = available if clients is None else list(clients)
    missing = sorted(set(chosen) - set(available))
    if missing:
        raise ValueError(f"ServeGen {category}/{model}: clients {missing} have no dataset "
                         f"(synthesizable: {available})")
    requests: list[TraceRequest] = []
    skipped = 0
    for client in chosen:
        trace_file = _find(model_dir, f"chunk-{client}-trace.csv")
        data_file = _find(model_dir, f"chunk-{client}-dataset.json")
        assert trace_file is not None and data_file is not None
        reqs, n_skipped = synthesize_client(client, read_windows(trace_file),
                                            LengthDistributions(data_file),
                                            start_s, start_s + duration_s, seed, name,
                                            rate_scale)
        requests.extend(reqs)
        skipped += n_skipped
    requests.sort(key=lambda r: r.arrival_s)
    notes = [f"synthesized from {len(chosen)} clients of {category}/{model}, "
             f"rates x{rate_scale}, seed {seed}"]
    if skipped:
        notes.append(f"{skipped} client windows had traffic but no length distribution yet")
    return Trace(name=name, requests=tuple(requests), source=str(model_dir), notes=tuple(notes))
