"""Which dtype the CPU server computes in: float32, float16 and bfloat16 measured -> ``bench/results/cpu_dtype.md``.

    python -m bench.scripts.cpu_dtype

SGLang's ``dtype=auto`` serves a float32 checkpoint (the default model's) in
float16, a GPU practice. On a CPU, 16-bit matmuls are fast only with native
instructions (AVX512-FP16 or AMX for float16, AVX512-BF16 or AMX for bfloat16);
without them torch falls back to slow paths. Two measurements, on this machine:

1. **Matmul throughput**, one thread (as the server runs), at the default
   model's shapes (SmolLM2-135M: hidden 576, MLP 1536, vocabulary 49152) for a
   prefill chunk of 512 tokens and a decode batch of 8: GFLOPS per dtype.
2. **One request end to end** on the CPU server (``python -m server``, the
   default model, ``model.dtype`` set per row, SGLang's defaults otherwise): a
   64-token prompt and 16 greedy output tokens, the prefix cache flushed before
   each, median of 3 after one untimed request: seconds.

What it decided: on CPU ``model.dtype=auto`` keeps a float32 checkpoint in
float32 (``server/sglang/launch/args.py``); an explicit ``model.dtype`` is
SGLang's own.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

from bench.live.server import ServerProcess
from bench.scripts.common import add_output_args, git_commit

DTYPES = ("float32", "float16", "bfloat16")
#: (rows, inner, outer) of the default model's matmuls: a prefill chunk and a decode batch.
SHAPES = {"prefill 512 x 576 x 1536": (512, 576, 1536), "decode 8 x 576 x 1536": (8, 576, 1536),
          "logits 8 x 576 x 49152": (8, 576, 49152)}
PROMPT = "Explain, in two short sentences, why the sky looks blue during the day and red at sunset. " * 3


def gflops(dtype: str, shape: tuple[int, int, int], seconds: float = 1.0) -> float:
    import torch

    torch.set_num_threads(1)
    m, k, n = shape
    a = torch.randn(m, k).to(getattr(torch, dtype))
    b = torch.randn(k, n).to(getattr(torch, dtype))
    a @ b
    runs, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds or runs < 2:
        a @ b
        runs += 1
    return 2 * m * k * n * runs / (time.perf_counter() - t0) / 1e9


def request_seconds(base_url: str, model: str) -> float:
    body = {"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 16,
            "temperature": 0, "ignore_eos": True}
    # NOTE: the prefix cache flushed first: every request computes its prompt (prefill and decode)
    httpx.post(base_url + "/flush_cache", timeout=60).raise_for_status()
    t0 = time.perf_counter()
    httpx.post(base_url + "/v1/chat/completions", json=body, timeout=3600).raise_for_status()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_output_args(parser, "cpu_dtype", "cpu_dtype")
    args = parser.parse_args()
    import torch

    commit, t0 = git_commit(), time.monotonic()
    capability = torch.backends.cpu.get_cpu_capability()
    flags = sorted({f for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")
                    for f in line.split(":", 1)[1].split() if f.startswith(("avx512", "amx"))})
    matmul = {name: {d: gflops(d, shape) for d in DTYPES} for name, shape in SHAPES.items()}
    live: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in DTYPES:
            with ServerProcess([f"model.dtype={dtype}", "sglang.sleep_on_idle=true"], Path(tmp) / f"{dtype}.log") \
                    as server:
                model = httpx.get(server.base_url + "/v1/models", timeout=60).json()["data"][0]["id"]
                request_seconds(server.base_url, model)
                live[dtype] = statistics.median(request_seconds(server.base_url, model) for _ in range(3))
                print(f"{dtype}: {live[dtype]:.2f} s", flush=True)
    lines = ["# The CPU server's dtype", "",
             f"Built by `python -m bench.scripts.cpu_dtype` at commit {commit}, {datetime.now(UTC):%Y-%m-%d}. "
             f"Method: the script's docstring. This machine: torch CPU capability `{capability}`, "
             f"AVX-512/AMX flags: {', '.join(f'`{f}`' for f in flags) or 'none'}.", "",
             "## Matmul throughput, one thread (GFLOPS)", "",
             "| shape | " + " | ".join(DTYPES) + " |", "|---|" + "---:|" * len(DTYPES)]
    lines += [f"| {name} | " + " | ".join(f"{row[d]:.1f}" for d in DTYPES) + " |" for name, row in matmul.items()]
    lines += ["", "## One request on the CPU server (seconds; 64-token prompt computed, 16 output tokens)", "",
              "| `model.dtype` | seconds | x float32 |", "|---|---:|---:|"]
    lines += [f"| `{d}` | {live[d]:.2f} | {live[d] / live['float32']:.1f}x |" for d in DTYPES]
    lines += ["", f"SGLang's `auto` on the default (float32) checkpoint is `float16`. Wall time "
              f"{(time.monotonic() - t0) / 60:.0f} min.", ""]
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
