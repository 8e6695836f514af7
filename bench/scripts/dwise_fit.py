"""DWISE's estimators on served requests -> ``bench/results/dwise_estimators.json``,
and the shipped refiner for ``model=sdar_tiny`` (``--ship``).

    python -m bench.scripts.dwise_fit [--train 160] [--eval 60] [--max-tokens 96] [--ship]

1. **Lengths.** The LEAP prompt set (``bench/leap/prompts.py``: templates whose
   answers range from a word to pages) goes to the default autoregressive model
   (SmolLM2-135M, CPU server, greedy chat, capped at ``--max-tokens``); each
   prompt's output length is what a real model answers it with. NOTE: the tiny
   diffusion model has random weights and never ends on its own, so a real
   model's lengths stand in for what a trained diffusion model would write.
2. **Served.** The same prompts go to ``model=sdar_tiny`` with
   ``+policy=dwise policy.record_hidden_state=true`` as chat completions with
   ``max_tokens`` = that length (``ignore_eos``). Its feedback log holds, per
   request, the prompt's words, lines and tokens, the mean final hidden state
   of its first denoising block, and its true denoising rounds.
3. **Fit and judge.** On the ``train`` topics: the arrival regression (the
   online RLS, updated in log order, as inside the server) and the refiner
   (``fit_refiner``). On the held-out ``eval`` topics: Spearman rank
   correlation of each estimate with the true rounds.
With ``--ship`` the refiner and arrival head are written to
``policies/scheduling/data/`` (``policy.refiner_path`` /
``policy.arrival_head_path``); they belong to this model (hidden size 64).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.leap.prompts import leap_prompts
from bench.live.server import ServerProcess
from bench.scripts.common import git_commit
from bench.scripts.leap_curve import spearman
from bench.traces.paths import REPO_ROOT
from policies.predictors.rounds import ArrivalRoundsRegression, fit_refiner

SHIP_DIR = REPO_ROOT / "policies" / "scheduling" / "data"


async def chat_all(base_url: str, prompts: list[str], max_tokens: list[int], concurrency: int,
                   ignore_eos: bool) -> list[tuple[int, str]]:
    """Greedy chat completions; the completion tokens and request id of each."""
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=base_url, timeout=1800) as client:
        async def one(p: str, n: int) -> tuple[int, str]:
            async with sem:
                body = {"model": "default", "messages": [{"role": "user", "content": p}],
                        "max_tokens": n, "temperature": 0}
                if ignore_eos:
                    body["ignore_eos"] = True
                r = await client.post("/v1/chat/completions", json=body)
                r.raise_for_status()
                body = r.json()  # NOTE: the response id is SGLang's request id (the log's rid)
                return int(body["usage"]["completion_tokens"]), str(body["id"])
        return list(await asyncio.gather(*(one(p, n) for p, n in zip(prompts, max_tokens))))


def lengths(prompts: list[str], cap: int, concurrency: int, work: Path) -> list[int]:
    """Step 1 (cached in ``work/lengths.json``)."""
    cache = work / "lengths.json"
    if cache.exists():
        known = json.loads(cache.read_text())
        if known.get("cap") == cap and all(p in known["lengths"] for p in prompts):
            return [known["lengths"][p] for p in prompts]
    with ServerProcess(["model.dtype=float32", "sglang.max_running_requests=16"], work / "ar.log") as server:
        out = [t for t, _ in asyncio.run(chat_all(server.base_url, prompts, [cap] * len(prompts), concurrency,
                                                  False))]
    cache.write_text(json.dumps({"cap": cap, "lengths": dict(zip(prompts, out))}))
    return out


def served(prompts: list[str], n: list[int], concurrency: int, work: Path) -> list[dict[str, Any]]:
    """Step 2: the feedback record of each prompt, in prompt order."""
    log = (work / "feedback.jsonl").resolve()
    log.unlink(missing_ok=True)
    with ServerProcess(["model=sdar_tiny", "+policy=dwise", "policy.record_hidden_state=true",
                        "policy.online=false", f"server.feedback_log={log}"], work / "dllm.log") as server:
        sent = asyncio.run(chat_all(server.base_url, prompts, n, concurrency, True))
    records = {r["rid"]: r for r in map(json.loads, log.read_text().splitlines())}
    out = [records[rid] for _, rid in sent]
    if any(r["features"] is None or r["dllm"] is None for r in out):
        raise RuntimeError("a served request has no captured hidden state or round counts")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", type=int, default=160)
    ap.add_argument("--eval", type=int, default=60)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--work", type=Path, default=Path("results/dwise_fit"))
    ap.add_argument("--summary", type=Path, default=REPO_ROOT / "bench" / "results" / "dwise_estimators.json")
    ap.add_argument("--ship", action="store_true", help="write the fitted files to policies/scheduling/data/")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    commit = git_commit()
    train, held = leap_prompts(args.train, split="train"), leap_prompts(args.eval, split="eval")
    prompts = train + held
    n = lengths(prompts, args.max_tokens, args.concurrency, args.work)
    records = served(prompts, n, args.concurrency, args.work)
    fit_rows, eval_rows = records[:len(train)], records[len(train):]
    arrival = ArrivalRoundsRegression(prior_rounds=32.0)
    for r in sorted(fit_rows, key=lambda r: r["now"]):  # NOTE: the online updates, in finishing order
        d = r["dllm"]
        arrival.update(d["prompt_words"], d["prompt_lines"], r["num_input_tokens"], d["denoise_rounds"])
    refiner = fit_refiner(np.array([r["features"] for r in fit_rows]),
                          np.array([r["dllm"]["denoise_rounds"] for r in fit_rows]))
    true = np.array([r["dllm"]["denoise_rounds"] for r in eval_rows])
    at_arrival = np.array([arrival.predict(r["dllm"]["prompt_words"], r["dllm"]["prompt_lines"],
                                           r["num_input_tokens"]) for r in eval_rows])
    after_one = np.array([refiner.predict(r["features"]) for r in eval_rows])
    summary = {
        "command": f"python -m bench.scripts.dwise_fit --train {args.train} --eval {args.eval} "
                   f"--max-tokens {args.max_tokens}",
        "commit": commit, "train_requests": len(fit_rows), "eval_requests": len(eval_rows),
        "true_rounds_mean": float(true.mean()), "true_rounds_p50": float(np.median(true)),
        "spearman_at_arrival": spearman(at_arrival, true),
        "spearman_after_round_one": spearman(after_one, true),
        "capped_fraction": float(np.mean(np.array(n) >= args.max_tokens)),
    }
    args.summary.write_text(json.dumps(summary, indent=1) + "\n")
    if args.ship:
        SHIP_DIR.mkdir(parents=True, exist_ok=True)
        refiner.save(SHIP_DIR / "sdar_tiny_refiner.npz")
        arrival.save(SHIP_DIR / "sdar_tiny_arrival.npz")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
