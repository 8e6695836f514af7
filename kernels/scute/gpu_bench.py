"""Scute on a GPU: one decoder layer's adapted projections, a batch mixing five
adapter types vs the same number of LoRA adapters vs the base GEMMs alone.

    python -m kernels.scute.gpu_bench [--rows 64] [--out results/scute_gpu.json]   # < 5 min on one GPU
    TRITON_INTERPRET=1 python -m kernels.scute.gpu_bench --tiny                   # CPU smoke run

The layer is Llama-2-7B's (hidden 4096, MLP 11008; q, k, v, o, gate, up, down
projections, unfused). ``--rows`` decode rows are split into five segments,
one per adapter; every adapter touches every projection. Mixed: LoRA, DoRA,
VeRA (rank 16), OFT (blocks of 32) and IA3 (``ia3_ff`` on ``down``). LoRA-only:
five rank-16 LoRAs. Timed with CUDA events after a warm-up, median of
``--iters``; the output is checked against ``pool_reference`` first.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import torch

from kernels.scute.pool import SlotPool, pool_reference, row_slots
from kernels.scute.samples import random_slots
from kernels.scute.triton import scute_linear_triton
from kernels.timing import timed

#: (name, in, out) of the 7B layer's projections.
LAYER = (("q", 4096, 4096), ("k", 4096, 4096), ("v", 4096, 4096), ("o", 4096, 4096),
         ("gate", 4096, 11008), ("up", 4096, 11008), ("down", 11008, 4096))
TINY = (("q", 64, 64), ("down", 96, 64))
MIXED = ("lora", "dora", "vera", "oft", "ia3")
RANK, BLOCK = 16, 32


def pools(layer: Sequence[tuple[str, int, int]], kinds: Sequence[str], device: str, dtype: torch.dtype,
          g: torch.Generator) -> list[tuple[torch.Tensor, SlotPool]]:
    out = []
    for name, n_in, n_out in layer:
        ks = ["ia3_ff" if (k == "ia3" and name == "down") else k for k in kinds]
        slots = [random_slots(k, n_in, n_out, RANK, BLOCK if n_in % BLOCK == 0 else 1, g, device) for k in ks]
        weight = torch.randn(n_out, n_in, generator=g).to(device) / n_in ** 0.5
        out.append((weight.to(dtype), SlotPool.stack(slots, n_in, n_out, dtype=dtype, device=device)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--tiny", action="store_true", help="small shapes (the CPU smoke run)")
    ap.add_argument("--out", type=Path, default=Path("results/scute_gpu.json"))
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    dtype = getattr(torch, args.dtype) if cuda else torch.float32
    layer = TINY if args.tiny else LAYER
    g = torch.Generator().manual_seed(0)
    seg_lens = [args.rows // 5 + (1 if i < args.rows % 5 else 0) for i in range(5)]
    slots = row_slots(seg_lens, [1, 2, 3, 4, 5], device)
    result = {"device": torch.cuda.get_device_name() if cuda else "cpu", "rows": args.rows, "dtype": str(dtype),
              "layer": [list(p) for p in layer]}
    for label, kinds in (("mixed", MIXED), ("lora", ("lora",) * 5)):
        ps = pools(layer, kinds, device, dtype, g)
        xs = [torch.randn(args.rows, w.shape[1], generator=g).to(device, dtype) for w, _ in ps]
        for (w, p), x in zip(ps, xs, strict=True):  # NOTE: correct before timed
            torch.testing.assert_close(scute_linear_triton(x, w, None, p, slots).float(),
                                       pool_reference(x, w, None, p, slots).float(), rtol=3e-2, atol=3e-2)
        result[f"{label}_s"] = timed(lambda ps=ps, xs=xs: [scute_linear_triton(x, w, None, p, slots)
                                                          for (w, p), x in zip(ps, xs, strict=True)], args.iters, cuda)
        if label == "lora":
            result["base_s"] = timed(lambda ps=ps, xs=xs: [torch.nn.functional.linear(x, w)
                                                          for (w, _), x in zip(ps, xs, strict=True)], args.iters, cuda)
    result["mixed_vs_lora"] = result["mixed_s"] / result["lora_s"]
    result["lora_vs_base"] = result["lora_s"] / result["base_s"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
