"""LEAP's length head against other length predictors, on public prompts -> ``bench/results/leap_predictors.md``.

    python -m bench.scripts.leap_predictors            # serve the prompts live, then analyse
    python -m bench.scripts.leap_predictors --reanalyse --out results/leap-public

1. **Live.** Starts ``python -m server +policy=leap`` (float32, the CPU model)
   with a feedback log and sends the public prompt set (``bench/leap/public.py``:
   one request per eval of OpenAI's evals registry, PyPI, MIT), the ``train``
   evals first (two requests each), then the ``eval`` evals (one each), greedy,
   outputs capped at ``--max-tokens``. The log holds, per request, the server's
   real LEAP features (the mean prompt embedding), the head's prediction made
   before it learned from that request, and the true output length.
2. **Predictors**, each learning online in the server's finishing order and
   predicting every request before learning from it, judged on the ``eval``
   evals only (never seen in training): LEAP's head (the server's own logged
   predictions); prompt-length regression (the same RLS head on
   ``log(1 + prompt tokens)``); a separate small proxy model (the same RLS head on
   the final hidden state of a second copy of the 135M model, run over the
   prompt before scheduling, mean-pooled: the BERT/OPT-125M-sized proxies of the
   length-prediction literature). Reported: Spearman, the log-error model, and
   each predictor's own cost per request on this CPU.
3. **Simulator.** Each predictor's log-error model drives LEAP's simulated
   length signal on the evaluation split of ``bench.scripts.leap_sim`` (with the
   templated set's error for comparison): latency after scheduling, and how far
   the verdicts move.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.leap.predictors import (
    Logged,
    ProxyModel,
    best_ridge,
    judge,
    online,
    predict_seconds,
    prompt_length_features,
    replay_gap,
    ridge_sweep,
    trained_head,
)
from bench.leap.public import EVALS_REQUIREMENT, PublicPrompt, public_prompts
from bench.leap.transfer import ErrorModel, error_models, sim_section, simulate
from bench.live.server import ServerProcess
from bench.report import fmt
from bench.scripts.common import git_commit, model_source
from compose.config import compose
from compose.model import ensure_default_model
from policies.scheduling.leap import RIDGE_BY_FEATURES


def request_plan() -> list[tuple[str, PublicPrompt]]:
    """``(rid, prompt)`` in sending order: the train evals (two each), then the eval evals (one each)."""
    prompts = public_prompts("train", per_eval=2) + public_prompts("eval", per_eval=1)
    return [(f"pub-{i:04d}", p) for i, p in enumerate(prompts)]


async def send_all(base_url: str, plan: list[tuple[str, PublicPrompt]], max_tokens: int,
                   concurrency: int) -> None:
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=base_url, timeout=1800) as client:
        async def one(rid: str, prompt: PublicPrompt) -> None:
            async with sem:
                r = await client.post("/v1/chat/completions", json={
                    "model": "default", "messages": prompt.openai_messages(), "rid": rid,
                    "max_tokens": max_tokens, "temperature": 0})
                r.raise_for_status()
        await asyncio.gather(*(one(rid, p) for rid, p in plan))


def collect(out: Path, max_tokens: int, concurrency: int, commit: str) -> None:
    """Serve the public prompts on ``+policy=leap`` and keep the feedback log (``out/feedback.jsonl``);
    ``out/collected.json`` says how and at which commit."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "collected.json").unlink(missing_ok=True)
    log = (out / "feedback.jsonl").resolve()
    log.unlink(missing_ok=True)
    plan = request_plan()
    with open(out / "prompts.jsonl", "w") as f:
        for rid, p in plan:
            f.write(json.dumps({"rid": rid, "eval": p.eval_name, "split": p.split,
                                "messages": p.openai_messages()}) + "\n")
    with ServerProcess(["model.dtype=float32", "+policy=leap", f"server.feedback_log={log}"],
                       out / "server.log") as server:
        asyncio.run(send_all(server.base_url, plan, max_tokens, concurrency))
    (out / "collected.json").write_text(json.dumps({"commit": commit, "max_tokens": max_tokens,
                                                    "concurrency": concurrency}) + "\n")


def save_heads(records: list[Logged], out: Path) -> None:
    """Heads learned from the ``train`` evals only, for ``leap_live --prompt-set public``:
    ``head_train.npz`` (LEAP's features), ``head_train_prompt_length.npz`` (prompt length)."""
    train = [r for r in records if r.split == "train"]
    lengths = [r.num_output_tokens for r in train]
    trained_head([r.features for r in train], lengths).save(out / "head_train.npz")
    trained_head(prompt_length_features(train), lengths).save(out / "head_train_prompt_length.npz")


#: What the server's head learned from, in order: features, output tokens, its prediction before.
Learned = list[tuple[list[float], int, float]]


def load(out: Path) -> tuple[list[Logged], Learned]:
    """The finished public requests of ``out/feedback.jsonl`` in finishing order, joined with their
    prompts; and every request the server's head learned from (its warm-up and probes too)."""
    sent = {p["rid"]: p for p in map(json.loads, (out / "prompts.jsonl").read_text().splitlines())}
    records, learned = [], []
    for r in map(json.loads, (out / "feedback.jsonl").read_text().splitlines()):
        if r["aborted"] or r["features"] is None:  # NOTE: LEAP learns from neither
            continue
        learned.append((r["features"], r["num_output_tokens"], r["predicted_output_tokens"]))
        if r["rid"] in sent:  # NOTE: drops SGLang's warm-up and health probes
            p = sent[r["rid"]]
            records.append(Logged(r["rid"], p["eval"], p["split"], p["messages"], r["num_input_tokens"],
                                  r["num_output_tokens"], tuple(r["features"]), r["predicted_output_tokens"]))
    if len(records) != len(sent):
        raise SystemExit(f"{len(sent) - len(records)} of {len(sent)} requests missing from the feedback log")
    return records, learned


#: The predictors, in the table's order.
PREDICTORS = ("LEAP head", "prompt-length regression", "proxy model")


def analyse(records: list[Logged], learned: Learned, cap: int) -> dict[str, Any]:
    """Every predictor's online predictions judged on the ``eval`` split, and its cost per request."""
    checkpoint = ensure_default_model(model_source(compose([])))
    proxy = ProxyModel(checkpoint)
    proxy_features, forward_s, gather_s, token_mismatch = [], [], [], 0
    for r in records:
        ids = proxy.ids(r.messages)
        token_mismatch += len(ids) != r.num_input_tokens
        feats, seconds = proxy.features(ids)
        proxy_features.append(feats)
        forward_s.append(seconds)
        gather_s.append(proxy.embedding_seconds(ids))
    lengths = [r.num_output_tokens for r in records]
    true = np.array(lengths)
    evaluation = np.array([r.split == "eval" for r in records])
    predictions = {"LEAP head": np.array([r.server_prediction for r in records]),
                   "prompt-length regression": online(prompt_length_features(records), lengths),
                   "proxy model": online(proxy_features, lengths)}
    train = [r for r in records if r.split == "train"]
    train_lengths = [r.num_output_tokens for r in train]
    sweeps = {"model": ridge_sweep([r.features for r in train], train_lengths),
              "prompt_length": ridge_sweep(prompt_length_features(train), train_lengths)}
    dim = len(records[0].features)
    cost = {"LEAP head": float(np.median(gather_s)) + predict_seconds(dim),
            "prompt-length regression": predict_seconds(1),
            "proxy model": float(np.median(forward_s)) + predict_seconds(len(proxy_features[0]))}
    return {"judged": {name: judge(pred, true, evaluation, cap) for name, pred in predictions.items()},
            "cost_s": cost, "proxy_forward_p90_s": float(np.percentile(forward_s, 90)),
            "replay_gap": replay_gap(learned),
            "ridge_sweep": {features: [[ridge, value] for ridge, value in sweep.items()]
                            for features, sweep in sweeps.items()},
            "ridge_chosen": {features: best_ridge(sweep) for features, sweep in sweeps.items()}, "token_mismatch": token_mismatch,
            "requests": len(records), "eval_requests": int(evaluation.sum()),
            "eval_evals": len({r.eval_name for r in records if r.split == "eval"}),
            "train_evals": len({r.eval_name for r in records if r.split == "train"}),
            "true_p50": float(np.median(true[evaluation])),
            "capped": float((true[evaluation] >= cap).mean()),
            "prompt_p50": float(np.median([r.num_input_tokens for r in records]))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--out", type=Path, default=Path("results/leap-public"))
    ap.add_argument("--curve", type=Path, default=Path("bench/results/leap_curve.json"))
    ap.add_argument("--table", type=Path, default=Path("bench/results/leap_predictors.md"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--reanalyse", action="store_true",
                    help="no server: analyse the feedback log an earlier run left in --out")
    ap.add_argument("--check-defaults", action="store_true",
                    help="exit 1 when conf/policy/leap.yaml's ridge is not the one the train evals choose")
    args = ap.parse_args()
    commit, t0 = git_commit(), time.perf_counter()  # NOTE: stamped before any work
    if not args.reanalyse:
        collect(args.out, args.max_tokens, args.concurrency, commit)
    collected = json.loads((args.out / "collected.json").read_text())
    if collected["max_tokens"] != args.max_tokens:
        raise SystemExit(f"{args.out} was served with --max-tokens {collected['max_tokens']}")
    args.concurrency, args.collected_at = collected["concurrency"], collected["commit"]
    records, learned = load(args.out)
    save_heads(records, args.out)
    found = analyse(records, learned, args.max_tokens)
    (args.out / "predictors.json").write_text(json.dumps(found, indent=1) + "\n")
    for name, j in found["judged"].items():
        print(f"{name}: Spearman {j['spearman']:.3f}, log-error {j['log_error_mean']:+.3f} +- "
              f"{j['log_error_std']:.3f}, {found['cost_s'][name] * 1e3:.3f} ms/request", flush=True)
    curve = json.loads(args.curve.read_text())
    models = error_models(found, curve)
    table = simulate(models, args.out / "sim", args.jobs)
    args.table.write_text(render(found, curve, models, table, args, commit, time.perf_counter() - t0))
    print(f"wrote {args.table}")
    stale = [f"policies/scheduling/leap.py: RIDGE_BY_FEATURES[{features!r}] is {RIDGE_BY_FEATURES[features]:g}; "
             f"the train evals chose {chosen:g}" for features, chosen in found["ridge_chosen"].items()
             if chosen != RIDGE_BY_FEATURES[features]]
    print("\n".join(stale) or f"ridge as chosen on the train evals: {found['ridge_chosen']}")
    if stale and args.check_defaults:
        raise SystemExit(1)


def render(found: dict[str, Any], curve: dict[str, Any], models: list[ErrorModel],
           table: dict[str, dict[str, dict[str, Any]]], args: argparse.Namespace, commit: str, wall_s: float) -> str:
    judged, cost = found["judged"], found["cost_s"]
    lines = ["# LEAP's length head against other predictors, on public prompts", "",
             f"Produced by `python -m bench.scripts.leap_predictors` at commit {commit} "
             f"({datetime.now(UTC):%Y-%m-%d}, {wall_s / 60:.0f} min). Prompts: `bench/leap/public.py`, one "
             f"chat request per eval of OpenAI's evals registry (PyPI `{EVALS_REQUIREMENT}`, MIT; ~560 evals "
             "written by different people, so no two requests share a template), split by eval: "
             f"{found['requests'] - found['eval_requests']} requests from {found['train_evals']} `train` evals "
             f"(two each) sent first, then {found['eval_requests']} from {found['eval_evals']} `eval` evals "
             "(one each) that no predictor had seen. Served live by the CPU server (SmolLM2-135M float32, "
             f"`+policy=leap`, greedy, outputs capped at {args.max_tokens} tokens, concurrency "
             f"{args.concurrency}; served at commit {args.collected_at}); on the `eval` requests the true "
             f"length's median is {found['true_p50']:.0f} "
             f"and {found['capped']:.0%} hit the cap; prompts' median is {found['prompt_p50']:.0f} tokens. "
             "Every predictor is LEAP's RLS head on different features, learning online in the server's "
             "finishing order and predicting each request before learning from it "
             "(`bench/leap/predictors.py`); judged on the `eval` requests.", "",
             "## Predictors", "",
             "| predictor | features | Spearman | Spearman, uncapped (n) | log-error mean | log-error std | "
             "cost per request |", "|---|---|---|---|---|---|---|",
             f"| LEAP head, templated set (`leap_curve.json`, for comparison) | mean prompt embedding | "
             f"{fmt(next(v for k, v in curve.items() if k.startswith('spearman_after') and 'uncapped' not in k))} | "
             f"{fmt(next(v for k, v in curve.items() if k.endswith('_uncapped')))} ({curve['uncapped_after']}) | "
             f"{curve['log_error_mean']:+.3f} | {curve['log_error_std']:.3f} | as below |"]
    features = {"LEAP head": "the serving model's mean prompt embedding (576)",
                "prompt-length regression": "log(1 + prompt tokens)",
                "proxy model": "a second copy of the model: final hidden state, mean over the prompt (576)"}
    for name in PREDICTORS:
        j = judged[name]
        lines.append(f"| {name} | {features[name]} | {j['spearman']:.3f} | {fmt(j['spearman_uncapped'])} "
                     f"({j['uncapped']}) | {j['log_error_mean']:+.3f} | {j['log_error_std']:.3f} | "
                     f"{cost[name] * 1e3:.3f} ms |")
    lines += ["", "Cost: on this CPU, one thread, tokenization excluded (the server has the tokens): LEAP's "
              "embedding gather and mean plus the head's prediction; the proxy's forward pass (p90 "
              f"{found['proxy_forward_p90_s'] * 1e3:.0f} ms) plus the prediction, paid before the request "
              "can be ranked; prompt length: the prediction alone. Checks: replaying the head offline "
              f"reproduces the server's logged predictions within {found['replay_gap']:.1e} (relative); the "
              f"proxy's chat template gave the server's prompt token count on "
              f"{found['requests'] - found['token_mismatch']} of {found['requests']} requests.", ""]
    lines += ["## The head's ridge prior, chosen on the `train` evals", "",
              "LEAP's ridge prior (the RLS head's `P` starts at `I / ridge`; `policy.ridge` null takes "
              "`RIDGE_BY_FEATURES` in `policies/scheduling/leap.py`) is chosen per feature set by replaying "
              "the head online over the `train` requests alone (same order, predict before learning) and "
              "taking the highest Spearman there; a tie within 0.005 goes to the weaker prior (smaller "
              "ridge). The `eval` requests above never enter it; `--check-defaults` fails when the shipped "
              "value is not the chosen one.", "",
              "| features | " + " | ".join(f"ridge {ridge:g}" for ridge, _ in found["ridge_sweep"]["model"])
              + " | chosen | shipped |",
              "|---|" + "---|" * (len(found["ridge_sweep"]["model"]) + 2)]
    for features, sweep in found["ridge_sweep"].items():
        lines.append(f"| {features} | " + " | ".join(f"{value:.3f}" for _, value in sweep)
                     + f" | {found['ridge_chosen'][features]:g} | {RIDGE_BY_FEATURES[features]:g} |")
    lines.append("")
    lines += sim_section(models, table)
    return "\n".join(lines)


if __name__ == "__main__":
    main()
