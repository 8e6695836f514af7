"""Claude Code agent sessions from callanjfox/kv-cache-tester (``traces/``).

One JSON object per session (``trace_NNNN.json``, stored here as ``.json.xz``):
``block_size`` (64), ``hash_id_scope`` ("local": ids are private to the session,
sub-agents share the parent's), and ``requests``. A request has ``t`` (s from
session start), ``in``/``out`` tokens, ``hash_ids`` (prefix-chained ids of the
prompt's full 64-token blocks; the tail past the last full block is not
hashed), ``api_time`` (server time) and ``think_time`` (client delay before it).
A ``subagent`` entry starts at parent time ``t`` and nests its own requests,
whose ``t`` is relative to the sub-agent's start.

The sessions carry no absolute times, so replay is closed-loop: a session's
first request arrives at a synthesized session start (a seeded Poisson
process of ``session_rate`` sessions/s); every later turn is sent its
``think_time`` after the previous turn of the same agent completed. A
sub-agent starts after the parent turn preceding it completed, plus the gap
the recording shows between that turn's end (``t + api_time``) and the
sub-agent's ``t``; its requests then follow each other closed-loop. The
parent does not wait for its sub-agents (the recordings show it continuing).
"""

from __future__ import annotations

import hashlib
import json
import lzma
from array import array
from pathlib import Path
from typing import Any

import numpy as np

from bench.traces.trace import Trace, TraceRequest

#: File name pattern of one session.
SESSION_GLOB = "trace_*.json*"


def session_files(folder: Path) -> list[Path]:
    """Session files under ``folder`` (or its ``traces/``), in name order."""
    base = folder / "traces" if (folder / "traces").is_dir() else folder
    files = sorted(base.glob(SESSION_GLOB))
    if not files:
        raise FileNotFoundError(f"no {SESSION_GLOB} files under {base}")
    return files


def split_of(path: Path) -> str:
    """``tuning`` or ``evaluation``: the half a session file belongs to.

    NOTE: by a hash of the file's stem, not its position, so the halves stay
    the same sessions when files are added or a run takes only the first N."""
    stem = path.name.split(".")[0]
    return "tuning" if hashlib.sha256(stem.encode()).digest()[0] % 2 == 0 else "evaluation"


def read_session(path: Path) -> dict[str, Any]:
    """One session's JSON object (``.xz`` or plain)."""
    opener = lzma.open if path.suffix == ".xz" else open
    with opener(path, "rt") as f:
        session: dict[str, Any] = json.load(f)
        return session


def _think(req: dict[str, Any], prev: dict[str, Any] | None) -> float:
    """Recorded think time; when missing, the recorded gap after ``prev`` ended."""
    if req.get("think_time") is not None:
        return max(0.0, float(req["think_time"]))
    if prev is None:
        return 0.0
    return max(0.0, float(req["t"]) - float(prev["t"]) - float(prev.get("api_time") or 0.0))


class _SessionBuilder:
    """Turns one session object into closed-loop ``TraceRequest``s."""

    def __init__(self, sid: str, start_s: float, offset: int, include_subagents: bool) -> None:
        self.sid = sid
        self.start_s = start_s
        self.offset = offset
        self.include_subagents = include_subagents
        self.out: list[TraceRequest] = []
        self.max_local_id = -1

    def blocks(self, req: dict[str, Any]) -> array[int] | None:
        ids = req.get("hash_ids") or ()
        if not ids:
            return None
        local = np.asarray(ids, dtype=np.int64)
        self.max_local_id = max(self.max_local_id, int(local.max()))
        # NOTE: sessions get disjoint id ranges, so chained ids stay chained.
        return array("q", (local + self.offset).tobytes())

    def add(self, rid: str, req: dict[str, Any], session: str, after: str | None,
            delay_s: float) -> str:
        self.out.append(TraceRequest(
            rid=rid, arrival_s=self.start_s + float(req["t"]),
            input_tokens=max(1, int(req["in"])), output_tokens=max(1, int(req["out"])),
            block_ids=self.blocks(req), session_id=session, after=after,
            delay_s=0.0 if after is None else delay_s,
        ))
        return rid

    def build(self, session: dict[str, Any]) -> list[TraceRequest]:
        prev_rid: str | None = None
        prev: dict[str, Any] | None = None
        for i, entry in enumerate(session["requests"]):
            if entry.get("type") == "subagent":
                if self.include_subagents:
                    self.subagent(i, entry, prev_rid, prev)
                continue
            prev_rid = self.add(f"{self.sid}-{i}", entry, self.sid, prev_rid, _think(entry, prev))
            prev = entry
        return self.out

    def subagent(self, i: int, entry: dict[str, Any], parent_rid: str | None,
                 parent: dict[str, Any] | None) -> None:
        agent = f"{self.sid}/{entry.get('agent_id', i)}"
        if parent is None:
            launch = float(entry["t"])  # NOTE: no parent turn yet: starts with the session
        else:
            ended = float(parent["t"]) + float(parent.get("api_time") or 0.0)
            launch = max(0.0, float(entry["t"]) - ended)
        prev_rid, prev = parent_rid, None
        for j, req in enumerate(entry.get("requests", ())):
            if req.get("type") == "subagent":
                continue  # NOTE: none nest deeper in the corpus
            delay = _think(req, prev) + (launch if j == 0 else 0.0)
            shifted = dict(req, t=float(entry["t"]) + float(req["t"]))
            prev_rid = self.add(f"{agent}-{j}", shifted, agent, prev_rid, delay)
            prev = req


def load_claude_code(folder: Path, name: str = "claude_code", session_rate: float = 0.05,
                     max_sessions: int | None = None, include_subagents: bool = True,
                     seed: int = 0, split: str = "all") -> Trace:
    """Read kv-cache-tester sessions into a closed-loop ``Trace``.

    Session ``k`` (in file-name order, within ``split``: ``all``, ``tuning`` or
    ``evaluation``, ``split_of``) starts at the ``k``-th arrival of a Poisson
    process with ``session_rate`` sessions/s (seeded by ``seed``).
    """
    if session_rate <= 0:
        raise ValueError(f"session_rate must be > 0, got {session_rate}")
    if split not in ("all", "tuning", "evaluation"):
        raise ValueError(f"split must be all, tuning or evaluation, got {split!r}")
    files = session_files(folder)
    if split != "all":
        files = [f for f in files if split_of(f) == split]
    if max_sessions is not None:
        files = files[:max_sessions]
    rng = np.random.default_rng(seed)
    starts = np.cumsum(rng.exponential(1.0 / session_rate, size=len(files)))
    starts -= starts[0]
    requests: list[TraceRequest] = []
    offset, block_size = 0, 0
    for path, start in zip(files, starts):
        session = read_session(path)
        block_size = block_size or int(session.get("block_size", 64))
        if int(session.get("block_size", block_size)) != block_size:
            raise ValueError(f"{path}: block_size differs from the other sessions")
        sid = f"{name}-{session.get('id', path.stem.split('.')[0])}"
        builder = _SessionBuilder(sid, float(start), offset, include_subagents)
        requests.extend(builder.build(session))
        offset += builder.max_local_id + 1
    roots = sorted((r for r in requests if r.after is None), key=lambda r: r.arrival_s)
    rest = [r for r in requests if r.after is not None]
    return Trace(
        name=name, requests=tuple(roots + rest), block_size=block_size, block_id_span=offset,
        session_scoped_blocks=True, source=str(folder),
        notes=(f"{len(files)} sessions, starts synthesized at {session_rate} sessions/s "
               f"(seed {seed}), turns closed-loop",),
    )
