"""SGLang's own load generator against a live server: ``python -m sglang.bench_serving``.

The outside check of our harness: the same command a user of SGLang types, run
as a subprocess against a server started by ``bench.live.server``, its JSONL
result read back. Only the datasets that need no download are offered
(``generated-shared-prefix``, ``random-ids``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.live.server import REPO, ServerProcess

#: bench_serving's backend for our server's OpenAI completions route.
BACKEND = "sglang-oai"


@dataclass(frozen=True)
class Dataset:
    """A bench_serving workload (its ``--dataset-name`` and the flags that shape it)."""

    name: str
    """Short label for tables."""
    flags: tuple[str, ...]
    """bench_serving's flags for it (``--dataset-name`` included)."""
    num_prompts: int
    """Requests per run."""


#: Shared-prefix chat: 4 groups x 8 prompts, 384-token system prompts, 48-token questions,
#: 24-token outputs, lengths drawn in [0.5, 1] x the nominal.
SHARED_PREFIX = Dataset("generated-shared-prefix", (
    "--dataset-name", "generated-shared-prefix", "--gsp-num-groups", "4", "--gsp-prompts-per-group", "8",
    "--gsp-system-prompt-len", "384", "--gsp-question-len", "48", "--gsp-output-len", "24",
    "--gsp-range-ratio", "0.5"), 32)
#: Random token ids, no shared prefix: 256-token prompts, 24-token outputs, lengths in [0.5, 1] x nominal.
RANDOM_IDS = Dataset("random-ids", (
    "--dataset-name", "random-ids", "--random-input-len", "256", "--random-output-len", "24",
    "--random-range-ratio", "0.5"), 32)

#: What a table reads of bench_serving's result (milliseconds, requests per second).
FIELDS = ("mean_ttft_ms", "p99_ttft_ms", "mean_e2e_latency_ms", "p99_e2e_latency_ms", "request_throughput",
          "completed")


def tokenizer_path(base_url: str) -> str:
    """The served tokenizer's path (bench_serving needs it; there is no hub to fetch it from)."""
    return str(httpx.get(base_url + "/model_info", timeout=60).json()["tokenizer_path"])


def bench_serving_argv(base_url: str, tokenizer: str, dataset: Dataset, rate: float, seed: int,
                       out: Path, tag: str) -> list[str]:
    """The arguments of one ``python -m sglang.bench_serving`` run at ``rate`` requests per
    second (Poisson arrivals, its default), its result appended to ``out``."""
    return ["--backend", BACKEND, "--base-url", base_url, "--tokenizer", tokenizer, *dataset.flags,
            "--num-prompts", str(dataset.num_prompts), "--request-rate", str(rate), "--seed", str(seed),
            "--flush-cache", "--disable-tqdm", "--output-file", str(out), "--tag", tag]


def bench_serving_runs(argvs: Sequence[list[str]], timeout_s: float = 3600) -> None:
    """Run bench_serving once per argument list, in order, in one interpreter (``peer_driver``).

    NOTE: each run is bench_serving's own command-line entry with exactly those
    arguments; one interpreter per server only saves re-importing SGLang for every
    run (8 s each here). Offline: bench_serving first looks the served model's name
    up on the Hugging Face hub, and with no hub reachable its retries cost 46 s of
    every run before it falls back to the local tokenizer it was given."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    argv = [sys.executable, "-m", "bench.live.peer_driver", json.dumps(list(argvs))]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"bench_serving failed ({proc.returncode}):\n{proc.stderr[-3000:]}")


def read_result(out: Path, dataset: Dataset) -> dict[str, Any]:
    """``FIELDS`` of the run whose result is in ``out``; raises on a lost request."""
    result = json.loads(out.read_text().splitlines()[-1])
    if result["completed"] != dataset.num_prompts:
        raise RuntimeError(f"{out.stem}: {result['completed']} of {dataset.num_prompts} requests completed")
    return {k: result[k] for k in FIELDS}


@dataclass(frozen=True)
class Run:
    """One bench_serving run on a server: what to print, the workload, its rate and seed."""

    label: str
    dataset: Dataset
    rate: float
    seed: int


def runs_on_server(overrides: Sequence[str], runs: Sequence[Run], tmp: Path, name: str) -> list[dict[str, Any]]:
    """Start ``python -m server <overrides>`` (its log ``tmp/<name>.log``), do ``runs`` on it in
    order, printing each result's line; every run's ``FIELDS``, in order."""
    results = []
    with ServerProcess(list(overrides), tmp / f"{name}.log") as server:
        tokenizer = tokenizer_path(server.base_url)
        outs = [tmp / f"{name}-{i}.jsonl" for i in range(len(runs))]
        bench_serving_runs([bench_serving_argv(server.base_url, tokenizer, run.dataset, run.rate, run.seed, out,
                                               out.stem) for run, out in zip(runs, outs, strict=True)])
    for run, out in zip(runs, outs, strict=True):
        r = read_result(out, run.dataset)
        print(f"{run.label}: TTFT {r['mean_ttft_ms'] / 1e3:.2f} s, E2E {r['mean_e2e_latency_ms'] / 1e3:.2f} s, "
              f"{r['request_throughput']:.2f} req/s", flush=True)
        results.append(r)
    return results
