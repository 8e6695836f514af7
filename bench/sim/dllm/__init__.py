"""The dLLM simulator: SGLang 0.5.23's diffusion-LM block rounds (FDFO), driven
by the same pure policies as the server (``sim.dllm.enabled=true``).

===================== ========================================================
module                mirrors / holds
===================== ========================================================
``request``           one request: block plan (docs/dwise-notes.md §3.1), the
                      hidden truth, the host-visible counters (``DllmView``)
``blocks``            rounds per generation block: ``tiny_live`` (measured),
                      ``confidence`` and ``table`` (assumptions)
``cost``              seconds per round: ``cpu_tiny`` (measured), ``roofline``
                      (assumed GPU)
``engine``            ``get_new_batch_dllm`` + one forward per round: SGLang's
                      own scheduling, or a diffusion policy's order and walk
``oracle``            BENCH-ONLY: DWISE's order with the true remaining rounds
``build``             bench settings -> a run -> ``RequestRecord`` s
===================== ========================================================

Simplifications (stated, not modelled): no prefix cache (every prompt block
is prefilled), no KV or context limit, no EOS before the trace's output
length (a request stops exactly there), no hidden-state features
(``RequestView.features`` is ``None``), no prompt text (``prompt_words`` and
``prompt_lines`` are 0).
"""

from __future__ import annotations

from bench.sim.dllm.blocks import Confidence, RoundsModel, Table, TinyLive
from bench.sim.dllm.build import records_of, simulate
from bench.sim.dllm.cost import LinearRoundCost, RooflineRoundCost, RoundCost
from bench.sim.dllm.engine import DllmParams, DllmSimulator
from bench.sim.dllm.oracle import OracleDwise
from bench.sim.dllm.request import DllmRequest, block_plan, tiny_live_rounds

__all__ = ["Confidence", "DllmParams", "DllmRequest", "DllmSimulator", "LinearRoundCost", "OracleDwise",
           "RooflineRoundCost", "RoundCost", "RoundsModel", "Table", "TinyLive", "block_plan", "records_of",
           "simulate", "tiny_live_rounds"]
