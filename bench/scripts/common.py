"""What every results-table script shares: where it writes, and which commit made it."""

from __future__ import annotations

import argparse
import functools
import math
import subprocess
import time
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import yaml

from bench.traces.paths import REPO_ROOT
from compose.progress import track

K = TypeVar("K", bound=Hashable)

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from compose.schema import ModelSource


def add_output_args(parser: argparse.ArgumentParser, table: str, results: str) -> None:
    """``--out`` (the committed table, ``bench/results/<table>.md``) and ``--results``
    (this run's git-ignored folder, ``results/<results>/<timestamp>``)."""
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results" / f"{table}.md")
    parser.add_argument("--results", type=Path, default=Path("results") / results
                        / datetime.now().strftime("%Y-%m-%d_%H-%M-%S"))


def run_rows(name: str, keys: list[K], run: Callable[[K, Path], dict[str, Any]], results: Path, jobs: int,
             describe: Callable[[K], str]) -> dict[K, dict[str, Any]]:
    """``run(key, results)`` for every key, ``jobs`` processes at once (at least one), with a
    progress bar named ``name``; each key's row. ``run`` must be picklable (module level)."""
    with ProcessPoolExecutor(max(1, jobs)) as pool:
        # NOTE: pool.map yields in submission order; the bar counts each row as it arrives.
        runs = zip(keys, pool.map(run, keys, [results] * len(keys)))
        done = [r for _, r in track(runs, name, total=len(keys), unit="run", label=lambda kr: describe(kr[0]))]
    return dict(zip(keys, done))


def sweep_main(name: str, doc: str, keys: Callable[[], list[K]], run: Callable[[K, Path], dict[str, Any]],
               describe: Callable[[K], str], summary: Callable[[dict[str, Any]], str],
               render: Callable[[dict[K, dict[str, Any]], float], str],
               stale: Callable[[dict[K, dict[str, Any]]], str | None] | None = None) -> None:
    """A sweep script's command line: ``--out``/``--results`` (``add_output_args``) and ``--jobs``;
    stamps the commit before any work, runs every key (``run_rows``), prints
    ``describe(key): summary(row)`` per row and writes ``render(rows, wall seconds)`` to ``--out``.
    With ``stale`` (a tuned default's check: a message when the config does not hold the sweep's
    choice), the message is printed, and with ``--check-defaults`` it fails the command."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    add_output_args(ap, name, name)
    ap.add_argument("--jobs", type=int, default=2, help="simulations run at once (default 2)")
    if stale is not None:
        ap.add_argument("--check-defaults", action="store_true",
                        help="fail unless the config holds the default the tuning sweep chose")
    args = ap.parse_args()
    git_commit()  # NOTE: stamps the run now (cached), before any work
    t0 = time.perf_counter()
    rows = run_rows(name, keys(), run, args.results, args.jobs, describe)
    for key, r in rows.items():
        print(f"{describe(key)}: {summary(r)}")
    args.out.write_text(render(rows, time.perf_counter() - t0))
    print(f"wrote {args.out}")
    message = stale(rows) if stale is not None else None
    if message is not None:
        if args.check_defaults:
            raise SystemExit(message)
        print("NOTE: " + message)


def option_default(group: str, option: str, key: str) -> Any:
    """``key`` as ``conf/<group>/<option>.yaml`` holds it (the option's default)."""
    return yaml.safe_load((REPO_ROOT / "conf" / group / f"{option}.yaml").read_text())[key]


def default_check(group: str, option: str, key: str, chosen: float) -> str | None:
    """Print what the tuning instance chose for ``key``; a message (``sweep_main``'s ``stale``)
    when ``conf/<group>/<option>.yaml`` holds another value."""
    print(f"chosen on the tuning instance: {key}={chosen:g}")
    held = option_default(group, option, key)
    if chosen == held:
        return None
    return f"conf/{group}/{option}.yaml holds {key}={held:g}; the tuning instance chose {chosen:g}"


def geomean(values: Iterable[float]) -> float:
    """The geometric mean of positive ``values``."""
    logs = [math.log(v) for v in values]
    return math.exp(sum(logs) / len(logs))


#: The code and configs that make a table; not the committed tables themselves
#: (one table's script must not mark another table's stamp).
SOURCES = ("--", "bench", "compose", "conf", "kernels", "policies", "server", ":(exclude)bench/results")


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO_ROOT, text=True, capture_output=True,
                          check=True).stdout.strip()


def code_commit() -> str:
    """Short hash of the newest commit that changed ``SOURCES`` (HEAD's code).

    NOTE: committing a table, a doc or a test does not move it, so tables built
    from the same code carry the same stamp across such commits."""
    return _git("log", "-1", "--format=%h", "HEAD", *SOURCES)


@functools.cache
def git_commit() -> str:
    """The code commit (``code_commit``), marked when the bench's sources differ from it.

    NOTE: cached: the first call stamps the run; a script calls it before it
    starts working, so a later edit to the tree cannot change the stamp."""
    try:
        commit = code_commit()
        # NOTE: plumbing only: nothing here writes to the repository or its index.
        dirty = _git("diff-index", "--name-only", "HEAD", *SOURCES) or \
            _git("ls-files", "--others", "--exclude-standard", *SOURCES)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{commit} + uncommitted changes" if dirty else commit


def model_source(cfg: DictConfig) -> ModelSource:
    """``cfg.model.source`` (a composed server config) as ``compose.model.ensure_default_model`` takes it."""
    from omegaconf import OmegaConf

    from compose.schema import ModelSource

    # NOTE: model.source is a ModelSource node (compose/schema.py): a mapping keyed by its field names.
    return ModelSource(**cast(dict[str, Any], OmegaConf.to_container(cfg.model.source)))
