"""Trace loaders and transforms: real workload data -> a replayable ``Trace``.

=============== ====================================== =========================
format          data (under the data root)             replay
=============== ====================================== =========================
``mooncake``    ``mooncake/*.jsonl``                   open-loop, 512-tok blocks
``azure``       ``azure_llm_2023/*.csv``               open-loop, no prefixes
``claude_code`` ``kv_cache_tester_cc_traces/traces``   closed-loop sessions
``servegen``    ``servegen/data``                      synthesized, seeded
``simple``      a user's JSONL/CSV (``simple.py``)     open-loop, own blocks
=============== ====================================== =========================
"""

from __future__ import annotations

from pathlib import Path

from bench.schema import SessionSplit, TraceConfig, TraceFormat
from bench.traces.azure import load_azure
from bench.traces.claude_code import load_claude_code
from bench.traces.mooncake import load_mooncake
from bench.traces.paths import resolve_trace_path
from bench.traces.servegen import load_servegen
from bench.traces.simple import load_simple
from bench.traces.trace import Trace, TraceRequest
from bench.traces.transforms import Surge, inject_surges, scale_time, window

__all__ = ["Trace", "TraceRequest", "Surge", "load_trace", "read_trace"]


def read_trace(cfg: TraceConfig, data_root: Path) -> Trace:
    """The loader's trace for ``cfg``, before any transform."""
    path = resolve_trace_path(cfg.path, data_root)
    fmt = TraceFormat(cfg.format)
    if fmt is TraceFormat.mooncake:
        return load_mooncake(path, name=cfg.name, sessions=cfg.mooncake.sessions)
    if fmt is TraceFormat.azure:
        return load_azure(path, name=cfg.name)
    if fmt is TraceFormat.claude_code:
        cc = cfg.claude_code
        return load_claude_code(path, name=cfg.name, session_rate=cc.session_rate,
                                max_sessions=cc.max_sessions, split=SessionSplit(cc.split).value,
                                include_subagents=cc.include_subagents, seed=cfg.seed)
    if fmt is TraceFormat.simple:
        return load_simple(path, name=cfg.name, block_size=cfg.simple.block_size)
    sg = cfg.servegen
    return load_servegen(path, name=cfg.name, category=sg.category, model=sg.model,
                         clients=None if sg.clients is None else list(sg.clients),
                         start_s=sg.start_s, duration_s=sg.duration_s, seed=cfg.seed,
                         rate_scale=sg.rate_scale)


def load_trace(cfg: TraceConfig, data_root: Path) -> Trace:
    """Read the trace, then window, scale and surge it (in that order)."""
    trace = read_trace(cfg, data_root)
    if cfg.window_start_s > 0 or cfg.window_end_s is not None:
        trace = window(trace, cfg.window_start_s, cfg.window_end_s)
    trace = scale_time(trace, cfg.time_scale)
    if cfg.surges:
        surges = [Surge(s.start_s, s.end_s, s.factor) for s in cfg.surges]
        trace = inject_surges(trace, surges, seed=cfg.seed)
    trace.validate()
    return trace
