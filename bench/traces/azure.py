"""Azure LLM inference traces 2023 (Azure/AzurePublicDataset, CC-BY 4.0).

CSV with header ``TIMESTAMP,ContextTokens,GeneratedTokens``: invocation time
(``2023-11-16 18:15:46.6805900``, 100 ns digits), prompt and output tokens.
No session or prefix information: requests never share cached prefixes.
Cite Patel et al., "Splitwise", ISCA 2024.
"""

from __future__ import annotations

import csv
from datetime import datetime
from pathlib import Path

from bench.traces.trace import Trace, TraceRequest

_EPOCH = datetime(1970, 1, 1)


def _seconds(stamp: str) -> float:
    """Seconds since the epoch of a ``YYYY-mm-dd HH:MM:SS.fffffff`` stamp."""
    date, _, frac = stamp.strip().partition(".")
    # NOTE: naive stamps, no time zone: only differences are meaningful.
    whole = (datetime.fromisoformat(date) - _EPOCH).total_seconds()
    return whole + (float("0." + frac) if frac else 0.0)


def load_azure(path: Path, name: str = "azure") -> Trace:
    """Read an Azure 2023 CSV into a ``Trace`` (times relative to the first row)."""
    rows: list[tuple[float, int, int]] = []
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        for row in reader:
            rows.append((_seconds(row["TIMESTAMP"]), int(row["ContextTokens"]),
                         int(row["GeneratedTokens"])))
    if not rows:
        raise ValueError(f"{path}: no requests")
    rows.sort(key=lambda r: r[0])
    t0 = rows[0][0]
    requests = tuple(
        TraceRequest(rid=f"{name}-{i}", arrival_s=t - t0, input_tokens=max(1, n_in),
                     output_tokens=max(1, n_out))
        for i, (t, n_in, n_out) in enumerate(rows)
    )
    skipped = sum(1 for _, n_in, n_out in rows if n_in < 1 or n_out < 1)
    notes = (f"{skipped} rows with 0 tokens were raised to 1",) if skipped else ()
    return Trace(name=name, requests=requests, source=str(path), notes=notes)
