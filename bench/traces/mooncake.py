"""Mooncake FAST'25 traces (kvcache-ai/Mooncake, ``FAST25-release/traces``).

JSONL, one request per line: ``timestamp`` (ms from trace start), ``input_length``,
``output_length`` and ``hash_ids``: prefix-chained ids of 512-token blocks,
``len(hash_ids) == ceil(input_length / 512)`` (the last block may be partial).
Arrivals are open-loop; there are no session ids.
"""

from __future__ import annotations

import json
import lzma
from array import array
from pathlib import Path

from bench.traces.trace import Trace, TraceRequest

#: Tokens per ``hash_ids`` block in the Mooncake traces.
MOONCAKE_BLOCK_SIZE = 512


def _open(path: Path):
    return lzma.open(path, "rt") if path.suffix == ".xz" else path.open("r")


def load_mooncake(path: Path, name: str = "mooncake", block_size: int = MOONCAKE_BLOCK_SIZE) -> Trace:
    """Read a Mooncake JSONL trace (optionally ``.xz``) into a ``Trace``."""
    requests: list[TraceRequest] = []
    max_id = -1
    with _open(path) as f:
        for lineno, line in enumerate(f):
            if not line.strip():
                continue
            row = json.loads(line)
            blocks = array("q", row.get("hash_ids") or ())
            if blocks:
                max_id = max(max_id, max(blocks))
            requests.append(TraceRequest(
                rid=f"{name}-{lineno}",
                arrival_s=float(row["timestamp"]) / 1000.0,
                input_tokens=int(row["input_length"]),
                output_tokens=max(1, int(row["output_length"])),
                block_ids=blocks if blocks else None,
            ))
    # NOTE: stable sort: rows with equal timestamps keep their file order.
    requests.sort(key=lambda r: r.arrival_s)
    return Trace(name=name, requests=tuple(requests), block_size=block_size,
                 block_id_span=max_id + 1, source=str(path))
