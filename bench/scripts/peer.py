"""SGLang's own load generator as the outside check of every scheduling and eviction option.

    python -m bench.scripts.peer                          # -> bench/results/peer.md
    python -m bench.scripts.peer --only +cache=penelope   # some rows (and their controls), printed only
    python -m bench.scripts.peer --smoke                  # stock, one short run, printed only

Rows: stock ``python -m server`` (the CPU server's defaults, no option of ours),
every ``+policy=`` and ``+cache=`` option the default (autoregressive) model
takes, and for each set of flags an option forces that changes how stock
serves (``python -m server.options --controls``), stock under exactly those
flags: the option's control row. Each row is one server (the default model,
one OpenMP thread, every SGLang flag as the CPU server's defaults unless the
option forces it).

Load: ``python -m sglang.bench_serving --backend sglang-oai``
(``bench.live.peer``) on two of its datasets that need no download
(generated-shared-prefix, random-ids; ``bench.live.peer``'s shapes), at two
Poisson rates (near saturation 1.25 req/s and overloaded 3 req/s; the CPU
server completes ~1.2-1.4 req/s, ``cpu_defaults.md``), 32 requests per run, the prefix cache flushed before each. Every run is repeated with the
same seed (the paired repeat), so a reader sees the run-to-run spread beside
the differences between rows. Nothing here was tuned on these runs.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.live.peer import RANDOM_IDS, SHARED_PREFIX, Dataset, Run, runs_on_server
from bench.live.server import REPO
from bench.scripts.common import add_output_args, git_commit
from compose.catalog import groups
from compose.config import CONFIG_NAME

GROUPS = ("policy", "cache")
SETS = (SHARED_PREFIX, RANDOM_IDS)
LOADS = (("near saturation", 1.25), ("overloaded", 3.0))
SEED = 1
REPEATS = 2
#: The row without any option of ours.
STOCK = "stock"


def option_rows() -> list[tuple[str, tuple[str, ...]]]:
    """``(label, overrides)`` of every option of ``GROUPS`` the default model serves."""
    rows: list[tuple[str, tuple[str, ...]]] = []
    for g in groups(CONFIG_NAME):
        if g.name in GROUPS:
            rows += [(f"+{g.name}={o.name}", (f"+{g.name}={o.name}",)) for o in g.options]
    return rows


def plan_rows(only: list[str] | None) -> tuple[list[tuple[str, tuple[str, ...]]], dict[str, str]]:
    """Rows to run (stock first, then options, then their distinct controls) and each option's control."""
    options: list[tuple[str, tuple[str, ...]]] = []
    controls: dict[str, str] = {}
    control_rows: dict[str, tuple[str, ...]] = {}
    refused = []
    for label, overrides in option_rows():
        if only and label not in only:
            continue
        # NOTE: the server's own answer (bench/ never imports server/); it refuses what the model cannot serve
        probe = subprocess.run([sys.executable, "-m", "server.options", "--controls", *overrides],
                               capture_output=True, text=True, cwd=REPO)
        if probe.returncode != 0:
            refused.append(label)
            continue
        options.append((label, overrides))
        flags = tuple(line for line in probe.stdout.splitlines() if line)
        if flags:
            name = f"stock + {' '.join(flags)}"
            control_rows[name] = flags
            controls[label] = name
    if refused:
        print(f"refused by the default model (not run): {', '.join(refused)}", flush=True)
    return [(STOCK, ()), *options, *control_rows.items()], controls


Key = tuple[str, str, str]  # row, dataset, load


def measure(rows: list[tuple[str, tuple[str, ...]]], sets: tuple[Dataset, ...],
            loads: tuple[tuple[str, float], ...], repeats: int, tmp: Path) -> dict[Key, list[dict[str, float]]]:
    """Every row's server under every dataset, load and repeat: bench_serving's fields per run."""
    runs: dict[Key, list[dict[str, float]]] = {}
    for n, (label, overrides) in enumerate(rows):
        plan = [((label, dataset.name, load), Run(f"{label} | {dataset.name} | {load} | run {r + 1}", dataset, rate,
                                                  SEED))
                for dataset in sets for load, rate in loads for r in range(repeats)]
        results = runs_on_server(overrides, [run for _, run in plan], tmp, f"server-{n}")
        for (key, _), result in zip(plan, results, strict=True):
            runs.setdefault(key, []).append(result)
    return runs


def _pair(values: list[float], scale: float, digits: int) -> str:
    return " / ".join(f"{v / scale:.{digits}f}" for v in values)


def report(rows: list[tuple[str, tuple[str, ...]]], controls: dict[str, str],
           runs: dict[Key, list[dict[str, float]]], commit: str, wall_s: float) -> str:
    out = [f"# Every scheduling and eviction option under SGLang's own load generator\n\nBuilt by "
           f"`python -m bench.scripts.peer` at commit {commit}, {datetime.now(UTC):%Y-%m-%d}. Method: the "
           "script's docstring. Each cell shows both runs of the paired repeat (same seed): mean TTFT s, p99 "
           "TTFT s, mean E2E s, completed req/s. Control rows run stock SGLang under the flags an option "
           "forces; an option is credited only with what it adds beyond its control.\n"]
    for dataset in SETS:
        for load, rate in LOADS:
            out += [f"## {dataset.name}, {load} ({rate:g} req/s)\n",
                    "| row | control | mean TTFT | p99 TTFT | mean E2E | req/s |", "|---|---|---|---|---|---|"]
            for label, _ in rows:
                got = runs.get((label, dataset.name, load))
                if not got:
                    continue
                out.append(f"| {label} | {controls.get(label, '')} | "
                           f"{_pair([g['mean_ttft_ms'] for g in got], 1e3, 2)} | "
                           f"{_pair([g['p99_ttft_ms'] for g in got], 1e3, 2)} | "
                           f"{_pair([g['mean_e2e_latency_ms'] for g in got], 1e3, 2)} | "
                           f"{_pair([g['request_throughput'] for g in got], 1, 2)} |")
            out.append("")
    spread = [abs(a["mean_e2e_latency_ms"] - b["mean_e2e_latency_ms"]) / statistics.mean(
        [a["mean_e2e_latency_ms"], b["mean_e2e_latency_ms"]]) for got in runs.values() for a, b in [got[:2]]
        if len(got) >= 2]
    if spread:
        out.append(f"Run-to-run spread of mean E2E over the paired repeats: median {statistics.median(spread):.1%}, "
                   f"max {max(spread):.1%}. Wall time {wall_s / 60:.0f} min.\n")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_output_args(parser, "peer", "peer")
    parser.add_argument("--only", nargs="+", metavar="ROW", help="rows to run (e.g. +cache=penelope), printed only")
    parser.add_argument("--smoke", action="store_true", help="stock, one short run, printed only")
    args = parser.parse_args()
    commit = git_commit()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        if args.smoke:
            measure([(STOCK, ())], SETS[:1], LOADS[:1], 1, Path(tmp))
            return
        rows, controls = plan_rows(args.only)
        runs = measure(rows, SETS, LOADS, REPEATS, Path(tmp))
    text = report(rows, controls, runs, commit, time.monotonic() - t0)
    if args.only:
        print(text)
        return
    args.out.write_text(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
