"""Mooncake FAST'25 traces (kvcache-ai/Mooncake, ``FAST25-release/traces``).

JSONL, one request per line: ``timestamp`` (ms from trace start), ``input_length``,
``output_length`` and ``hash_ids``: prefix-chained ids of 512-token blocks,
``len(hash_ids) == ceil(input_length / 512)`` (the last block may be partial).
Arrivals are open-loop; there are no session ids.

With ``sessions=True`` conversations are *derived*: a request continues the
conversation of the earlier request it shares the longest hash-id prefix with,
if that prefix is at least ``SESSION_MIN_BLOCKS`` blocks (block 0 is the system
prompt every request shares, so one block is not enough). On the conversation
trace this gives 7,373 conversations, 57% of requests in multi-turn ones. A
later turn is then replayed closed-loop: sent ``delay_s`` after the previous
turn of its conversation completed, where ``delay_s`` is the recorded
inter-arrival gap (median ~123 s).
NOTE: that gap also held the previous turn's service time in the recorded
system, so closed-loop turns come slightly later than a real user would send
them; the first turn keeps its recorded open-loop time.
"""

from __future__ import annotations

import json
import lzma
from array import array
from dataclasses import replace
from pathlib import Path
from typing import TextIO

from bench.traces.trace import Trace, TraceRequest

#: Tokens per ``hash_ids`` block in the Mooncake traces.
MOONCAKE_BLOCK_SIZE = 512
#: Shared leading blocks that make a request a later turn of a conversation.
SESSION_MIN_BLOCKS = 2


def _open(path: Path) -> TextIO:
    return lzma.open(path, "rt") if path.suffix == ".xz" else path.open("r")


def load_mooncake(path: Path, name: str = "mooncake", block_size: int = MOONCAKE_BLOCK_SIZE,
                  sessions: bool = False) -> Trace:
    """Read a Mooncake JSONL trace (optionally ``.xz``) into a ``Trace``
    (with ``sessions``: derived conversations, later turns closed-loop)."""
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
    if sessions:
        requests = derive_sessions(requests)
    return Trace(name=name, requests=tuple(requests), block_size=block_size,
                 block_id_span=max_id + 1, source=str(path))


def derive_sessions(requests: list[TraceRequest]) -> list[TraceRequest]:
    """Link each request to the conversation it continues (see module docs)."""
    # NOTE: hash ids are prefix-chained (an id names its whole prefix), so the
    # last shared id of at least SESSION_MIN_BLOCKS blocks identifies the shared prefix.
    owner: dict[int, str] = {}          # block id -> conversation id
    last: dict[str, TraceRequest] = {}  # conversation id -> its latest turn
    out: list[TraceRequest] = []
    for r in requests:
        blocks = list(r.block_ids or ())[SESSION_MIN_BLOCKS - 1:]
        conv = next((owner[b] for b in reversed(blocks) if b in owner), None)
        if conv is None:
            conv, linked = r.rid, replace(r, session_id=r.rid)
        else:
            prev = last[conv]
            linked = replace(r, session_id=conv, after=prev.rid,
                             delay_s=max(0.0, r.arrival_s - prev.arrival_s))
        last[conv] = linked
        for b in blocks:
            owner[b] = conv
        out.append(linked)
    # NOTE: roots first (sorted by time), then followers, as Trace expects
    return [r for r in out if r.after is None] + [r for r in out if r.after is not None]
