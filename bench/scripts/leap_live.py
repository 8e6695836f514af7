"""LEAP vs SGLang's built-in orders on the live CPU server -> ``bench/results/leap_live.md``.

    python -m bench.scripts.leap_live [--requests 120] [--rate 0.4] [--seeds 0]
    python -m bench.scripts.leap_live --prompt-set public --policies fcfs lof leap leap-prompt-length \\
        --out bench/results/leap_live_public.md

For each policy (by default every SGLang built-in order, then LEAP), starts ``python -m server +policy=<policy>`` (float32,
``sglang.max_running_requests=--max-running``) and replays the same workload:
the LEAP prompts of the held-out ``eval`` topics (``bench/leap/prompts.py``;
the head never saw them), chat requests, greedy, at Poisson arrival times
(``--rate`` per second, seeded; identical for every policy). The model decides
each output's length (no ``ignore_eos``; capped at ``--max-tokens``), which is
what LEAP predicts; a trace replay (``python -m bench live.endpoint=...``)
forces every output length instead, so it cannot show LEAP.

LEAP starts from the head ``leap_curve`` trained on the ``train`` topics
(``--head``, written by ``python -m bench.scripts.leap_curve``) and keeps
learning online during the replay, as it would in service.

``--prompt-set public`` replays the public set's held-out ``eval`` evals instead
(``bench/leap/public.py``), LEAP starting from the head that
``python -m bench.scripts.leap_predictors`` trained on the ``train`` evals only;
the row ``leap-prompt-length`` is ``+policy=leap policy.features=prompt_length``
(the prompt-length regression), starting from its own head trained alike. The built-in
baselines run SGLang's own implementations. Per-token latency = end-to-end
latency / output tokens (streamed, client-side), averaged over requests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.leap.prompts import leap_prompts
from bench.leap.public import public_prompts
from bench.live.server import ServerProcess
from bench.scripts.common import add_output_args, git_commit
from bench.scripts.leap_curve import spearman
from bench.scripts.splits import BUILTINS


def arrivals(n: int, rate: float, seed: int) -> np.ndarray:
    """Poisson arrival times (seconds from the start), the same for the same seed."""
    return np.cumsum(np.random.default_rng(seed).exponential(1.0 / rate, n))


#: One chat request's messages.
Messages = list[dict[str, str]]
#: A row that is LEAP with an option set: its name -> its overrides.
VARIANTS = {"leap-prompt-length": ("+policy=leap", "policy.features=prompt_length")}
#: Each prompt set: what the replay sends, how the table names it, where each LEAP row's head is.
PROMPT_SETS: dict[str, dict[str, Any]] = {
    "templated": {"workload": "held-out LEAP prompts (`eval` topics of `bench/leap/prompts.py`)",
                  "head": "the head trained by `python -m bench.scripts.leap_curve` on the `train` topics",
                  "heads": {"leap": "results/leap/head.npz"}},
    "public": {"workload": "requests of held-out evals of the public set (`bench/leap/public.py`: OpenAI's "
                           "evals registry, one request per eval, never seen in training)",
               "head": "a head trained by `python -m bench.scripts.leap_predictors` on the `train` evals only "
                       "(each LEAP row its own, on its own features)",
               "heads": {"leap": "results/leap-public/head_train.npz",
                         "leap-prompt-length": "results/leap-public/head_train_prompt_length.npz"}},
}


def workload(prompt_set: str, n: int) -> list[Messages]:
    """``n`` held-out chat requests of ``prompt_set``."""
    if prompt_set == "public":
        held = public_prompts("eval")
        random.Random(0).shuffle(held)  # NOTE: evals come in name order; similar names sit together
        if n > len(held):
            raise SystemExit(f"the public set has {len(held)} held-out requests; asked for {n}")
        return [p.openai_messages() for p in held[:n]]
    return [[{"role": "user", "content": p}] for p in leap_prompts(n, seed=0, split="eval")]


async def replay(base_url: str, prompts: list[Messages], at: np.ndarray, max_tokens: int) -> list[dict[str, Any]]:
    """Send ``prompts[i]`` at ``at[i]`` (streamed chat, greedy); one record per request."""
    async with httpx.AsyncClient(base_url=base_url, timeout=1800) as client:
        t0 = time.perf_counter() + 0.5

        async def one(i: int) -> dict[str, Any]:
            await asyncio.sleep(max(0.0, t0 + at[i] - time.perf_counter()))
            sent = time.perf_counter()
            first, tokens, chunks = None, None, 0
            body = {"model": "default", "messages": prompts[i],
                    "max_tokens": max_tokens, "temperature": 0, "stream": True,
                    "stream_options": {"include_usage": True}}
            async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                r.raise_for_status()
                async for line in r.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunk = json.loads(line[6:])
                    if chunk.get("usage"):
                        tokens = chunk["usage"]["completion_tokens"]
                    if any(c.get("delta", {}).get("content") for c in chunk.get("choices", [])):
                        chunks += 1
                        first = first or time.perf_counter()
            end = time.perf_counter()
            return {"i": i, "sent_s": sent - t0, "lag_s": sent - t0 - at[i], "ttft_s": (first or end) - sent,
                    "e2e_s": end - sent, "output_tokens": tokens if tokens is not None else chunks}

        return list(await asyncio.gather(*(one(i) for i in range(len(prompts)))))


def summarize(records: list[dict[str, Any]]) -> dict[str, float]:
    e2e = np.array([r["e2e_s"] for r in records])
    out = np.array([max(1, r["output_tokens"]) for r in records])
    ttft = np.array([r["ttft_s"] for r in records])
    span = max(r["sent_s"] + r["e2e_s"] for r in records) - min(r["sent_s"] for r in records)
    return {"per_token_s": float((e2e / out).mean()), "ttft_p50_s": float(np.percentile(ttft, 50)),
            "ttft_p99_s": float(np.percentile(ttft, 99)), "e2e_mean_s": float(e2e.mean()),
            "e2e_p99_s": float(np.percentile(e2e, 99)), "tokens_per_s": float(out.sum() / span),
            "client_lag_max_s": float(max(r["lag_s"] for r in records))}


def run_policy(policy: str, args: argparse.Namespace, prompts: list[Messages], at: np.ndarray,
               folder: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One server, one replay: the records, and LEAP's feedback log (empty for built-ins)."""
    folder.mkdir(parents=True, exist_ok=True)
    feedback = (folder / f"{policy}_feedback.jsonl").resolve()
    overrides = ["model.dtype=float32", f"sglang.max_running_requests={args.max_running}",
                 *VARIANTS.get(policy, (f"+policy={policy}",))]
    if policy in args.heads:  # NOTE: the row's inputs (its trained head), not a special case in a host
        overrides += [f"policy.head_path={args.heads[policy].resolve()}", f"server.feedback_log={feedback}"]
    with ServerProcess(overrides, folder / f"{policy}_server.log") as server:
        for q in ("Hello!", "What is 2+2?"):  # NOTE: warm-up; the first forwards are slow
            httpx.post(server.base_url + "/v1/chat/completions", timeout=300, json={
                "model": "default", "messages": [{"role": "user", "content": q}], "max_tokens": 8}).raise_for_status()
        httpx.post(server.base_url + "/flush_cache", timeout=60)
        records = asyncio.run(replay(server.base_url, prompts, at, args.max_tokens))
    logged = [json.loads(line) for line in feedback.read_text().splitlines()] if feedback.exists() else []
    return records, logged


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompt-set", choices=sorted(PROMPT_SETS), default="templated")
    ap.add_argument("--head", type=Path, default=None, help="LEAP's starting head (default: the prompt set's)")
    ap.add_argument("--requests", type=int, default=120)
    ap.add_argument("--rate", type=float, default=0.4, help="arrivals per second (Poisson)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0], help="arrival-time seeds")
    ap.add_argument("--max-running", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--policies", nargs="+", default=[*BUILTINS, "leap"],
                    help="every SGLang built-in order and LEAP (default; ~9 min each)")
    add_output_args(ap, "leap_live", "leap_live")
    args = ap.parse_args()
    heads = {name: Path(path) for name, path in PROMPT_SETS[args.prompt_set]["heads"].items()}
    if args.head is not None:
        heads["leap"] = args.head
    args.heads = {p: heads[p] for p in args.policies if p in heads}
    for policy, head in args.heads.items():
        if not head.exists():
            ap.error(f"{head} ({policy}'s head) does not exist: run python -m bench.scripts."
                     f"{'leap_predictors' if args.prompt_set == 'public' else 'leap_curve'} first")
    unknown = [p for p in args.policies if p not in (*BUILTINS, "leap", *VARIANTS)]
    if unknown:
        ap.error(f"unknown policies {unknown}: built-ins {BUILTINS}, leap, {sorted(VARIANTS)}")
    args.results.mkdir(parents=True, exist_ok=True)
    commit, started = git_commit(), time.time()
    prompts = workload(args.prompt_set, args.requests)
    runs: dict[int, dict[str, Any]] = {}
    for seed in args.seeds:
        at = arrivals(len(prompts), args.rate, seed)
        runs[seed] = {}
        for policy in args.policies:
            records, logged = run_policy(policy, args, prompts, at, args.results / f"seed{seed}")
            runs[seed][policy] = {"summary": summarize(records), "records": records, "feedback": logged}
            print(seed, policy, json.dumps(runs[seed][policy]["summary"]), flush=True)
    (args.results / "leap_live.json").write_text(json.dumps(runs, indent=1))
    args.out.write_text(render(runs, args, commit, time.time() - started))
    print(args.out.read_text())


def prediction_quality(logged: list[dict[str, Any]], n: int) -> tuple[float, int]:
    """Spearman of LEAP's logged predictions vs true lengths over the replay's requests."""
    ours = [r for r in logged if not r["aborted"] and r["num_input_tokens"] > 8][-n:]
    return spearman(np.array([r["predicted_output_tokens"] for r in ours]),
                    np.array([r["num_output_tokens"] for r in ours])), len(ours)


def render(runs: dict[int, dict[str, Any]], args: argparse.Namespace, commit: str, wall: float) -> str:
    policies = args.policies
    seeds = list(runs)
    about = PROMPT_SETS[args.prompt_set]
    ours = [p for p in policies if p not in BUILTINS]
    lines = [
        "# LEAP on the live CPU server" + (", public prompts" if args.prompt_set == "public" else ""), "",
        "Produced by `python -m bench.scripts.leap_live"
        + (f" --prompt-set {args.prompt_set}" if args.prompt_set != "templated" else "")
        + f" --requests {args.requests} "
        f"--rate {args.rate} --seeds {' '.join(map(str, seeds))} --max-running {args.max_running} "
        f"--max-tokens {args.max_tokens} --policies {' '.join(policies)}` at commit {commit} "
        f"({datetime.now(UTC):%Y-%m-%d}, {wall / 60:.0f} min). SmolLM2-135M float32 on this machine's CPU "
        "(one thread: `server.cpu_threads=1`, which sets the model's OMP_NUM_THREADS), "
        f"`sglang.max_running_requests={args.max_running}`. Workload: {args.requests} {about['workload']}, "
        f"Poisson arrivals at {args.rate}/s, greedy, outputs decided by the model "
        f"(capped at {args.max_tokens}). LEAP starts from {about['head']} and keeps learning online. "
        "Built-ins run SGLang's own implementations.", "",
        "Mean per-token latency (end-to-end / output tokens), per arrival seed:", "",
        "| seed | " + " | ".join(policies) + "".join(f" | {p} vs FCFS | {p} vs best built-in" for p in ours) + " |",
        "|---|" + "---|" * (len(policies) + 2 * len(ours))]
    for seed in seeds:
        s = {p: runs[seed][p]["summary"] for p in policies}
        row = [f"{s[p]['per_token_s'] * 1000:.0f} ms" for p in policies]
        builtins = [p for p in policies if p in BUILTINS]
        best = min(builtins, key=lambda b: s[b]["per_token_s"]) if builtins else None
        for p in ours:
            if best is not None:
                row += [f"{s[p]['per_token_s'] / s['fcfs']['per_token_s'] - 1:+.1%}" if "fcfs" in s else "",
                        f"{s[p]['per_token_s'] / s[best]['per_token_s'] - 1:+.1%} ({best})"]
            else:
                row += ["", ""]
        lines.append(f"| {seed} | " + " | ".join(row) + " |")
    lines += ["", "TTFT p50 / p99, E2E mean / p99 (s), output tokens/s:", "",
              "| seed | policy | TTFT p50 | TTFT p99 | E2E mean | E2E p99 | tokens/s |", "|---|---|---|---|---|---|---|"]
    for seed in seeds:
        for p in policies:
            s = runs[seed][p]["summary"]
            lines.append(f"| {seed} | {p} | {s['ttft_p50_s']:.2f} | {s['ttft_p99_s']:.1f} | {s['e2e_mean_s']:.1f} | "
                         f"{s['e2e_p99_s']:.1f} | {s['tokens_per_s']:.1f} |")
    if "leap" in policies:
        quality = [prediction_quality(runs[seed]["leap"]["feedback"], args.requests) for seed in seeds]
        lines += ["", "LEAP's predictions on the held-out prompts (logged by the server before it learned from "
                  "each request), Spearman vs the true length: "
                  + ", ".join(f"seed {seed}: {rho:.2f} over {n}" for seed, (rho, n) in zip(seeds, quality)) + "."]
    lag = max(runs[seed][p]["summary"]["client_lag_max_s"] for seed in seeds for p in policies)
    lines += ["", f"Client send lag (sent - scheduled), max over all runs: {lag * 1000:.0f} ms.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
