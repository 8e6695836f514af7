"""Pareto frontiers over the metrics a technique is judged by, and its verdict against SGLang's built-ins.

A verdict per metric ("best median", "best p99") cannot say whether one
built-in beats a technique on both metrics at once. Here a row is a point in
metric space; a row *dominates* another when it is at least as good on every
metric and better on one. Against the built-ins a technique either

* **dominates** every built-in (better than each of them somewhere, worse nowhere),
  or **equals** some (the same on every metric) and dominates the rest,
* lies **on the frontier**: no built-in dominates it, but some are better on
  some metric (the verdict names, per metric, the built-ins that are better), or
* is **dominated** (by the built-ins named).

Metrics read summary dicts (``bench.metrics.summarize``) by dotted paths such as
``ttft_s.p99``; each says whether lower or higher is better, and within what
relative difference two values count as equal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Metric:
    """One axis of a frontier."""

    key: str
    """Dotted path into a run's summary, e.g. ``ttft_s.p99`` or ``goodput_rps``."""
    label: str = ""
    """Column label (default: ``key``)."""
    higher_is_better: bool = False
    """Throughput-like metrics; latencies are lower-is-better."""
    tolerance: float = 0.0
    """Relative difference within which two values count as equal (0: exact).
    NOTE: a deterministic simulator separates rows by differences no user would
    act on; a tolerance turns those into ties rather than verdicts."""

    @property
    def name(self) -> str:
        return self.label or self.key

    def of(self, summary: Mapping[str, Any]) -> float:
        """This metric's value in ``summary``; a missing or null value is a clear error."""
        value: Any = summary
        for part in self.key.split("."):
            if not isinstance(value, Mapping) or part not in value:
                raise KeyError(f"metric {self.key!r}: no {part!r} in the run's summary")
            value = value[part]
        if value is None:
            raise ValueError(f"metric {self.key!r} is null in the run's summary (no finished request?)")
        return float(value)

    def better(self, a: float, b: float) -> bool:
        """Whether ``a`` is better than ``b`` by more than the tolerance."""
        gain = a - b if self.higher_is_better else b - a
        return gain > self.tolerance * max(abs(a), abs(b))


def dominates(a: Sequence[float], b: Sequence[float], metrics: Sequence[Metric]) -> bool:
    """``a`` is no worse than ``b`` on every metric and better on at least one."""
    better = [m.better(x, y) for m, x, y in zip(metrics, a, b, strict=True)]
    worse = [m.better(y, x) for m, x, y in zip(metrics, a, b, strict=True)]
    return any(better) and not any(worse)


def frontier(points: Mapping[str, Sequence[float]], metrics: Sequence[Metric]) -> list[str]:
    """The names of the points no other point dominates, in the mapping's order.

    NOTE: equal points do not dominate each other: both stay on the frontier."""
    return [name for name, p in points.items()
            if not any(dominates(q, p, metrics) for other, q in points.items() if other != name)]


@dataclass(frozen=True)
class Verdict:
    """One technique against a set of built-ins on one scenario."""

    outcome: str
    """``dominates``, ``equals`` (ties some built-ins, dominates the others),
    ``frontier`` or ``dominated``."""
    by: tuple[str, ...]
    """``dominated``: the built-ins that dominate it; ``equals``: those it ties. Otherwise empty."""
    better_on: tuple[tuple[str, tuple[str, ...]], ...]
    """``frontier``: per metric, the built-ins better than the technique on it."""

    def text(self, noun: str = "built-in") -> str:
        """The verdict in words; ``noun`` names what the technique was judged against."""
        if self.outcome == "dominates":
            return f"dominates every {noun}"
        if self.outcome == "dominated":
            return "dominated by " + ", ".join(f"`{b}`" for b in self.by)
        if self.outcome == "equals":
            return "equals " + ", ".join(f"`{b}`" for b in self.by) + " on every metric, dominates the rest"
        sides = [f"{metric}: " + ", ".join(f"`{b}`" for b in names) for metric, names in self.better_on if names]
        return f"on the frontier ({noun}s better on " + "; ".join(sides) + ")"


def verdict(technique: Sequence[float], builtins: Mapping[str, Sequence[float]],
            metrics: Sequence[Metric]) -> Verdict:
    """``technique``'s verdict against every point of ``builtins`` (module docs)."""
    if not builtins:
        raise ValueError("a verdict needs at least one built-in")
    by = tuple(name for name, p in builtins.items() if dominates(p, technique, metrics))
    if by:
        return Verdict("dominated", by, ())
    better_on = tuple(
        (m.name, tuple(name for name, p in builtins.items() if m.better(p[i], technique[i])))
        for i, m in enumerate(metrics))
    if not any(names for _, names in better_on):
        # NOTE: a built-in no better anywhere and no worse anywhere is a tie, not dominated
        ties = tuple(name for name, p in builtins.items() if not dominates(technique, p, metrics))
        return Verdict("equals", ties, ()) if ties else Verdict("dominates", (), ())
    return Verdict("frontier", (), better_on)


def verdict_lines(points: Mapping[str, Mapping[str, Sequence[float]]], technique: str, builtins: Sequence[str],
                  metrics: Sequence[Metric], noun: str = "built-in") -> list[str]:
    """A markdown table of ``technique``'s verdict per scenario (``points``: scenario -> row -> values),
    then how many scenarios end each way; ``noun`` names the rows judged against (``builtins``)."""
    lines = ["| scenario | verdict |", "|---|---|"]
    outcomes: dict[str, int] = {}
    for scenario, rows in points.items():
        v = verdict(rows[technique], {b: rows[b] for b in builtins}, metrics)
        outcomes[v.outcome] = outcomes.get(v.outcome, 0) + 1
        lines.append(f"| {scenario} | {v.text(noun)} |")
    said = ", ".join(f"{outcomes[o]} {o}" for o in ("dominates", "equals", "frontier", "dominated") if o in outcomes)
    return [*lines, "", f"Over the {len(points)} scenarios: {said}."]


def plot_families(families: Mapping[str, Mapping[str, Mapping[str, Sequence[float]]]], technique: str,
                  builtins: Sequence[str], metrics: Sequence[Metric], path: Any, title: str = "") -> None:
    """One panel per scenario family (``families``: family -> instance -> row -> values): every row's
    first two metrics on each instance, each divided by the best built-in's on that instance and
    metric, so the best built-in sits at (1, 1) or beyond and a point below and left of it is better
    on both (for lower-is-better metrics; a higher-is-better metric is inverted, best / row)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    two = metrics[:2]
    n = len(families)
    cols = min(n, 4)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 3.2 * rows), squeeze=False)
    names = [*builtins, technique]
    colors = {name: f"C{i % 10}" for i, name in enumerate(builtins)}
    for ax, (family, instances) in zip(axes.flat, families.items(), strict=False):
        for name in names:
            xs, ys = [], []
            for values in instances.values():
                scaled = []
                for i, m in enumerate(two):
                    best = (max if m.higher_is_better else min)(values[b][i] for b in builtins)
                    v = values[name][i]
                    scaled.append(best / v if m.higher_is_better else v / best)
                xs.append(scaled[0])
                ys.append(scaled[1])
            own = name == technique
            ax.scatter(xs, ys, s=60 if own else 22, marker="*" if own else "s", zorder=3 if own else 2,
                       color="black" if own else colors[name], label=name)
        ax.axvline(1.0, color="grey", lw=0.6, ls="--")
        ax.axhline(1.0, color="grey", lw=0.6, ls="--")
        ax.set_title(family, fontsize=8)
        ax.set_xlabel(f"{two[0].name} / best built-in's", fontsize=7)
        ax.set_ylabel(f"{two[1].name} / best built-in's", fontsize=7)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(names), 7), fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0.06, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)
