"""A user's own trace in the minimal documented form (``format: simple``).

One request per JSONL line (or CSV row, with a header), in any order:

=================== ========== ==================================================
field               required   meaning
=================== ========== ==================================================
``arrival_s``       yes        seconds from the trace's start (open-loop arrival)
``input_tokens``    yes        prompt tokens
``output_tokens``   yes        tokens to generate (at least 1)
``session_id``      no         conversation or agent session
``prefix_hashes``   no         one id per ``trace.simple.block_size`` prompt tokens,
                               prefix-chained: equal ids mean equal prompts up to
                               and including that block (a JSON list, or ids
                               separated by spaces in CSV); ints or strings
=================== ========== ==================================================

Example (JSONL)::

    {"arrival_s": 0.0, "input_tokens": 900, "output_tokens": 120, "session_id": "a", "prefix_hashes": [7, 8]}
    {"arrival_s": 0.4, "input_tokens": 300, "output_tokens": 40}

A row that breaks the form is an error naming the file, the line and the field.
"""

from __future__ import annotations

import csv
import json
import math
from array import array
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from bench.traces.trace import Trace, TraceRequest

REQUIRED = ("arrival_s", "input_tokens", "output_tokens")


def _rows(path: Path) -> Iterator[tuple[int, Mapping[str, Any]]]:
    """``(line number, row)`` of a ``.csv`` (header first) or JSONL file."""
    with path.open(newline="") as f:
        if path.suffix.lower() == ".csv":
            for i, row in enumerate(csv.DictReader(f), start=2):
                yield i, {k.strip(): v.strip() for k, v in row.items() if k and v is not None and v.strip()}
            return
        for i, line in enumerate(f, start=1):
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{i}: not a JSON object ({e.msg})") from None
                if not isinstance(row, dict):
                    raise ValueError(f"{path}:{i}: not a JSON object")
                yield i, row


def _number(path: Path, line: int, row: Mapping[str, Any], key: str, kind: type) -> Any:
    if key not in row:
        raise ValueError(f"{path}:{line}: missing {key!r} (required: {', '.join(REQUIRED)})")
    try:
        value = kind(row[key]) if kind is float else int(float(row[key]))
    except (TypeError, ValueError):
        raise ValueError(f"{path}:{line}: {key}={row[key]!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{path}:{line}: {key}={row[key]!r} must be a finite number >= 0")
    return value


def load_simple(path: Path, name: str, block_size: int) -> Trace:
    """Read ``path`` (module docs) into a ``Trace``; ``block_size`` tokens per prefix hash."""
    requests: list[TraceRequest] = []
    ids: dict[str, int] = {}  # NOTE: hashes -> dense block ids, first seen first; chaining is kept
    for line, row in _rows(path):
        arrival = _number(path, line, row, "arrival_s", float)
        prompt = _number(path, line, row, "input_tokens", int)
        output = _number(path, line, row, "output_tokens", int)
        if prompt < 1 or output < 1:
            raise ValueError(f"{path}:{line}: input_tokens and output_tokens must be >= 1")
        hashes = row.get("prefix_hashes")
        blocks = None
        if hashes not in (None, "", []):
            if block_size <= 0:
                raise ValueError(f"{path}:{line}: the rows carry prefix_hashes: set trace.simple.block_size "
                                 "to the prompt tokens each one covers")
            values = hashes.split() if isinstance(hashes, str) else hashes
            if not isinstance(values, list):
                raise ValueError(f"{path}:{line}: prefix_hashes must be a list (JSON) or ids separated by spaces")
            if len(values) > math.ceil(prompt / block_size):
                raise ValueError(f"{path}:{line}: {len(values)} prefix_hashes cover more than the "
                                 f"{prompt}-token prompt at {block_size} tokens each")
            blocks = array("q", (ids.setdefault(str(h), len(ids)) for h in values))
        session = row.get("session_id")
        requests.append(TraceRequest(
            rid=f"{name}-{line}", arrival_s=arrival, input_tokens=prompt, output_tokens=output,
            block_ids=blocks, session_id=None if session in (None, "") else str(session)))
    if not requests:
        raise ValueError(f"{path}: no requests")
    # NOTE: stable sort: rows with equal arrival times keep their file order
    requests.sort(key=lambda r: r.arrival_s)
    return Trace(name=name, requests=tuple(requests), block_size=block_size if ids else 0,
                 block_id_span=len(ids), source=str(path))
