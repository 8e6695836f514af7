"""``python -m bench.advise`` on two shipped traces -> ``bench/results/advise.md`` (+ two plots).

    python -m bench.scripts.advise_examples                 # both examples, ~10 min on 2 cores
    python -m bench.scripts.advise_examples --only sessions

Each example is exactly one ``python -m bench.advise`` command (printed above
its report), its objective written down before the first run; nothing is tuned.

* ``mooncake``: the whole Mooncake conversation hour (12,031 requests, at
  x3 on one simulated H100 with Llama-3.1-8B: the baselines' load) with every
  scheduling option; an operator who wants TTFT p99 within a minute and then
  the best median. Its wall time is the advise command's speed target (a
  12k-request hour with every scheduling option within 10 minutes on 2 cores).
* ``sessions``: Claude Code agent sessions (``penelope.md``'s tuning instance:
  120 sessions, seed 0) at a 600k-token KV pool, where eviction matters, with
  every eviction option; judged on mean TTFT and prefix hit rate (Penelope's
  pair), best mean TTFT.
"""

from __future__ import annotations

import argparse
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.advise import main as advise_main
from bench.scripts.baselines import COMMON
from bench.scripts.common import git_commit
from bench.scripts.penelope import SESSION_RATE, SESSIONS
from bench.traces.paths import REPO_ROOT

RESULTS = REPO_ROOT / "bench" / "results"
#: name -> (what it shows, the advise arguments)
EXAMPLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "mooncake": ("Mooncake conversation hour, every scheduling option", (
        "trace=mooncake_conversation", "trace.time_scale=3", *COMMON,
        "--kinds", "policy", "--objective", "ttft_s.p99<=60", "--best", "ttft_s.p50")),
    "sessions": ("Claude Code sessions at a 600k-token pool, every eviction option", (
        "trace=claude_code_sessions", f"trace.claude_code.session_rate={SESSION_RATE}",
        f"trace.claude_code.max_sessions={SESSIONS}", *COMMON, "sim.max_total_tokens=600000",
        "--kinds", "cache", "--metrics", "ttft_s.mean", "prefix_hit_rate", "--best", "ttft_s.mean")),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=list(EXAMPLES), default=list(EXAMPLES))
    ap.add_argument("--out", type=Path, default=RESULTS / "advise.md")
    ap.add_argument("--results", type=Path, default=Path("results") / "advise"
                    / datetime.now().strftime("%Y-%m-%d_%H-%M-%S"))
    args = ap.parse_args()
    commit = git_commit()
    parts = [f"# `python -m bench.advise` on two shipped traces\n\nBuilt by `python -m bench.scripts.advise_examples` "
             f"at commit {commit}, {datetime.now(UTC):%Y-%m-%d}. Method: the script's docstring and "
             "`bench/advise.py`'s. Each section is one advise command, run with `--jobs 2` on this 2-core "
             "machine; its plot is beside this file.\n"]
    for name in args.only:
        title, argv = EXAMPLES[name]
        folder = args.results / name
        t0 = time.perf_counter()
        advise_main([*argv, "--jobs", "2", "--out", str(folder)])
        wall = time.perf_counter() - t0
        shutil.copyfile(folder / "advise.png", args.out.parent / f"advise_{name}.png")
        report = (folder / "advise.md").read_text()
        parts.append(f"## {title}\n\n`python -m bench.advise {' '.join(argv)}` ({wall / 60:.1f} min wall, "
                     f"plot `advise_{name}.png`)\n\n{report}")
    args.out.write_text("\n".join(parts))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
