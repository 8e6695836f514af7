"""The CPU server's SGLang defaults, measured with SGLang's own load generator.

    python -m bench.scripts.cpu_defaults            # -> bench/results/cpu_defaults.md
    python -m bench.scripts.cpu_defaults --smoke    # one config, one light run, printed only

Server: ``python -m server`` on the default model (SmolLM2-135M, its default
dtype, one OpenMP thread), stock (no policy of ours), one server per
configuration. Configurations, one factor at a time from SGLang's own defaults
(every factor stated explicitly, so ``server.cpu_sglang`` does not leak in):
the overlap scheduler on (SGLang's default) or off; with it off, a smaller
chunked prefill (512 tokens) and a cap of 8 running requests.

Load: ``python -m sglang.bench_serving --backend sglang-oai`` (``bench.live.peer``),
Poisson arrivals at three rates: light (0.5 req/s), near saturation (1.25
req/s; a first run completed 1.2-1.4 req/s at 2.5 and 6 req/s under SGLang's
defaults) and overloaded (3 req/s), 32 requests per run, the prefix cache
flushed before each. Sets: ``TUNE``
(generated-shared-prefix, seed 1) chooses the default; ``HELD_OUT``
(generated-shared-prefix seed 2 and random-ids seed 2) is reported beside it
and chose nothing.

Rule (fixed before any run): the CPU default is the configuration with the
lowest geometric mean, over the three loads of ``TUNE``, of its mean E2E
latency divided by SGLang's default's, among the configurations whose
light-load mean E2E on ``TUNE`` is at most 10% above SGLang's default's.
``conf/config.yaml``'s ``server.cpu_sglang`` carries the winner's flags; GPU
defaults stay SGLang's own (no GPU table says otherwise).
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.live.peer import RANDOM_IDS, SHARED_PREFIX, Dataset, Run, runs_on_server
from bench.scripts.common import add_output_args, git_commit

# NOTE: sleep_on_idle=false: SGLang's default, which this table was built with (the CPU
# default since bench/results/idle_cpu.md; asleep only while idle, so not a load factor)
STOCK = ("sglang.disable_overlap_schedule=false", "sglang.chunked_prefill_size=null",
         "sglang.max_running_requests=null", "sglang.sleep_on_idle=false")


@dataclass(frozen=True)
class Config:
    """One server configuration: a label and its ``sglang.*`` overrides (every factor set)."""

    label: str
    overrides: tuple[str, ...]


def _with(**changes: Any) -> tuple[str, ...]:
    out = dict(o.split("=", 1) for o in STOCK)
    out.update({f"sglang.{k}": str(v).lower() if isinstance(v, bool) else str(v) for k, v in changes.items()})
    return tuple(f"{k}={v}" for k, v in out.items())


CONFIGS = (
    Config("SGLang's defaults (overlap on)", STOCK),
    Config("overlap off", _with(disable_overlap_schedule=True)),
    Config("overlap off, chunked prefill 512", _with(disable_overlap_schedule=True, chunked_prefill_size=512)),
    Config("overlap off, max running 8", _with(disable_overlap_schedule=True, max_running_requests=8)),
)
LOADS = (("light", 0.5), ("near saturation", 1.25), ("overloaded", 3.0))
TUNE = (("shared-prefix, seed 1 (tuning)", SHARED_PREFIX, 1),)
HELD_OUT = (("shared-prefix, seed 2", SHARED_PREFIX, 2), ("random-ids, seed 2", RANDOM_IDS, 2))
LIGHT_E2E_TOLERANCE = 1.10

Cell = dict[str, float]


def measure(configs: tuple[Config, ...], sets: tuple[tuple[str, Dataset, int], ...],
            loads: tuple[tuple[str, float], ...], tmp: Path) -> dict[tuple[str, str, str], Cell]:
    """Every configuration's server under every set and load: bench_serving's fields per cell."""
    cells: dict[tuple[str, str, str], Cell] = {}
    for n, config in enumerate(configs):
        jobs = [((config.label, set_label, load), Run(f"{config.label} | {set_label} | {load}", dataset, rate, seed))
                for set_label, dataset, seed in sets for load, rate in loads]
        results = runs_on_server(config.overrides, [run for _, run in jobs], tmp, f"server-{n}")
        cells.update(zip([key for key, _ in jobs], results, strict=True))
    return cells


def choose(cells: dict[tuple[str, str, str], Cell]) -> tuple[Config, dict[str, float]]:
    """The rule of the module docstring on ``TUNE``: (the winner, each config's score)."""
    tune = TUNE[0][0]
    base = CONFIGS[0].label

    def e2e(label: str, load: str) -> float:
        return cells[label, tune, load]["mean_e2e_latency_ms"]

    scores = {c.label: math.exp(sum(math.log(e2e(c.label, load) / e2e(base, load)) for load, _ in LOADS)
                                / len(LOADS)) for c in CONFIGS}
    eligible = [c for c in CONFIGS if e2e(c.label, LOADS[0][0]) <= LIGHT_E2E_TOLERANCE * e2e(base, LOADS[0][0])]
    return min(eligible, key=lambda c: scores[c.label]), scores


def report(cells: dict[tuple[str, str, str], Cell], commit: str, wall_s: float) -> str:
    winner, scores = choose(cells)
    out = [f"# The CPU server's SGLang defaults\n\nBuilt by `python -m bench.scripts.cpu_defaults` at commit "
           f"{commit}, {datetime.now(UTC):%Y-%m-%d}. Method and the rule that picks the default: the script's "
           "docstring. Load: SGLang's own `python -m sglang.bench_serving --backend sglang-oai`, "
           f"{SHARED_PREFIX.num_prompts} requests per run, Poisson arrivals. Cells: mean TTFT / p99 TTFT / mean "
           "E2E in seconds, completed requests per second.\n",
           f"**Chosen: {winner.label}** (`{' '.join(o for o in winner.overrides if o not in STOCK)}`). "
           "Score (geometric mean of mean E2E / SGLang's defaults' over the three tuning loads): "
           + ", ".join(f"{label} {s:.2f}" for label, s in scores.items()) + ".\n"]
    for set_label, _, _ in TUNE + HELD_OUT:
        out += [f"## {set_label}\n", "| configuration | " + " | ".join(f"{load} ({rate:g} req/s)"
                                                                         for load, rate in LOADS) + " |",
                "|---|" + "---|" * len(LOADS)]
        for config in CONFIGS:
            row = []
            for load, _ in LOADS:
                c = cells[config.label, set_label, load]
                row.append(f"{c['mean_ttft_ms'] / 1e3:.2f} / {c['p99_ttft_ms'] / 1e3:.2f} / "
                           f"{c['mean_e2e_latency_ms'] / 1e3:.2f}, {c['request_throughput']:.2f}")
            out.append(f"| {config.label} | " + " | ".join(row) + " |")
        out.append("")
    base = CONFIGS[0].label
    out.append("## The trade-off, chosen vs SGLang's defaults (mean E2E ratio; below 1 is faster)\n")
    for set_label, _, _ in TUNE + HELD_OUT:
        ratios = [cells[winner.label, set_label, load]["mean_e2e_latency_ms"]
                  / cells[base, set_label, load]["mean_e2e_latency_ms"] for load, _ in LOADS]
        out.append(f"- {set_label}: " + ", ".join(f"{load} {r:.2f}x" for (load, _), r in zip(LOADS, ratios,
                                                                                          strict=True)))
    out.append(f"\nWall time {wall_s / 60:.0f} min.\n")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_output_args(parser, "cpu_defaults", "cpu_defaults")
    parser.add_argument("--smoke", action="store_true", help="one configuration, one light run, printed only")
    args = parser.parse_args()
    commit = git_commit()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        if args.smoke:
            measure(CONFIGS[1:2], TUNE, LOADS[:1], Path(tmp))
            return
        cells = measure(CONFIGS, TUNE + HELD_OUT, LOADS, Path(tmp))
    args.out.write_text(report(cells, commit, time.monotonic() - t0))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
