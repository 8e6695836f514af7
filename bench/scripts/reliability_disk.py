"""The disk rows of ``bench.scripts.reliability``: SGLang's HiCache file storage made full or unwritable.

A unit with SGLang's host tier and file storage (``sglang.enable_hierarchical_cache=true
sglang.hicache_storage_backend=file``), float32 (repeats are compared token for
token with their first answers), and a small device pool (1,024 tokens, so
prefixes reach storage within a few requests) serves prompts, pushes them out of
the device and host tiers and repeats them: first with working storage, then
after the storage breaks (``bench.live.tiers.storage_fault``):

* **full**: the storage directory is its own small filesystem (a tmpfs mount,
  which needs root; the row says so when the mount is refused) and a ballast
  file fills it to ENOSPC;
* **unwritable**: the storage directory is replaced by a file, so every write
  fails (ENOTDIR).
"""

from __future__ import annotations

import random
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.live import tiers
from bench.live.server import ServerProcess

DEVICE_TOKENS = 1024
HOST_TOKENS = tiers.host_tokens(DEVICE_TOKENS)
PROMPTS = 4
PROMPT_WORDS = 300
#: The tmpfs of the "full" row: room for the working-storage phase (about 5,000 pages of 46 KB).
FULL_FS_MIB = 512


def _row(logs: Path, name: str, storage: Path, breaks: Callable[[], object], seed: int) -> dict[str, Any]:
    with ServerProcess(list(tiers.hicache_overrides(storage, DEVICE_TOKENS)), logs / f"{name}.log") as unit:
        return tiers.storage_fault(unit.base_url, unit.log_path, breaks, random.Random(seed), PROMPTS,
                                   PROMPT_WORDS, HOST_TOKENS + DEVICE_TOKENS)


def disk_section(logs: Path) -> list[dict[str, Any]]:
    """One row per storage fault (``full`` may carry ``skipped`` with the reason instead)."""
    rows: list[dict[str, Any]] = []
    full = logs / "storage-full"
    full.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FULL_FS_MIB}m", "tmpfs", str(full)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        rows.append({"fault": "full", "skipped": f"tmpfs mount refused: {mounted.stderr.strip()[:160]}"})
    else:
        try:
            rows.append({"fault": "full", **_row(logs, "disk-full", full, lambda: tiers.fill_up(full), seed=5)})
        finally:
            subprocess.run(["umount", str(full)], capture_output=True)
    unwritable = logs / "storage-unwritable"
    rows.append({"fault": "unwritable", **_row(logs, "disk-unwritable", unwritable,
                                               lambda: tiers.make_unwritable(unwritable), seed=6)})
    return rows


def render_disk(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "## Disk full or unwritable",
        "",
        f"SGLang's host tier and file storage, float32, device pool {DEVICE_TOKENS} tokens; per phase {PROMPTS} fresh "
        f"prompts of {PROMPT_WORDS} words, then more than {HOST_TOKENS + DEVICE_TOKENS} tokens of others (out of "
        "the device and host tiers), then the same prompts again; 16 greedy tokens each. Full: the storage "
        f"directory is a {FULL_FS_MIB} MiB tmpfs filled to ENOSPC by a ballast file; unwritable: the directory "
        "replaced by a file (ENOTDIR).",
        "",
        "| storage | repeats from storage / equal, before | requests during the fault: answered / failed | "
        "repeats from storage / equal, during | failed page writes (SGLang's log) | tokens stored during the fault "
        "| healthy after |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['fault']} | not run: {r['skipped']} | | | | | |")
            continue
        b, a = r["before"], r["after"]
        failed = sum(v for k, v in a["outcomes"].items() if k != "answered")
        lines.append(
            f"| {r['fault']} | {b['repeat_tokens_from']['storage']} tokens / {b['repeats_equal']} of {b['repeats']} | "
            f"{a['outcomes'].get('answered', 0)} / {failed} | {a['repeat_tokens_from']['storage']} tokens / "
            f"{a['repeats_equal']} of {a['repeats']} | {r['failed_page_writes']} | "
            f"{r['stored_tokens_during_fault']:.0f} | {'yes' if r['healthy_after'] else 'NO'} |")
    return [*lines, ""]
