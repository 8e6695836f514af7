"""How often the CPU server's greedy chat turns equal HF transformers', per dtype.

    python -m bench.scripts.hf_agreement [--dtypes float32 bfloat16] [--out results/hf_agreement]

Starts ``python -m server model.dtype=<dtype>`` for each dtype, runs the 12
turns of ``bench.live.chat.CONVERSATIONS`` through the openai client, decodes
the same histories greedily with HF transformers in the same dtype, prints a
table and writes ``agreement.json``. float32 is asserted equal by the test
suite; bfloat16 is only reported (the engines' kernel orders flip near-ties).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from bench.live.chat import HFReference, agreement, run_conversations
from bench.live.server import ServerProcess
from bench.scripts.common import model_source
from compose.config import compose
from compose.model import ensure_default_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--out", type=Path, default=Path("results/hf_agreement"))
    args = ap.parse_args()
    cfg = compose([])
    checkpoint = ensure_default_model(model_source(cfg))
    rows = {}
    for dtype in args.dtypes:
        with tempfile.TemporaryDirectory() as tmp:
            with ServerProcess([f"model.dtype={dtype}"], Path(tmp) / "server.log") as server:
                turns = run_conversations(server.base_url)
        same = agreement(turns, HFReference(checkpoint, dtype))
        rows[dtype] = {"turns": len(same), "equal": sum(same),
                       "differing_turns": [i for i, ok in enumerate(same) if not ok]}
    print(f"{'dtype':<10} {'equal/turns':>12}  differing turns")
    for dtype, row in rows.items():
        print(f"{dtype:<10} {row['equal']:>5}/{row['turns']:<6}  {row['differing_turns']}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "agreement.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
