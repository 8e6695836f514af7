"""Writing a run's results folder: JSON, markdown, CSV and PNG plots.

========================= =====================================================
file                      content
========================= =====================================================
``metrics.json``          ``meta``, ``summary`` (every metric), ``windows``
``summary.md``            the summary and the per-window metrics as tables
``requests.csv``          one row per request (``output.requests_csv``)
``ttft_cdf.png``          CDF of TTFT over finished requests (``output.plots``)
``windows.png``           TTFT, goodput, queue length, KV use per time window
========================= =====================================================
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.metrics import RequestRecord, Timeline
from bench.schema import OutputConfig

#: Summary rows of the markdown table: (label, key, sub-key, scale, unit).
SUMMARY_ROWS = (
    ("requests finished", "finished", None, 1, ""),
    ("rejected / aborted", None, None, 1, ""),
    ("TTFT mean", "ttft_s", "mean", 1e3, "ms"),
    ("TTFT p50", "ttft_s", "p50", 1e3, "ms"),
    ("TTFT p99", "ttft_s", "p99", 1e3, "ms"),
    ("TPOT mean", "tpot_s", "mean", 1e3, "ms"),
    ("TPOT p99", "tpot_s", "p99", 1e3, "ms"),
    ("ITL p99", "itl_s", "p99", 1e3, "ms"),
    ("E2E p50", "e2e_s", "p50", 1, "s"),
    ("E2E p99", "e2e_s", "p99", 1, "s"),
    ("goodput", "goodput_rps", None, 1, "req/s"),
    ("output throughput", "throughput_output_tps", None, 1, "tok/s"),
    ("prefix hit rate", "prefix_hit_rate", None, 100, "%"),
    ("recomputed tokens", "recomputed_tokens", None, 1, ""),
    ("retractions", "retractions", None, 1, ""),
)


def fmt(value: float | None, scale: float = 1.0, unit: str = "") -> str:
    """A table cell: scaled, rounded to a readable precision, with its unit."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    v = value * scale
    text = f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.3g}" if abs(v) < 10 else f"{v:,.1f}"
    return f"{text} {unit}".strip()


def summary_cell(summary: dict[str, Any], key: str | None, sub: str | None, scale: float, unit: str) -> str:
    """One metric of a ``summarize`` result as a table cell."""
    if key is None:
        return f"{summary['rejected']} / {summary['aborted']}"
    value = summary.get(key)
    if sub is not None:
        value = (value or {}).get(sub)
    return fmt(value, scale, unit)


def policies_label(meta: dict[str, Any]) -> str:
    """``+policy=lpm, +cache=lfu`` (config options as chosen), or '' for none."""
    return ", ".join(f"+{g}={spec['target'].split('.')[-2]}" for g, spec in meta["policies"].items())


def run_title(meta: dict[str, Any]) -> str:
    """What ran: ``trace on accelerator + model``, or ``trace live on <endpoint>``."""
    if meta.get("mode") == "live":
        return f"{meta['trace']} live on {meta['live']['endpoint']} ({meta['model']})"
    return f"{meta['trace']} on {meta['accelerator']} + {meta['model']}"


def _how_it_ran(meta: dict[str, Any], s: dict[str, Any]) -> str:
    if meta.get("mode") == "live":
        live = meta["live"]
        how = (f"{s['requests']} requests over {s['span_s']:.0f} s measured live "
               f"({live['api']} API, replayed in {live['replay_wall_s']:.1f} s; client lag "
               f"mean {live['client_lag_s']['mean'] * 1e3:.1f} ms, max "
               f"{live['client_lag_s']['max'] * 1e3:.0f} ms). Policies: the server's own.")
    else:
        policies = policies_label(meta)
        how = (f"Policies: {policies or 'SGLang built-in (fcfs order, LRU eviction, no admission)'}. "
               f"{s['requests']} requests over {s['span_s']:.0f} s simulated "
               f"({meta['iterations']} iterations, replayed in {meta['replay_wall_s']:.1f} s).")
    shape = meta.get("shape")
    if shape:
        how += (f" Shaped: prompts x{shape['input_scale']:g}, outputs x{shape['output_scale']:g}, "
                f"caps {shape['max_input_tokens']}/{shape['max_output_tokens']} tokens, "
                f"{shape['dropped_too_long']} + {shape['dropped_followers']} requests dropped "
                f"(over {shape['max_total_tokens']} tokens / following them).")
    return how


def summary_markdown(result: dict[str, Any]) -> str:
    """``summary.md``: what ran, every headline metric, then each window."""
    meta, s = result["meta"], result["summary"]
    lines = [
        f"# {run_title(meta)}",
        "",
        f"SLO: TTFT <= {s['slo']['ttft_s']} s, TPOT <= {s['slo']['tpot_s']} s. "
        + _how_it_ran(meta, s),
        "",
        "| metric | value |",
        "|---|---|",
    ]
    lines += [f"| {label} | {summary_cell(s, *rest)} |" for label, *rest in SUMMARY_ROWS]
    lines += ["", "## Per window", "",
              "| start (s) | arrivals | finished | TTFT p50 | TTFT p99 | goodput | hit rate "
              "| queue (mean) | KV use (mean) |", "|---|---|---|---|---|---|---|---|---|"]
    for w in result["windows"]:
        lines.append(
            f"| {w['start_s']:.0f} | {w['arrivals']} | {w['finished']} "
            f"| {fmt(w['ttft_s']['p50'], 1e3, 'ms')} | {fmt(w['ttft_s']['p99'], 1e3, 'ms')} "
            f"| {fmt(w['goodput_rps'], 1, 'req/s')} | {fmt(w['prefix_hit_rate'], 100, '%')} "
            f"| {fmt(w.get('queue_len_mean'))} | {fmt(w.get('kv_use_mean'), 100, '%')} |")
    return "\n".join(lines) + "\n"


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.integer, np.floating)):
        return obj.item()
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def write_requests_csv(path: Path, records: Sequence[RequestRecord]) -> None:
    """One row per request."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["rid", "session_id", "status", "arrival_s", "input_tokens", "output_tokens",
                    "cached_tokens", "prefill_tokens", "ttft_s", "tpot_s", "e2e_s", "retractions",
                    "reason"])
        for r in records:
            w.writerow([r.rid, r.session_id or "", r.status, f"{r.arrival_s:.6f}", r.input_tokens,
                        r.output_tokens, "" if r.cached_tokens is None else r.cached_tokens,
                        r.prefill_tokens, _opt(r.ttft), _opt(r.tpot), _opt(r.e2e), r.retractions,
                        r.reason])


def _opt(v: float | None) -> str:
    return "" if v is None else f"{v:.6f}"


def plot_results(out_dir: Path, result: dict[str, Any], records: Sequence[RequestRecord], timeline: Timeline) -> None:
    """``ttft_cdf.png`` and ``windows.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meta = result["meta"]
    policies = ("the server's own policies" if meta.get("mode") == "live"
                else policies_label(meta) or "SGLang built-in policies")
    title = f"{run_title(meta)}\n{policies}"
    ttft = np.sort([r.ttft for r in records if r.status == "finished" and r.ttft is not None])
    fig, ax = plt.subplots(figsize=(6, 4.4))
    if len(ttft):
        ax.plot(ttft, np.arange(1, len(ttft) + 1) / len(ttft))
        ax.set_xscale("log")
    ax.set(xlabel="TTFT (s)", ylabel="fraction of requests", title=f"TTFT CDF, {title}")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_dir / "ttft_cdf.png", dpi=110)
    plt.close(fig)

    ws = result["windows"]
    t = [w["start_s"] for w in ws]
    fig, axes = plt.subplots(4, 1, figsize=(7, 9), sharex=True)
    axes[0].plot(t, [w["ttft_s"]["p50"] for w in ws], label="p50")
    axes[0].plot(t, [w["ttft_s"]["p99"] for w in ws], label="p99")
    axes[0].set(ylabel="TTFT (s)", title=title)
    axes[0].legend()
    axes[1].plot(t, [w["goodput_rps"] for w in ws])
    axes[1].set(ylabel="goodput (req/s)")
    axes[2].plot(timeline.t, timeline.waiting, lw=0.8)
    axes[2].set(ylabel="waiting requests")
    axes[3].plot(timeline.t, timeline.kv_used / timeline.capacity, lw=0.8, label="used")
    if not np.isnan(timeline.kv_cached).all():  # NOTE: a live server does not report it
        axes[3].plot(timeline.t, timeline.kv_cached / timeline.capacity, lw=0.8, label="prefix cache")
    axes[3].set(ylabel="KV pool share", xlabel="time (s)")
    axes[3].legend()
    for ax in axes:
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_dir / "windows.png", dpi=110)
    plt.close(fig)


def write_results(out_dir: Path, result: dict[str, Any], records: Sequence[RequestRecord],
                  timeline: Timeline, output: OutputConfig) -> None:
    """Write the results folder (see module docs)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "metrics.json").write_text(json.dumps(result, indent=1, default=_json_default))
    (out_dir / "summary.md").write_text(summary_markdown(result))
    if output.requests_csv:
        write_requests_csv(out_dir / "requests.csv", records)
    if output.plots:
        plot_results(out_dir, result, records, timeline)
