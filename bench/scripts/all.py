"""Rebuild every committed table from a clean tree -> ``bench/results/*`` and ``MANIFEST.md``.

    python -m bench.scripts.all                    # every table, in dependency order (~10 h: several sessions, --resume)
    python -m bench.scripts.all --only fairway leap
    python -m bench.scripts.all --quick            # the simulator tables only (~2 h 30 min)
    python -m bench.scripts.all --plan             # print the commands, run nothing
    python -m bench.scripts.all --resume           # go on after an interrupted run (any machine)
    python -m bench.scripts.all --manifest         # rewrite MANIFEST.md's index, run nothing

Refuses to start on a dirty tree (``git status`` not empty: tracked changes or
untracked files anywhere), so every table is stamped with one commit. Each
table's own script stamps its file; this command writes
``bench/results/MANIFEST.md``: first an index of every committed result, the
command that writes it and the commit its file names (tables are rebuilt one
by one too, so they can name different commits: the index says which), then
the last rebuild's commit, per table the exact command, its wall time and the
files it wrote, and the SHA-256 of every trace file the tables read. It runs
nothing but the scripts below and commits nothing; ``--manifest`` rewrites the
index from the files and keeps the last rebuild's section
(``tests/sim/test_all_tables.py`` fails when the index is stale).

Tables and the manifest are stamped with the *code commit*
(``bench.scripts.common.code_commit``: the newest commit that changed the
bench, configs, policies or server), so committing finished tables does not
change the stamp of the ones still to run. The manifest's last-rebuild section
is rewritten after every table, so it records what a run finished;
``--resume`` (after the machine or the session ended, on any machine once the
finished tables and the manifest are committed) runs the rest at the same code
commit. It accepts changes under ``bench/results/`` only (the finished tables)
and refuses if the code commit moved (``bench.scripts.rebuild_record``).

NOTE: order matters (``Table.after``): ``leap_curve`` writes ``leap_curve.json``
(read by ``leap_sim`` and ``leap_predictors``) and the git-ignored
``results/leap/head.npz`` (read by ``leap_live``); ``leap_predictors`` writes
``results/leap-public/head_train*.npz`` (read by ``leap_live_public``). The
LEAP live tables run right after them, so one session runs the group; a
resume on a machine without the heads runs their producer again (and what
read its outputs).
NOTE: run it on a quiet machine: live tables time a CPU server.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.scripts.common import code_commit
from bench.scripts.rebuild_record import LAST_RUN, TRACE_DATA, Table, recorded, redo
from bench.traces.paths import REPO_ROOT, default_data_root
from compose.progress import Progress

#: NOTE: the LEAP live tables follow their heads' producers (see the module's NOTE); the other
#: long live tables run last: an interrupted run (``--resume``) then has the most tables done.
TABLES: tuple[Table, ...] = (
    Table("baselines", ("bench.scripts.baselines",), ("baselines.md",)),
    Table("fairway", ("bench.scripts.fairway", "--check-defaults"), ("fairway.md", "fairway_frontier.png")),
    Table("leap_curve", ("bench.scripts.leap_curve", "--prompts", "500", "--concurrency", "32"),
          ("leap_curve.json", "leap_curve.png"), live=True, scratch=("results/leap/head.npz",)),
    Table("leap", ("bench.scripts.leap_sim",), ("leap.md", "leap_frontier.png"), after=("leap_curve",)),
    Table("leap_predictors", ("bench.scripts.leap_predictors", "--check-defaults"), ("leap_predictors.md",),
          live=True, after=("leap_curve",),
          scratch=("results/leap-public/head_train.npz", "results/leap-public/head_train_prompt_length.npz")),
    Table("leap_live", ("bench.scripts.leap_live", "--requests", "120", "--rate", "0.35", "--max-running", "8"),
          ("leap_live.md",), live=True, after=("leap_curve",), needs=("results/leap/head.npz",)),
    Table("leap_live_public", ("bench.scripts.leap_live", "--prompt-set", "public", "--requests", "100", "--rate", "0.55",
                               "--max-running", "8", "--policies", "fcfs", "lof", "hrrn", "shortest-prefill-first",
                               "leap", "leap-prompt-length", "--out", "bench/results/leap_live_public.md"),
          ("leap_live_public.md",), live=True, after=("leap_predictors",),
          needs=("results/leap-public/head_train.npz", "results/leap-public/head_train_prompt_length.npz")),
    Table("penelope", ("bench.scripts.penelope", "--check-defaults"), ("penelope.md",)),
    Table("tiers", ("bench.scripts.tiers", "--check-defaults"), ("tiers.md",)),
    Table("histate", ("bench.scripts.histate", "--check-defaults"), ("histate.md",)),
    Table("basin_surge", ("bench.scripts.basin_surge",), ("basin_surge.md", "basin_surge.png")),
    Table("router", ("bench.scripts.router",), ("router.md",)),
    Table("dwise", ("bench.scripts.dwise", "--check-defaults"), ("dwise.md",)),
    Table("speculative_sim", ("bench.scripts.speculative_sim",), ("speculative_sim.md",)),
    Table("advise", ("bench.scripts.advise_examples",), ("advise.md", "advise_mooncake.png", "advise_sessions.png")),
    Table("decisions_sim", ("bench.scripts.decisions_sim", "--out", "bench/results/decisions_sim.md"),
          ("decisions_sim.md",)),
    Table("decisions_live", ("bench.scripts.decisions_live",), ("decisions.md",), live=True),
    Table("decisions_lfm2", ("bench.scripts.decisions_live", "--model", "lfm2_tiny"), ("decisions_lfm2.md",),
          live=True),
    Table("cpu_dtype", ("bench.scripts.cpu_dtype",), ("cpu_dtype.md",), live=True),
    Table("cpu_defaults", ("bench.scripts.cpu_defaults",), ("cpu_defaults.md",), live=True),
    Table("idle_cpu", ("bench.scripts.idle_cpu",), ("idle_cpu.md",), live=True),
    Table("peer", ("bench.scripts.peer",), ("peer.md",), live=True),
    Table("reliability", ("bench.scripts.reliability",), ("reliability.md",), live=True),
    Table("dwise_estimators", ("bench.scripts.dwise_fit",), ("dwise_estimators.json",), live=True),
    # NOTE: after ``dwise``: fills the live section of the file ``dwise`` writes (which keeps it)
    Table("dwise_live", ("bench.scripts.dwise_live",), ("dwise.md",), live=True,
          after=("dwise", "dwise_estimators")),
    Table("order_overhead", ("bench.scripts.order_overhead",), ("order_overhead.md",)),
    Table("cache_overhead", ("bench.scripts.cache_overhead",), ("cache_overhead.md",)),
    Table("replay_speed", ("bench.scripts.replay_speed",), ("replay_speed.md",)),
    Table("send_spacing", ("bench.scripts.send_spacing", "--check"), ("send_spacing.md",), live=True),
    Table("validation", ("bench.scripts.validate_sim",), ("validation.md",), live=True),
    Table("adapters", ("bench.scripts.adapters",), ("adapters.md",), live=True),
    Table("speculative_table", ("bench.scripts.speculative_live", "--calibrate"), ("speculative_table.json",),
          live=True),
    Table("speculative_live", ("bench.scripts.speculative_live",), ("speculative.md",), live=True,
          after=("speculative_table",)),
    Table("plugin_overhead", ("bench.scripts.plugin_overhead", "--rounds", "3"), ("plugin_overhead.md",), live=True),
    Table("hook_overhead", ("bench.scripts.hook_overhead",), ("hook_overhead.md",), live=True),
    Table("plugin_ratio", ("bench.scripts.plugin_ratio",), ("plugin_ratio.md",), live=True),
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


def start(resume: bool, results: Path) -> tuple[str, dict[str, float]]:
    """The code commit and the tables already finished at it (``--resume``: the manifest's record),
    or ``SystemExit`` when the tree or the commit does not allow the run."""
    changes = dirty()
    if resume:
        # NOTE: the finished tables are the only changes a resumed run accepts.
        changes = [ln for ln in changes if not ln[3:].startswith("bench/results/")]
    if changes:
        raise SystemExit("refusing to rebuild tables on a dirty tree (commit or stash first):\n"
                         + "\n".join(changes[:20]))
    commit = code_commit()
    if not resume:
        return commit, {}
    path = results / MANIFEST
    done = recorded(path.read_text(), commit) if path.exists() else None
    if done is None:
        raise SystemExit(f"nothing to resume at code commit {commit}: {path}'s last rebuild ran at another "
                         "commit (the code changed since the interrupted run), or none ran")
    return commit, done


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


MANIFEST = "MANIFEST.md"
_STAMP = re.compile(r"at (?:code )?commit ([0-9a-f]{7,40})")


def stamp(path: Path) -> str | None:
    """The commit a committed result names (a table's header, a JSON file's ``commit``); ``None``: none."""
    if path.suffix == ".md":
        found = _STAMP.search(path.read_text())
        return found.group(1) if found else None
    if path.suffix == ".json":
        commit = json.loads(path.read_text()).get("commit")
        return str(commit) if commit else None
    return None


def index(results: Path) -> str:
    """The manifest's index: every committed result, its command and the commit it names."""
    lines = ["# Committed results: how each was built", "",
             "Every file under `bench/results/`, the command that writes it and the commit its file "
             "names (a figure: its table's). Tables are rebuilt one by one as well as all together, so "
             "they can name different commits. Rewritten by `python -m bench.scripts.all --manifest` "
             "(runs nothing); `tests/sim/test_all_tables.py` fails when it is stale.", "",
             "| table | command | file | built at |", "|---|---|---|---|"]
    for table in TABLES:
        stamps = {o: stamp(results / o) for o in table.outputs if (results / o).exists()}
        shared = next((c for c in stamps.values() if c), None)  # NOTE: what a figure takes
        for output, commit in stamps.items():
            lines.append(f"| {table.name} | `{table.command}` | `{output}` | {commit or shared or 'not stamped'} |")
    return "\n".join(lines) + "\n"


def manifest(results: Path, last_run: str | None = None) -> str:
    """MANIFEST.md: the index, then ``last_run`` (the last rebuild's section; ``None``: the file's own)."""
    if last_run is None:
        old = (results / MANIFEST).read_text() if (results / MANIFEST).exists() else ""
        last_run = old[old.index(LAST_RUN):] if LAST_RUN in old else ""
    return index(results) + ("\n" + last_run if last_run else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=[t.name for t in TABLES])
    ap.add_argument("--quick", action="store_true", help="skip the live tables")
    ap.add_argument("--plan", action="store_true", help="print the commands and exit")
    ap.add_argument("--resume", action="store_true", help="skip the tables an interrupted run finished")
    ap.add_argument("--manifest", action="store_true", help="rewrite MANIFEST.md's index; run nothing")
    args = ap.parse_args()
    results = REPO_ROOT / "bench" / "results"
    if args.manifest:
        (results / MANIFEST).write_text(manifest(results))
        return
    tables = select(args.only, args.quick)
    if args.plan:
        print("\n".join(t.command for t in tables))
        return
    commit, done = start(args.resume, results)
    again = redo(TABLES, done, [t.name for t in tables if t.name not in done], REPO_ROOT)
    for reason in again.reasons:
        print(f"== runs again: {reason}", flush=True)
    done = {name: wall for name, wall in done.items() if name not in again.tables}
    tables = [t for t in TABLES if t in tables or t.name in again.tables]
    sums = checksums(default_data_root())
    # NOTE: plain lines, one per table, even on a terminal: each table's script draws its own
    # bar there, and two processes' bars on one terminal overwrite each other.
    with Progress(len(tables), "all tables", unit="table", interval_s=0.0, eta=False, bar=False) as bar:
        for table in tables:
            if table.name in done:
                print(f"== {table.command}: done at {commit} ({done[table.name] / 60:.1f} min), skipped", flush=True)
                bar.update(status=f"{table.name} skipped")
                continue
            print(f"== {table.command}", flush=True)
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", *table.args], cwd=REPO_ROOT, check=True)
            done[table.name] = time.perf_counter() - t0
            # NOTE: the record a resume reads, on this machine or another once committed
            pending = [t.name for t in tables if t.name not in done]
            (results / MANIFEST).write_text(manifest(results, render(commit, finished(done), sums, args, pending)))
            bar.update(status=f"{table.name} in {done[table.name] / 60:.1f} min")
    text = manifest(results, render(commit, finished(done), sums, args, []))
    (results / MANIFEST).write_text(text)
    print(text)


def finished(done: dict[str, float]) -> list[tuple[Table, float]]:
    """The finished tables (this run's and the ones it resumed from), in ``TABLES`` order."""
    return [(t, done[t.name]) for t in TABLES if t.name in done]


def render(commit: str, runs: list[tuple[Table, float]], sums: dict[str, str], args: argparse.Namespace,
           pending: list[str] | None = None) -> str:
    flags = (" --quick" if args.quick else "") + (f" --only {' '.join(args.only)}" if args.only else "") \
        + (" (resumed)" if getattr(args, "resume", False) else "")
    lines = [LAST_RUN, "",
             f"`python -m bench.scripts.all{flags}` at code commit {commit} "
             f"({datetime.now(UTC):%Y-%m-%d}), {sum(w for _, w in runs) / 60:.0f} min in all"
             + (f" so far; still to run ({len(pending)}, `--resume`): {', '.join(pending)}" if pending else "")
             + ". Each table also names its commit and its rows' commands.", "",
             "| table | command | wall | wrote |", "|---|---|---|---|"]
    for table, wall in runs:
        lines.append(f"| {table.name} | `{table.command}` | {wall / 60:.1f} min | "
                     + ", ".join(f"`{o}`" for o in table.outputs) + " |")
    lines += ["", TRACE_DATA, "", "| file | sha256 |", "|---|---|"]
    lines += [f"| `{name}` | `{digest}` |" for name, digest in sums.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
