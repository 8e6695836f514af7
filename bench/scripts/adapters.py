"""Scute's decode cost, live: a batch mixing five adapter types vs as many LoRA adapters vs none.

    python -m bench.scripts.adapters                 # ~10 min (2 cores); writes bench/results/adapters.md
    python -m bench.scripts.adapters --rounds 1 --tokens 8 --out /tmp/adapters.md   # a quick look

Servers (CPU, ``model.dtype=float32``, one thread), each started once, with
rounds alternating between them (A, B, C, D, A, ...) so drift on the shared
machine hits each alike:

* ``base``: no adapters; every request uses the base model;
* ``sglang lora``: ``+adapters=lora`` (SGLang's own torch-native LoRA backend),
  five LoRA adapters;
* ``scute lora``: ``+adapters=scute``, the same five LoRA adapters;
* ``scute mixed``: ``+adapters=scute``, five adapters: LoRA, DoRA, VeRA (each
  rank 8), OFT (blocks of 32) and IA3.

Every adapter targets ``q_proj`` and ``v_proj`` (made with PEFT from the
default model, random non-neutral values: ``bench.live.peft_adapters``). One
round sends ``--requests`` concurrent requests (adapters round-robin) with the
same prompt shape and ``--tokens`` greedy tokens each (``ignore_eos``). The
decode figure is SGLang's own (``/v1/loads`` decode-step counters, read before
and after the round): decoded tokens per second of decode-step time, and the
mean step time. Ratios are per round, in one run; the table reports the median
and the spread. The GPU figure (``kernels/scute/gpu_bench.py``) is added when a
GPU is lent.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import statistics
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx
from peft import IA3Config, LoraConfig, OFTConfig, VeraConfig

from bench.live import peft_adapters as pa
from bench.live.loads import read_counters
from bench.live.server import ServerProcess
from bench.scripts.common import add_output_args, git_commit, model_source
from bench.scripts.validate_sim import _machine

TARGETS = ["q_proj", "v_proj"]
MIXED: dict[str, Any] = {
    "lora": LoraConfig(r=8, lora_alpha=16, target_modules=TARGETS, init_lora_weights=False),
    "dora": LoraConfig(r=8, lora_alpha=16, target_modules=TARGETS, use_dora=True, init_lora_weights=False),
    "vera": VeraConfig(r=8, target_modules=TARGETS, init_weights=False),
    "oft": OFTConfig(r=0, oft_block_size=32, target_modules=TARGETS, init_weights=False),
    "ia3": IA3Config(target_modules=TARGETS, feedforward_modules=[], init_ia3_weights=False),
}
LORAS = {f"lora{i}": LoraConfig(r=8, lora_alpha=16, target_modules=TARGETS, init_lora_weights=False)
         for i in range(len(MIXED))}
COMMON = ("model.dtype=float32", "sglang.sleep_on_idle=true", "sglang.max_running_requests=32")


def servers(folder: Path) -> dict[str, tuple[tuple[str, ...], list[str | None]]]:
    """name -> (overrides, the adapter each request names in turn)."""
    def paths(names: Iterable[str]) -> str:
        return "adapters.paths={" + ",".join(f"{n}:'{folder / n}'" for n in names) + "}"

    n = len(MIXED)
    return {
        "base": (COMMON, [None]),
        "sglang lora": (COMMON + ("+adapters=lora", paths(LORAS), f"adapters.max_per_batch={n + 1}"), list(LORAS)),
        "scute lora": (COMMON + ("+adapters=scute", paths(LORAS), f"adapters.max_per_batch={n + 1}"), list(LORAS)),
        "scute mixed": (COMMON + ("+adapters=scute", paths(MIXED), f"adapters.max_per_batch={n + 1}"), list(MIXED)),
    }


def one_round(url: str, adapters: list[str | None], requests: int, tokens: int) -> dict[str, float]:
    prompt = list(range(1000, 1032))  # NOTE: 32 tokens; the cache is flushed first

    def send(i: int) -> int:
        body: dict[str, Any] = {"input_ids": prompt + [2000 + i], "sampling_params": {
            "temperature": 0, "max_new_tokens": tokens, "ignore_eos": True}}
        if adapters[i % len(adapters)] is not None:
            body["lora_path"] = adapters[i % len(adapters)]
        r = httpx.post(url + "/generate", json=body, timeout=3600)
        r.raise_for_status()
        return len(r.json()["output_ids"])

    httpx.post(url + "/flush_cache", timeout=60)
    before = read_counters(url)
    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(requests) as pool:
        out = sum(pool.map(send, range(requests)))
    wall = time.perf_counter() - t0
    after = read_counters(url)
    if before is None or after is None:
        raise SystemExit(f"{url} publishes no /v1/loads counters")
    d = after.minus(before)
    return {"decode_tps": d.decode_batch_sum / d.decode_time_s, "step_ms": 1e3 * d.decode_time_s / d.decode_steps,
            "mean_batch": d.decode_batch_sum / d.decode_steps, "wall_s": wall, "tokens": out}


def render(runs: dict[str, list[dict[str, float]]], args: argparse.Namespace, wall_s: float) -> str:
    lines = ["# Scute: decode cost of mixed adapter types (CPU server)", "",
             f"Produced by `python -m bench.scripts.adapters --rounds {args.rounds} --requests {args.requests} "
             f"--tokens {args.tokens}` at commit {git_commit()} on {_machine()}, {wall_s / 60:.0f} min wall. "
             "Servers and method: the script's docstring. Median over alternating rounds; per-round ratios "
             "[min, max]. Decode throughput: decoded tokens per second of SGLang's decode-step time.", "",
             "| server | decode tok/s | mean step (ms) | mean batch | vs scute lora | vs base |",
             "|---|---|---|---|---|---|"]
    for name, rounds in runs.items():
        tps = [r["decode_tps"] for r in rounds]
        cells = [f"{statistics.median(tps):.1f}", f"{statistics.median(r['step_ms'] for r in rounds):.1f}",
                 f"{statistics.median(r['mean_batch'] for r in rounds):.1f}"]
        for ref in ("scute lora", "base"):
            ratios = [a["decode_tps"] / b["decode_tps"] for a, b in zip(rounds, runs[ref], strict=True)]
            cells.append(f"{statistics.median(ratios):.3f}x [{min(ratios):.3f}, {max(ratios):.3f}]")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    mixed = statistics.median(a["decode_tps"] / b["decode_tps"]
                              for a, b in zip(runs["scute mixed"], runs["scute lora"], strict=True))
    lines += ["", f"Mixed batch decode time vs the same number of LoRA adapters (both Scute): "
                  f"{(1 / mixed - 1) * 100:+.1f}% (the technique's report: +5% to +17% on GPU).",
              "GPU: not measured in this run (no GPU lent); `kernels/scute/gpu_bench.py` measures it."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=64)
    add_output_args(ap, "adapters", "adapters")
    args = ap.parse_args()
    git_commit()
    t0 = time.perf_counter()
    args.results.mkdir(parents=True, exist_ok=True)
    from compose.config import compose
    from compose.model import ensure_default_model

    checkpoint = ensure_default_model(model_source(compose([])))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for i, (name, cfg) in enumerate({**MIXED, **LORAS}.items()):
            pa.make(checkpoint, name, cfg, folder, seed=i + 1)
        plan = servers(folder)
        started = {name: ServerProcess(list(o), args.results / f"{name.replace(' ', '_')}.log").start()
                   for name, (o, _) in plan.items()}
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in plan}
        try:
            for k in range(args.rounds):
                for name, server in started.items():
                    runs[name].append(one_round(server.base_url, plan[name][1], args.requests, args.tokens))
                    print(k, name, json.dumps(runs[name][-1]), flush=True)
        finally:
            for server in started.values():
                server.stop()
    table = render(runs, args, time.perf_counter() - t0)
    (args.results / "adapters.json").write_text(json.dumps(runs, indent=1))
    args.out.write_text(table)
    print(table)


if __name__ == "__main__":
    main()
