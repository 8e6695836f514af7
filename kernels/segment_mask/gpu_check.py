"""Segment-masked attention on a GPU: FlashInfer vs the torch reference, then timed.

    python -m kernels.segment_mask.gpu_check [--dtypes float16,bfloat16] [--out results/segment_mask_gpu.json]
    python -m kernels.segment_mask.gpu_check --cpu-smoke     # torch twins only, tiny shapes, CPU

One packed sequence (default: a 2048-token context, 32 questions of 16..32
tokens, 32 query / 8 kv heads, dim 128; random q/k/v, rope being the model's
business). Checked first, each against the float32 torch reference on the same
inputs (tolerance per dtype, ``TOL``): the packed pass, the packed pass over a
cached context (queries: the questions only), the single-request call (first
dtype only); and the packed outputs against the separate passes'. Then timed
(CUDA events, median of ``--iters`` after warm-up; ``plan`` excluded, it runs
once per batch, not per layer):

==================  ===========================================================
packed              one request, all ``n`` tokens, the segment mask (Flide)
packed_cached       the questions only over ``n`` keys (the context cached)
separate            one causal request per question, ``C + q_s`` tokens each
separate_cached     one causal request per question, its ``q_s`` queries over
                    ``C + q_s`` keys (a prefix cache's best case)
causal_floor        one causal request over the same ``n`` tokens (the cost floor)
==================  ===========================================================

All run FlashInfer's ragged prefill on ``--backend`` (default fa2: the custom
mask's kernels, so the rows differ only in the mask). FlashInfer has no float32
kernels: float32 is checked only in ``--cpu-smoke``. The first call per dtype
JIT-compiles FlashInfer's kernels (minutes; ``--dtypes float16`` halves it).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from kernels.segment_mask.reference import (
    masked_attention,
    packed_segment_ids,
    ragged_masked_attention,
    segment_mask,
)
from kernels.timing import timed

#: Allowed max abs difference to the float32 reference, by input dtype.
TOL = {torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 3e-2}
ROWS = ("packed", "packed_cached", "separate", "separate_cached", "causal_floor")


class TorchRagged:
    """``flashinfer.RaggedPrefill``'s interface on ``reference.ragged_masked_attention`` (the CPU smoke)."""

    def plan(self, qo_lens: Sequence[int], kv_lens: Sequence[int], num_qo_heads: int, num_kv_heads: int,
             head_dim: int, *, masks: Sequence[torch.Tensor] | None = None, scale: float | None = None,
             dtype: torch.dtype = torch.float32) -> None:
        self.args: tuple[Any, ...] = (list(qo_lens), list(kv_lens), masks, scale)

    def run(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        qo_lens, kv_lens, masks, scale = self.args
        return ragged_masked_attention(q, k, v, qo_lens, kv_lens, masks, scale)


def bound(w: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Callable[[], torch.Tensor]:
    """``w.run(q, k, v)`` as a no-argument call (what ``timed`` runs)."""
    def call() -> torch.Tensor:
        out: torch.Tensor = w.run(q, k, v)
        return out
    return call


def log(msg: str, t0: float) -> None:
    print(f"[{time.perf_counter() - t0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def check_dtype(args: argparse.Namespace, dtype: torch.dtype, device: torch.device, make: Callable[[], Any],
                single: Callable[..., torch.Tensor] | None, t0: float) -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    qlens = torch.randint(args.question_min, args.question_max + 1, (args.questions,), generator=g).tolist()
    c, hq, hk, d = args.context, args.heads, args.kv_heads, args.dim
    seg = packed_segment_ids(c, qlens).to(device)
    n = int(seg.shape[0])
    q, k, v = (torch.randn(n, h, d, generator=g).to(device, dtype) for h in (hq, hk, hk))
    tol = TOL[dtype]
    checks: dict[str, float] = {}
    ref_full = masked_attention(q.float(), k.float(), v.float(), segment_mask(seg))
    # the separate requests: context + question s for each non-empty question
    starts = [(c + sum(qlens[:s]), m) for s, m in enumerate(qlens) if m]
    rows = torch.cat([torch.cat((torch.arange(c), torch.arange(a, a + m))) for a, m in starts]).to(device)
    sep_lens = [m for _, m in starts]
    kl = [c + m for m in sep_lens]
    offsets = torch.tensor([0, *kl]).cumsum(0).tolist()
    mine = torch.cat([torch.arange(o + c, o + c + m) for o, m in zip(offsets, sep_lens)]).to(device)  # in `rows`
    q_sep, k_sep, v_sep = q[rows], k[rows], v[rows]
    q_q = q[c:]  # the questions, for the cached variants

    runs: dict[str, tuple[Any, Callable[[], torch.Tensor]]] = {}
    plans = {
        "packed": ([n], [n], [segment_mask(seg)], (q, k, v)),
        "packed_cached": ([n - c], [n], [segment_mask(seg, num_queries=n - c)], (q_q, k, v)),
        "separate": (kl, kl, None, (q_sep, k_sep, v_sep)),
        "separate_cached": (sep_lens, kl, None, (q_q, k_sep, v_sep)),
        "causal_floor": ([n], [n], None, (q, k, v)),
    }
    for name, (qo, kv, masks, (qq, kk, vv)) in plans.items():
        w = make()
        w.plan(qo, kv, hq, hk, d, masks=masks, dtype=dtype)
        runs[name] = (w, bound(w, qq, kk, vv))
    log(f"{dtype}: planned (n={n}); first runs (FlashInfer JIT-compiles on a fresh machine)", t0)

    out = {name: fn() for name, (_, fn) in runs.items()}
    log(f"{dtype}: first runs done", t0)
    checks["packed_vs_reference"] = (out["packed"].float() - ref_full).abs().max().item()
    checks["packed_cached_vs_reference"] = (out["packed_cached"].float() - ref_full[c:]).abs().max().item()
    if single is not None:
        checks["single_vs_reference"] = (single(q, k, v, segment_mask(seg)).float() - ref_full).abs().max().item()
    checks["packed_vs_separate"] = (out["packed"][c:].float() - out["separate"][mine].float()).abs().max().item()
    checks["packed_cached_vs_separate_cached"] = (out["packed_cached"].float()
                                                  - out["separate_cached"].float()).abs().max().item()
    checks["separate_context_vs_reference"] = (out["separate"][:c].float() - ref_full[:c]).abs().max().item()
    cuda = device.type == "cuda"
    times = {name: timed(fn, args.iters, cuda) for name, (_, fn) in runs.items()}
    log(f"{dtype}: timed", t0)
    return {"dtype": str(dtype).removeprefix("torch."), "tolerance": tol, "tokens": n,
            "question_lens": qlens, "checks": checks, "ok": all(x <= tol for x in checks.values()),
            "seconds": times}


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| dtype | check | max abs diff | tolerance | ok |", "|---|---|---|---|---|"]
    for r in results:
        lines += [f"| {r['dtype']} | {k} | {x:.2e} | {r['tolerance']:.0e} | {'yes' if x <= r['tolerance'] else 'NO'} |"
                  for k, x in r["checks"].items()]
    lines += ["", "| dtype | path | median ms | vs packed |", "|---|---|---|---|"]
    for r in results:
        s = r["seconds"]
        lines += [f"| {r['dtype']} | {k} | {s[k] * 1e3:.3f} | {s[k] / s['packed']:.2f}x |" for k in ROWS]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--context", type=int, default=2048)
    ap.add_argument("--questions", type=int, default=32)
    ap.add_argument("--question-min", type=int, default=16)
    ap.add_argument("--question-max", type=int, default=32)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--dtypes", default="float16,bfloat16")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--backend", default="fa2", help="FlashInfer backend of every row")
    ap.add_argument("--cpu-smoke", action="store_true", help="torch twins only, tiny shapes, on CPU")
    ap.add_argument("--out", type=Path, default=None, help="also write the results as JSON")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    if args.cpu_smoke:
        device, dtypes = torch.device("cpu"), [torch.float32]
        args.context, args.questions, args.question_min, args.question_max = 40, 6, 0, 5
        args.heads, args.kv_heads, args.dim, args.iters = 4, 2, 16, 2

        def make() -> Any:
            return TorchRagged()

        single: Callable[..., torch.Tensor] = masked_attention
        name = "cpu (torch twins, --cpu-smoke)"
    else:
        if not torch.cuda.is_available():
            print("no CUDA device: run with --cpu-smoke for the CPU check", file=sys.stderr)
            return 2
        from kernels.segment_mask.flashinfer import RaggedPrefill, single_masked_prefill

        device, dtypes = torch.device("cuda"), [getattr(torch, x) for x in args.dtypes.split(",")]

        def make() -> Any:
            return RaggedPrefill(device, backend=args.backend)

        single, name = single_masked_prefill, torch.cuda.get_device_name()
    # NOTE: the single-request call is checked on the first dtype only (each is one more JIT compile)
    results = [check_dtype(args, dt, device, make, single if i == 0 else None, t0) for i, dt in enumerate(dtypes)]
    report = {"device": name, "backend": "torch" if args.cpu_smoke else args.backend, "context": args.context,
              "questions": args.questions, "heads": args.heads, "kv_heads": args.kv_heads, "dim": args.dim,
              "iters": args.iters, "results": results}
    print(f"device: {name}; context {args.context}, {args.questions} questions, {args.heads}/{args.kv_heads} heads, "
          f"dim {args.dim}\n")
    print(table(results))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
