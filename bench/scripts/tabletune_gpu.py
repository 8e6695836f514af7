"""TableTune's step-time table on a GPU: one short device check (prepared; not run yet).

    python -m bench.scripts.tabletune_gpu --out $OUT/tabletune_gpu.json    # on a lent GPU, ~6 min

What it measures: the wall time of a decode step of ``b`` requests drafting
``k`` tokens each (SGLang's NGRAM verify through Switchboard's per-step
worker, ``+speculative=static``), for ``b`` in ``BATCHES`` and ``k`` in
``LENGTHS``, on a model of Llama-3.1-8B's shape with random weights
(``sglang.load_format=dummy``: nothing is downloaded; the config is written
here, the tokenizer is the default model's). Random weights make acceptance
meaningless, so only step times come back; acceptance stays simulated
(``bench/results/speculative_sim.md``). The JSON it writes is a
``speculative.table_path`` table (``StepTimeTable``) plus the device's name.

Every request generates ``TOKENS`` tokens (``ignore_eos``) from ``b``
concurrent clients; a step counts when exactly ``b`` requests were in it.

NOTE: what this run will show first is whether the per-step draft length
works with CUDA graphs (SGLang captures verify graphs at the full width;
``speculative.max_draft_tokens`` is set to the longest length here, so a
narrower step either replays a padded graph or runs eagerly): the script
records the failure's log tail rather than a table if the server does not
come up or a step fails.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from bench.live.server import ServerProcess, ServerStartError

BATCHES = (1, 8, 64)
LENGTHS = (0, 2, 4)
TOKENS = 64

#: Llama-3.1-8B's architecture (its public config.json, weights not needed).
LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 128, "vocab_size": 128256, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0, "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "bos_token_id": 1, "eos_token_id": 2,
}


def model_dir(root: Path) -> Path:
    """Llama-3.1-8B's config with the default model's tokenizer (ids fit its vocabulary)."""
    from bench.scripts.common import model_source
    from compose.config import compose
    from compose.model import ensure_default_model

    tokenizer = ensure_default_model(model_source(compose([])))
    out = root / "llama-8b-shape"
    out.mkdir()
    (out / "config.json").write_text(json.dumps(LLAMA_8B))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (out / name).write_bytes((tokenizer / name).read_bytes())
    return out


def drive(base_url: str, b: int) -> None:
    def one(i: int) -> None:
        httpx.post(base_url + "/generate", timeout=600, json={
            "text": f"Request {i}: write a long story about the sea.",
            "sampling_params": {"temperature": 0, "max_new_tokens": TOKENS, "ignore_eos": True}}).raise_for_status()

    with ThreadPoolExecutor(b) as pool:
        list(pool.map(one, range(b)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import torch

    result: dict[str, object] = {"device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
                                 "model": "Llama-3.1-8B shape, dummy weights", "algorithm": "NGRAM", "rows": []}
    rows: list[list[float]] = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path = model_dir(root)
        for k in LENGTHS:
            log = root / f"steps-{k}.jsonl"
            server = ServerProcess([f"model.path={path}", "sglang.load_format=dummy", "+speculative=static",
                                    f"speculative.draft_tokens={k}", f"speculative.max_draft_tokens={max(LENGTHS)}",
                                    f"speculative.step_log={log}"], root / f"server-{k}.log")
            try:
                server.start(timeout=300)
            except ServerStartError as exc:
                result["error"] = f"k={k}: {exc}"[-6000:]
                break
            try:
                drive(server.base_url, 1)  # warm-up
                for b in BATCHES:
                    before = len(log.read_text().splitlines())
                    drive(server.base_url, b)
                    steps = [json.loads(x) for x in log.read_text().splitlines()[before:]]
                    times = [s["step_time_s"] for s in steps if len(s["rids"]) == b]
                    if times:
                        rows.append([b, k, statistics.median(times)])
                    print(f"k={k} b={b}: {len(times)} steps, median {1e3 * statistics.median(times or [0]):.2f} ms "
                          f"({time.monotonic() - t0:.0f} s)", flush=True)
            except Exception as exc:  # NOTE: a device run reports what failed instead of dying silently
                result["error"] = f"k={k}: {exc!r}\n{server.log_tail(80)}"[-6000:]
                break
            finally:
                server.stop()
    result["rows"] = rows
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out} ({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main()
