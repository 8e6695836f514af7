"""Rebuild every committed table from a clean tree -> ``bench/results/*`` and ``MANIFEST.md``.

    python -m bench.scripts.all                    # every table, in dependency order (~2.5 h)
    python -m bench.scripts.all --only fairway leap
    python -m bench.scripts.all --quick            # the simulator tables only (~35 min)
    python -m bench.scripts.all --plan             # print the commands, run nothing

Refuses to start on a dirty tree (``git status`` not empty: tracked changes or
untracked files anywhere), so every table is stamped with one commit. Each
table's own script stamps its file; this command writes
``bench/results/MANIFEST.md``: the commit, and per table the exact command, its
wall time and the files it wrote, and the SHA-256 of every trace file the
tables read. It runs nothing but the scripts below and commits nothing.

NOTE: order matters: ``leap_curve`` writes ``leap_curve.json`` (read by
``leap_sim``) and ``results/leap/head.npz`` (read by ``leap_live``).
NOTE: run it on a quiet machine: live tables time a CPU server.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench.traces.paths import REPO_ROOT, default_data_root


@dataclass(frozen=True)
class Table:
    """One committed table: the command that writes it and what it writes."""

    name: str
    args: tuple[str, ...]
    outputs: tuple[str, ...]
    live: bool = False
    """Starts CPU servers (timed; not in ``--quick``)."""

    @property
    def command(self) -> str:
        return "python -m " + " ".join(self.args)


TABLES: tuple[Table, ...] = (
    Table("baselines", ("bench.scripts.baselines",), ("baselines.md",)),
    Table("fairway", ("bench.scripts.fairway", "--check-defaults"), ("fairway.md",)),
    Table("leap_curve", ("bench.scripts.leap_curve", "--prompts", "500", "--concurrency", "32"),
          ("leap_curve.json", "leap_curve.png"), live=True),
    Table("leap", ("bench.scripts.leap_sim",), ("leap.md",)),
    Table("leap_live", ("bench.scripts.leap_live", "--requests", "120", "--rate", "0.35", "--max-running", "8"),
          ("leap_live.md",), live=True),
    Table("penelope", ("bench.scripts.penelope",), ("penelope.md",)),
    Table("basin_surge", ("bench.scripts.basin_surge",), ("basin_surge.md", "basin_surge.png")),
    Table("order_overhead", ("bench.scripts.order_overhead",), ("order_overhead.md",)),
    Table("cache_overhead", ("bench.scripts.cache_overhead",), ("cache_overhead.md",)),
    Table("validation", ("bench.scripts.validate_sim",), ("validation.md",), live=True),
    Table("plugin_overhead", ("bench.scripts.plugin_overhead", "--rounds", "3"), ("plugin_overhead.md",), live=True),
)
#: The trace files the tables read (relative to the data root).
TRACE_FILES = (
    "mooncake/conversation_trace.jsonl",
    "azure_llm_2023/AzureLLMInferenceTrace_conv.csv",
    "kv_cache_tester_cc_traces",
    "servegen",
)


def dirty(root: Path = REPO_ROOT) -> list[str]:
    """``git status --porcelain`` lines (empty = clean)."""
    out = subprocess.run(["git", "status", "--porcelain"], cwd=root, text=True, capture_output=True, check=True)
    return [ln for ln in out.stdout.splitlines() if ln.strip()]


def checksums(data_root: Path) -> dict[str, str]:
    """SHA-256 of every trace file (a folder: of its files, in name order)."""
    out: dict[str, str] = {}
    for rel in TRACE_FILES:
        path = data_root / rel
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for f in files:
            if f.exists():
                out[str(f.relative_to(data_root))] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


def select(only: list[str] | None, quick: bool) -> list[Table]:
    tables = [t for t in TABLES if only is None or t.name in only]
    return [t for t in tables if not (quick and t.live)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=[t.name for t in TABLES])
    ap.add_argument("--quick", action="store_true", help="skip the live tables")
    ap.add_argument("--plan", action="store_true", help="print the commands and exit")
    args = ap.parse_args()
    tables = select(args.only, args.quick)
    if args.plan:
        print("\n".join(t.command for t in tables))
        return
    changes = dirty()
    if changes:
        raise SystemExit("refusing to rebuild tables on a dirty tree (commit or stash first):\n"
                         + "\n".join(changes[:20]))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, text=True,
                            capture_output=True, check=True).stdout.strip()
    runs: list[tuple[Table, float]] = []
    for table in tables:
        print(f"== {table.command}", flush=True)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", *table.args], cwd=REPO_ROOT, check=True)
        runs.append((table, time.perf_counter() - t0))
    manifest = render(commit, runs, checksums(default_data_root()), args)
    (REPO_ROOT / "bench" / "results" / "MANIFEST.md").write_text(manifest)
    print(manifest)


def render(commit: str, runs: list[tuple[Table, float]], sums: dict[str, str], args: argparse.Namespace) -> str:
    flags = (" --quick" if args.quick else "") + (f" --only {' '.join(args.only)}" if args.only else "")
    lines = ["# Committed tables: how they were built", "",
             f"`python -m bench.scripts.all{flags}` at commit {commit} "
             f"({datetime.now(UTC):%Y-%m-%d}), {sum(w for _, w in runs) / 60:.0f} min in all. "
             "Each table also names its commit and its rows' commands.", "",
             "| table | command | wall | wrote |", "|---|---|---|---|"]
    for table, wall in runs:
        lines.append(f"| {table.name} | `{table.command}` | {wall / 60:.1f} min | "
                     + ", ".join(f"`{o}`" for o in table.outputs) + " |")
    lines += ["", "Trace data (SHA-256):", "", "| file | sha256 |", "|---|---|"]
    lines += [f"| `{name}` | `{digest}` |" for name, digest in sums.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
