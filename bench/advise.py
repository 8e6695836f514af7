"""``python -m bench.advise``: which option to run on one's own trace, and why.

    python -m bench.advise trace=mooncake_conversation trace.time_scale=3 \\
        --objective 'ttft_s.p99<=60' --best ttft_s.p50
    python -m bench.advise trace=simple trace.path=/data/mine.jsonl trace.simple.block_size=16 \\
        accelerator=h100 model_profile=llama-3.1-8b --kinds policy cache --out results/advise/mine

Replays the trace (any bench config: a shipped trace, or one's own in the
documented minimal form, ``bench/traces/simple.py``) in the simulator once per
row, ``--jobs`` processes at once: SGLang as configured (no option of the
chosen kinds), then every option of each chosen kind (one kind at a time, the
others left at SGLang's defaults; an option the bench config cannot run, such as
a diffusion-LM order on an autoregressive model, is listed as skipped with the
reason). Built-in rows are the options that reproduce one of SGLang's own
(``compose.catalog.builtin_of``) and the no-option row.

It prints, and writes under ``--out`` (``advise.md``, ``advise.png``): every
row's metrics (``--metrics``, dotted paths into ``bench.metrics.summarize``),
the frontier over them (``bench.frontier``), each option of Switchboard's own
against the built-ins (dominates / equals / on the frontier / dominated;
values within ``--tolerance``, 1% by default, count as equal), each row's
replay time, and
the ``python -m server`` line that best meets the objective: among the rows
meeting every ``--objective`` bound, the best on ``--best``; if none meets
them, the row closest to meeting them (least total relative excess) and by how
much it misses. Nothing is tuned: each option runs at its defaults.
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.config import compose_bench, resolve_bench
from bench.frontier import Metric, frontier, verdict
from bench.run import run_bench
from bench.scripts.common import run_rows
from compose.catalog import groups
from compose.config import CONFIG_NAME, ConfigError

#: Metrics a row is judged on unless ``--metrics`` says otherwise (the fairway/baselines pair).
DEFAULT_METRICS = ("ttft_s.p50", "ttft_s.p99")
#: Summary values where higher is better; every other metric is lower-is-better.
HIGHER_IS_BETTER = ("goodput_rps", "throughput_output_tps", "prefix_hit_rate", "finished")
STOCK = "stock"
_BOUND = re.compile(r"^\s*([\w.]+)\s*(<=|>=)\s*([0-9.eE+-]+)\s*$")


@dataclass(frozen=True)
class Bound:
    """One ``--objective`` term: ``metric <= value`` or ``metric >= value``."""

    metric: str
    op: str
    value: float

    @classmethod
    def parse(cls, text: str) -> Bound:
        m = _BOUND.match(text)
        if not m:
            raise ValueError(f"--objective {text!r}: write METRIC<=VALUE or METRIC>=VALUE, e.g. ttft_s.p99<=20")
        return cls(m[1], m[2], float(m[3]))

    def met(self, value: float) -> bool:
        return value <= self.value if self.op == "<=" else value >= self.value

    def excess(self, value: float) -> float:
        """How far ``value`` misses the bound, relative to it (0 when met)."""
        gap = value - self.value if self.op == "<=" else self.value - value
        return max(0.0, gap) / max(abs(self.value), 1e-12)

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.value:g}"


@dataclass(frozen=True)
class Row:
    """One replay: its label, the overrides that select it, and whether it is SGLang's own."""

    label: str
    overrides: tuple[str, ...]
    builtin: bool


def metric(key: str, tolerance: float = 0.0) -> Metric:
    return Metric(key, higher_is_better=key.split(".")[0] in HIGHER_IS_BETTER, tolerance=tolerance)


def plan(base: Sequence[str], kinds: Sequence[str]) -> tuple[list[Row], list[tuple[str, str]]]:
    """The rows to replay, and the ``(option, reason)`` of each option the config cannot run."""
    rows, skipped = [Row(STOCK, (), True)], []
    chosen = {g.name: g for g in groups(CONFIG_NAME)}
    for kind in kinds:
        if kind not in chosen:
            raise ValueError(f"--kinds {kind!r}: not a kind (one of {', '.join(sorted(chosen))})")
        for option in chosen[kind].options:
            label = f"+{kind}={option.name}"
            try:
                resolve_bench(compose_bench([*base, label]))
            except (ConfigError, ValueError) as e:
                skipped.append((label, str(e).splitlines()[0]))
                continue
            rows.append(Row(label, (label,), option.builtin is not None))
    return rows, skipped


@dataclass(frozen=True)
class Job:
    """One replay in a worker process (module level: picklable)."""

    base: tuple[str, ...]
    row: Row


def replay(job: Job, results: Path) -> dict[str, Any]:
    """The row's summary, or the one-line reason it cannot run (a refusal found only when built)."""
    t0 = time.perf_counter()
    try:
        settings = resolve_bench(compose_bench([*job.base, *job.row.overrides, "output.progress=false"]))
        out = run_bench(settings, None, progress=False)
    except (ConfigError, ValueError) as e:
        return {"error": str(e).splitlines()[0]}
    return {"summary": out["summary"], "wall_s": time.perf_counter() - t0}


def choose(summaries: dict[str, dict[str, Any]], bounds: Sequence[Bound], best: Metric) -> tuple[str, str]:
    """``(row, reason)``: the best row meeting every bound on ``best``, else the closest."""
    values = {name: {b.metric: metric(b.metric).of(s) for b in bounds} for name, s in summaries.items()}
    meeting = [name for name in summaries if all(b.met(values[name][b.metric]) for b in bounds)]
    if meeting:
        top = min(meeting, key=lambda n: best.of(summaries[n]) * (-1 if best.higher_is_better else 1))
        value = f"the best {best.key} ({best.of(summaries[top]):.4g})"
        if not bounds:
            return top, f"{value} of the {len(summaries)} rows (no --objective bound given)"
        said = " and ".join(str(b) for b in bounds)
        return top, f"meets {said} and has {value} of the {len(meeting)} of {len(summaries)} rows that do"
    close = min(summaries, key=lambda n: sum(b.excess(values[n][b.metric]) for b in bounds))
    misses = ", ".join(f"{b.metric} {values[close][b.metric]:.4g} (bound {b.value:g})"
                       for b in bounds if not b.met(values[close][b.metric]))
    return close, f"no row meets the objective; the closest misses it by {misses}"


def server_line(row: str) -> str:
    return "python -m server" + ("" if row == STOCK else f" {row}")


def report(points: dict[str, tuple[float, ...]], n: int, rows: Sequence[Row], skipped: Sequence[tuple[str, str]],
           metrics: Sequence[Metric], chosen: tuple[str, str], base: Sequence[str], wall_s: float,
           replay_s: dict[str, float]) -> str:
    """The markdown report (module docs): ``points``, each row's metric values; ``n``, requests per replay."""
    on = set(frontier(points, metrics))
    builtins = {r.label: points[r.label] for r in rows if r.builtin}
    tolerance = max(m.tolerance for m in metrics)
    lines = [f"Trace and profiles: `{' '.join(base) or '(bench defaults)'}`; {len(rows)} rows of {n:,} requests "
             f"replayed in {wall_s:.0f} s. Values within {tolerance:.1%} of each other count as equal.", "",
             "| row | SGLang's own | " + " | ".join(m.name for m in metrics) + " | frontier | verdict | replay (s) |",
             "|---|---|" + "---:|" * len(metrics) + "---|---|---:|"]
    for r in rows:
        said = "" if r.builtin else verdict(points[r.label], builtins, metrics).text()
        cells = " | ".join(f"{v:.4g}" for v in points[r.label])
        lines.append(f"| `{r.label}` | {'yes' if r.builtin else ''} | {cells} | "
                     f"{'yes' if r.label in on else ''} | {said} | {replay_s[r.label]:.1f} |")
    if skipped:
        lines += ["", "Skipped (this config cannot run them): "
                  + "; ".join(f"`{label}`: {why}" for label, why in skipped)]
    lines += ["", f"**Run:** `{server_line(chosen[0])}`: {chosen[1]}."]
    return "\n".join(lines) + "\n"


def plot(points: dict[str, tuple[float, ...]], builtin: set[str], metrics: Sequence[Metric], path: Path) -> None:
    """The first two metrics, each row a labelled point, the frontier joined."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    labels: dict[tuple[float, float], list[str]] = {}
    for name, (x, y, *_) in points.items():
        ax.scatter([x], [y], marker="s" if name in builtin else "o", color="grey" if name in builtin else "C0")
        # NOTE: rows at (nearly) one point share one label, so names do not overprint
        spot = next((k for k in labels if abs(k[0] - x) <= 0.01 * max(abs(x), 1e-9)
                     and abs(k[1] - y) <= 0.01 * max(abs(y), 1e-9)), (x, y))
        labels.setdefault(spot, []).append(name.split("=", 1)[-1])
    for (x, y), names in labels.items():
        ax.annotate("\n".join(names), (x, y), fontsize=7, xytext=(4, 2), textcoords="offset points")
    for axis, values in (("x", [p[0] for p in points.values()]), ("y", [p[1] for p in points.values()])):
        if min(values) > 0 and max(values) / min(values) > 20:
            (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    two = metrics[:2]
    edge = sorted(points[n][:2] for n in frontier({n: p[:2] for n, p in points.items()}, two))
    ax.plot([p[0] for p in edge], [p[1] for p in edge], color="C1", lw=1, label="frontier")
    ax.set_xlabel(two[0].name)
    ax.set_ylabel(two[1].name)
    ax.legend(title="squares: SGLang's own")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def advise(base: Sequence[str], kinds: Sequence[str], metrics: Sequence[Metric], bounds: Sequence[Bound],
           best: Metric, jobs: int, out: Path | None) -> str:
    """Replay every row, and return (and, with ``out``, write) the report."""
    rows, skipped = plan(base, kinds)
    t0 = time.perf_counter()
    done = run_rows("advise", [Job(tuple(base), r) for r in rows], replay, out or Path("."), jobs,
                    lambda j: j.row.label)
    skipped += [(job.row.label, res["error"]) for job, res in done.items() if "error" in res]
    ran = {job.row: res for job, res in done.items() if "error" not in res}
    rows = list(ran)
    if not any(r.builtin for r in rows):
        raise ValueError("no built-in row ran: nothing to judge against")
    summaries = {r.label: res["summary"] for r, res in ran.items()}
    points = {r.label: tuple(m.of(summaries[r.label]) for m in metrics) for r in rows}
    chosen = choose(summaries, bounds, best)
    text = report(points, summaries[rows[0].label]["requests"], rows, skipped, metrics, chosen, base,
                  time.perf_counter() - t0, {r.label: res["wall_s"] for r, res in ran.items()})
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "advise.md").write_text(text)
        plot(points, {r.label for r in rows if r.builtin}, metrics, out / "advise.png")
    return text


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.advise", description=__doc__.splitlines()[0])
    ap.add_argument("overrides", nargs="*", help="bench config overrides: trace, accelerator, model_profile, sim.*")
    ap.add_argument("--kinds", nargs="+", default=["policy"], help="kinds whose options are replayed (default: policy)")
    ap.add_argument("--metrics", nargs="+", default=list(DEFAULT_METRICS),
                    help="summary paths forming the frontier (default: ttft_s.p50 ttft_s.p99)")
    ap.add_argument("--objective", nargs="*", default=[], help="bounds such as 'ttft_s.p99<=20'")
    ap.add_argument("--best", default=None, help="the metric to optimise among rows meeting the objective "
                    "(default: the first of --metrics)")
    ap.add_argument("--tolerance", type=float, default=0.01,
                    help="relative difference within which two values count as equal (default 0.01)")
    ap.add_argument("--jobs", type=int, default=2, help="replays at once (default 2)")
    ap.add_argument("--out", type=Path, default=None, help="write advise.md and advise.png here")
    args = ap.parse_args(argv)
    try:
        bounds = [Bound.parse(b) for b in args.objective]
        if not 0 <= args.tolerance < 1:
            raise ValueError(f"--tolerance {args.tolerance}: a relative difference in [0, 1)")
        metrics = [metric(k, args.tolerance) for k in args.metrics]
        if len(metrics) < 2:
            raise ValueError("--metrics: a frontier needs at least two metrics")
        text = advise(args.overrides, args.kinds, metrics, bounds, metric(args.best or args.metrics[0], args.tolerance),
                      args.jobs, args.out)
    except (ConfigError, ValueError, KeyError) as e:
        raise SystemExit(f"advise: {e}") from None
    print(text)


if __name__ == "__main__":
    main()
