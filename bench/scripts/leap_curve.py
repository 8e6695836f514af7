"""LEAP's length head learning live on the CPU server: Spearman rank correlation vs updates.

    python -m bench.scripts.leap_curve [--prompts 500] [--max-tokens 200] [--concurrency 8]

Starts ``python -m server +policy=leap server.feedback_log=...`` (float32),
sends the project's LEAP prompt set (``bench/leap/prompts.py``, its ``train``
topics; ``leap_live`` judges the head on the ``eval`` topics) greedily, and reads the
server's feedback log: for every finished request, the output length the head
predicted from its real features (SmolLM2's mean prompt embedding, LEAP's
default) *before* learning from it, and the true length the model produced. Prints the rank correlation over
sliding windows as the head learns, the
correlation after ``--after`` updates (target >= 0.5 after 300), and the
head's log-error model (mean, std of log(pred/true)) that the simulator's LEAP
rows use; replays the logged updates offline to save the head (``head.npz``).
The summary (``leap_curve.json``) and plot are written to ``bench/results/``:
``bench.scripts.leap_sim`` reads the error model from there.
Outputs capped at ``--max-tokens`` count as that length.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

import httpx
import numpy as np
from scipy.stats import rankdata

from bench.leap.prompts import leap_prompts
from bench.live.server import ServerProcess
from bench.scripts.common import git_commit
from policies.predictors.rls import RlsLengthHead


def spearman(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Spearman's rank correlation: Pearson's over average ranks (ties share their mean rank)."""
    ra, rb = rankdata(np.asarray(a, float)), rankdata(np.asarray(b, float))
    return float(np.corrcoef(ra, rb)[0, 1])


async def send_all(base_url: str, prompts: list[str], max_tokens: int, concurrency: int) -> None:
    sem = asyncio.Semaphore(concurrency)
    # NOTE: LEAP serves the shortest predicted first, so a long request can wait behind new short
    # ones for most of the run (~17 min on a quiet machine): a client timeout must not end the run.
    async with httpx.AsyncClient(base_url=base_url, timeout=3600) as client:
        async def one(p: str) -> None:
            async with sem:
                r = await client.post("/v1/chat/completions", json={
                    "model": "default", "messages": [{"role": "user", "content": p}],
                    "max_tokens": max_tokens, "temperature": 0})
                r.raise_for_status()
        await asyncio.gather(*(one(p) for p in prompts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=500)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--window", type=int, default=100)
    ap.add_argument("--after", type=int, default=300)
    ap.add_argument("--out", type=Path, default=Path("results/leap"))
    ap.add_argument("--summary", type=Path, default=Path("bench/results/leap_curve.json"))
    ap.add_argument("--reanalyse", action="store_true",
                    help="no server: analyse the feedback log an earlier run left in --out")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    commit = git_commit()  # NOTE: the code that produces the data: stamped before the run
    log = (args.out / "feedback.jsonl").resolve()
    if not args.reanalyse:
        log.unlink(missing_ok=True)
        prompts = leap_prompts(args.prompts, split="train")
        with ServerProcess(["model.dtype=float32", "+policy=leap", f"server.feedback_log={log}"],
                           args.out / "server.log") as server:
            asyncio.run(send_all(server.base_url, prompts, args.max_tokens, args.concurrency))
    records = [json.loads(line) for line in log.read_text().splitlines()]
    records = [r for r in records if r["features"] is not None and not r["aborted"]
               and r["num_input_tokens"] > 8]  # NOTE: drops SGLang's warm-up and health probes
    pred = np.array([r["predicted_output_tokens"] for r in records])
    true = np.array([r["num_output_tokens"] for r in records])
    curve = [(end, spearman(pred[end - args.window:end], true[end - args.window:end]))
             for end in range(args.window, len(records) + 1, 25)]
    after = slice(args.after, len(records))
    rho_after = spearman(pred[after], true[after]) if len(records) > args.after + 10 else float("nan")
    err = np.log(pred[after]) - np.log(np.maximum(true[after], 1))
    # NOTE: outputs cut at --max-tokens tie at the cap; report the uncut ones apart
    uncut = (true < args.max_tokens) & (np.arange(len(true)) >= args.after)
    rho_uncut = spearman(pred[uncut], true[uncut]) if uncut.sum() > 10 else float("nan")
    head = RlsLengthHead(dim=len(records[0]["features"]))
    for r in records:  # NOTE: the same updates, in the same order, as inside the server
        head.update(r["features"], r["num_output_tokens"])
    head.save(args.out / "head.npz")
    result = {"requests": len(records), "max_tokens": args.max_tokens, "window": args.window,
              "curve": curve, f"spearman_after_{args.after}": rho_after,
              "log_error_mean": float(err.mean()) if len(err) else None,
              "log_error_std": float(err.std()) if len(err) else None,
              "true_length_mean": float(true.mean()), "true_length_p50": float(np.median(true)),
              "capped_fraction": float((true >= args.max_tokens).mean()),
              f"spearman_after_{args.after}_uncapped": rho_uncut, "uncapped_after": int(uncut.sum())}
    result["command"] = f"python -m bench.scripts.leap_curve --prompts {args.prompts} " \
        f"--max-tokens {args.max_tokens} --concurrency {args.concurrency}"
    result["commit"] = commit
    args.summary.write_text(json.dumps(result, indent=1) + "\n")
    _plot(curve, args.summary.with_suffix(".png"), args.window)
    print(f"{'updates':>8} {'spearman':>9}")
    for end, rho in curve:
        print(f"{end - args.window:>8} {rho:9.3f}")
    print(f"spearman over requests {args.after}..{len(records)}: {rho_after:.3f}; "
          f"log-error mean {result['log_error_mean']:.3f} std {result['log_error_std']:.3f}")


def _plot(curve: list[tuple[int, float]], path: Path, window: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([e - window for e, _ in curve], [r for _, r in curve], marker="o")
    ax.axhline(0.5, ls="--", c="gray")
    ax.set_xlabel(f"online updates before the window (window = {window} requests)")
    ax.set_ylabel("Spearman(predicted, true)")
    ax.set_title("LEAP length head, live SmolLM2 prompt embeddings")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
