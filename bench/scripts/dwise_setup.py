"""What ``bench.scripts.dwise`` runs: its workloads, loads, sweeps and one simulated row
(shared with its report, ``bench.scripts.dwise_report``, and ``bench.scripts.dwise_live``).
The protocol is in ``bench.scripts.dwise``'s docs."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import yaml

from bench.config import BenchSettings, compose_bench, resolve_bench
from bench.metrics import Slo, summarize
from bench.run import prepare_trace
from bench.schema import CPU_TINY_BASE_S, CPU_TINY_BLOCK_S
from bench.scripts.leap_curve import spearman
from bench.sim import CostModel, SimSettings
from bench.sim.dllm import DllmSimulator, RooflineRoundCost, simulate, tiny_live_rounds
from bench.traces.paths import REPO_ROOT
from bench.traces.trace import Trace
from policies.feedback import FinishedView
from policies.scheduling import OrderDecision, SchedulingNeeds
from policies.scheduling.dwise import DwisePolicy
from policies.scheduling.rounds import RoundView, denoise_rounds_bound

DWISE_YAML = yaml.safe_load((REPO_ROOT / "conf" / "policy" / "dwise.yaml").read_text())
#: The unit of load (module docs): full rounds of this many blocks; a block's share of one.
LOAD_BLOCKS = 4


def load_block_s(base_s: float, block_s: float) -> float:
    """A block's share of a full round of ``LOAD_BLOCKS`` blocks under ``base_s + block_s x blocks``."""
    return base_s / LOAD_BLOCKS + block_s


LOAD_BLOCK_S = load_block_s(CPU_TINY_BASE_S, CPU_TINY_BLOCK_S)
SHAPE = ("live.output_scale=0.125", "live.max_input_tokens=1024", "live.max_output_tokens=128")
COMMON = ("sim.dllm.enabled=true", "sim.dllm.rounds_per_block=tiny_live", "output.progress=false")
#: The GPU-ish section: bench/sim/cost.py's roofline on the bench defaults (an assumption, docs/dwise.md).
GPU = ("sim.dllm.round_cost=roofline", "accelerator=h100", "model_profile=llama-3.1-8b")
GPU_LOAD = 0.9
#: Context each block is costed at when the GPU section sets its load (a typical shaped prompt).
GPU_CONTEXT = 256
LOADS = (0.7, 0.85, 0.95)
TUNE_LOADS = (0.85, 0.95)
STOCK_SLOTS_SWEEP = (4, 8, 16, 32, 64)
#: DWISE's round shapes swept: (slots, round_blocks), twice as many slots as blocks a round.
SHAPE_SWEEP = ((8, 4), (16, 8), (32, 16), (64, 32))
WAIT_SWEEP = (8, 16, 64, 256, 1024)
PRIOR_SWEEP = (8.0, 32.0, 128.0)
P99_SLACK = 1.25
TIE = 0.01
#: What the tuning split chose for stock (``bench/results/dwise.md``); ``bench.scripts.dwise_live``
#: serves stock with it. NOTE: ``main`` says so when a rerun's tuning disagrees.
BEST_STOCK_SLOTS = 32
#: The client-cap variant: every request sends this max_new_tokens (outputs end at their trace length).
CLIENT_CAP = 128


@dataclass(frozen=True)
class Workload:
    """A trace shaped for the CPU tiny SDAR, with a tuning and a reported window (trace seconds)."""

    name: str
    overrides: tuple[str, ...]
    tuning: tuple[int, int]
    report: tuple[int, int]


WORKLOADS = (
    Workload("Azure conversation", ("trace=azure_conversation", "live.input_scale=0.0625", *SHAPE),
             (900, 1020), (2400, 2520)),
    Workload("Mooncake conversation", ("trace=mooncake_conversation", "live.input_scale=0.03125", *SHAPE),
             (900, 1080), (2400, 2580)),
)


class RecordingDwise:
    """``DwisePolicy`` as is, noting each request's estimate when it is first ranked."""

    def __init__(self, inner: DwisePolicy) -> None:
        self.inner = inner
        self.needs: SchedulingNeeds = inner.needs
        self.arrival: dict[str, tuple[float, float]] = {}
        """rid -> (the regression's total denoising rounds, the capped value DWISE ranks by)."""

    def order_round(self, view: RoundView) -> OrderDecision:
        for r in view.requests:
            if r.rid not in self.arrival:
                est = self.inner.estimate_denoise_rounds(r.request, r.progress)
                capped = max(est, 1.0)
                if self.inner.cap_by_max_new_tokens:
                    capped = min(capped, denoise_rounds_bound(r.request, r.progress))
                self.arrival[r.rid] = (est, capped)
        return self.inner.order_round(view)

    def observe_finished(self, view: FinishedView) -> None:
        self.inner.observe_finished(view)


def settings_of(overrides: list[str]) -> BenchSettings:
    return resolve_bench(compose_bench(overrides))


def shaped(settings: BenchSettings) -> tuple[Trace, CostModel]:
    cost = CostModel(settings.accelerator, settings.model_profile)
    sim_settings = SimSettings.resolve(settings.sim, settings.accelerator, settings.model_profile, cost)
    return prepare_trace(settings, sim_settings)[0], cost


def time_scale(w: Workload, window: tuple[int, int], rho: float, gpu: bool = False,
               block_s: float = LOAD_BLOCK_S) -> float:
    """``trace.time_scale`` that offers ``rho`` of the device's block throughput (module docs;
    ``gpu``: full rounds of ``LOAD_BLOCKS`` blocks on the roofline, each over ``GPU_CONTEXT`` tokens;
    else ``block_s`` seconds per block, a block's share of a full round)."""
    trace, cost = shaped(settings_of(window_overrides(w, window, 1.0, gpu)))
    if gpu:
        block_s = RooflineRoundCost(cost, 4).round_time([GPU_CONTEXT] * LOAD_BLOCKS) / LOAD_BLOCKS
    work = sum(tiny_live_rounds(r.input_tokens, r.output_tokens, 4) for r in trace.requests) * block_s
    return float(f"{work / (rho * (window[1] - window[0])):.4g}")


def window_overrides(w: Workload, window: tuple[int, int], scale: float, gpu: bool = False,
                     cpu_cost: tuple[float, float] = (CPU_TINY_BASE_S, CPU_TINY_BLOCK_S)) -> list[str]:
    """A window's overrides; ``cpu_cost`` = ``cpu_tiny``'s (base_s, block_s) unless ``gpu``."""
    cpu = ("sim.dllm.round_cost=cpu_tiny", f"sim.dllm.round_base_s={cpu_cost[0]:g}",
           f"sim.dllm.round_block_s={cpu_cost[1]:g}")
    return [*w.overrides, f"trace.window_start_s={window[0]}", f"trace.window_end_s={window[1]}",
            f"trace.time_scale={scale:g}", *COMMON, *(GPU if gpu else cpu)]


def row_overrides(base: list[str], row: str, params: dict[str, Any], cap: int | None) -> list[str]:
    """A row's overrides: ``stock`` reads ``params["slots"]`` (its ``max_running_requests``); ``dwise``
    and ``oracle`` pass every entry of ``params`` as ``policy.<key>``."""
    out = list(base) + ([f"sim.dllm.max_new_tokens={cap}"] if cap is not None else [])
    if row == "stock":
        return out + [f"sim.max_running_requests={int(params['slots'])}"]
    out += ["+policy=dwise", *(f"policy.{k}={v:g}" for k, v in params.items())]
    return out + (["sim.dllm.oracle=true"] if row == "oracle" else [])


def run(overrides: list[str]) -> dict[str, Any]:
    """One simulated run; DWISE rows also return their arrival estimates vs the truth."""
    s = settings_of(overrides)
    trace, cost = shaped(s)
    policy = s.build("policy")
    recorder = RecordingDwise(policy) if isinstance(policy, DwisePolicy) and not s.sim.dllm.oracle else None
    t0 = time.perf_counter()
    records, _, meta, sim = simulate(trace, s.sim.dllm, cost, recorder or policy, s.sim.max_running_requests)
    out: dict[str, Any] = {"cmd": "python -m bench " + " ".join(o for o in overrides if o != "output.progress=false"),
                           "summary": summarize(records, Slo(s.metrics.ttft_slo_s, s.metrics.tpot_slo_s)),
                           "rounds": meta["rounds"], "blocks_per_round": meta["mean_blocks_per_round"],
                           "wall_s": time.perf_counter() - t0}
    if recorder is not None:
        out["spearman"] = rank_quality(recorder, sim)
    return out


def rank_quality(recorder: RecordingDwise, sim: DllmSimulator) -> dict[str, float]:
    rids = [rid for rid in recorder.arrival if sim.requests[rid].finished]
    truth = np.array([sim.requests[rid].true_denoise_rounds for rid in rids], dtype=float)
    est = np.array([recorder.arrival[rid] for rid in rids], dtype=float)
    return {"regression": spearman(est[:, 0], truth), "capped": spearman(est[:, 1], truth),
            "requests": float(len(rids))}


def e2e(r: dict[str, Any], key: str) -> float:
    return float(r["summary"]["e2e_s"][key])


PARAMS = ("slots", "round_blocks", "max_wait_rounds", "prior_rounds")
#: DWISE's tuned parameters as conf/policy/dwise.yaml holds them.
CONFIGURED = {k: float(DWISE_YAML[k]) for k in PARAMS}
#: Where the coordinate search starts (ties keep it). NOTE: written here, never read from the
#: config (docs/evaluation.md, rule 1), so the config cannot steer its own re-choice through the
#: tie rule. The smallest round and the strongest aging (each sweep's first); the prior at the
#: sweep's largest: before anything has finished, every estimate is the prior capped by the host's
#: bound (max_new_tokens), so a small prior would cap them all alike and leave the bound unused
#: (tests/sim/test_sim_dllm.py's cold-start order), where a large one lets the bound decide.
START = {"slots": float(SHAPE_SWEEP[0][0]), "round_blocks": float(SHAPE_SWEEP[0][1]),
         "max_wait_rounds": float(WAIT_SWEEP[0]), "prior_rounds": float(PRIOR_SWEEP[-1])}
ROWS = ("stock", "stock_eq", "dwise", "oracle")
