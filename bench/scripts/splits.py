"""The tuning and evaluation splits of the scheduling tables (docs/evaluation.md).

Scenario families are the committed loads (Mooncake conversation x3 and Azure
conversation x0.4 on one simulated H100 with Llama-3.1-8B, steady and with a
surge) plus two ServeGen traces the project never tuned on. Every family of the
evaluation split has three instances (disjoint trace windows, or synthesis
seeds), so a table reports the spread.

* ``TUNING``: the first 30 minutes of the Mooncake and Azure traces (steady,
  and with a surge in the middle). Defaults are chosen here only.
* ``EVALUATION``: three disjoint 10-minute windows of the *second* half hour of
  each trace (steady and surged), and ServeGen ``reason/deepseek-r1`` and
  ``language/m-small`` with synthesis seeds 0, 1, 2. Loads were set from FCFS
  alone (a load where FCFS's queue builds), never from a technique's result.
  Azure's second half hour thins out (4,068, 3,125 and 2,065 requests in its
  three windows), so at x0.4 two of them barely queue; the ``azure ~17 req/s``
  family scales each window to about the first one's rate at x0.4
  (``AZURE_LEVEL``: scale from the window's request count alone).

A surge multiplies the new-request rate in the middle third of the window, at
most 10 scaled minutes (x2 on Mooncake, x1.5 on Azure, as the committed tables).

NOTE: windows are in the trace's own seconds; time scaling and surges come
after (surge times are in scaled seconds from the window's start).
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.schema import SessionSplit

COMMON = ("accelerator=h100", "model_profile=llama-3.1-8b")
#: SGLang's built-in queue orders: every scheduling table's baselines.
BUILTINS = ("fcfs", "lpm", "dfs-weight", "hrrn", "lof", "shortest-prefill-first")
#: Built-ins a simulated verdict compares with. NOTE: not ``lof``: the
#: simulator's ``max_new_tokens`` is the true output length, so there lof is an oracle.
BEST_OF = tuple(b for b in BUILTINS if b != "lof")
#: Relative difference within which two results count as equal in a frontier verdict
#: (``bench.frontier.Metric.tolerance``): the simulator is deterministic, so smaller
#: differences are real but no reason to pick one option over another.
TIE = 0.01
MOONCAKE = ("trace=mooncake_conversation", "trace.time_scale=3.0")


def session_split(seed: int) -> str:
    """``trace.claude_code.split`` of a session table's instance: the tuning instance (session-start
    seed 0) replays the tuning half of the sessions, every evaluation seed the other half."""
    # NOTE: sessions no default was looked at on (docs/evaluation.md, session workloads)
    return str((SessionSplit.tuning if seed == 0 else SessionSplit.evaluation).value)

AZURE = ("trace=azure_conversation", "trace.time_scale=0.4")
#: Evaluation windows of the second half hour (trace seconds).
WINDOWS = ((1800, 2400), (2400, 3000), (3000, 3600))
#: Per window, the time scale that puts Azure at ~17 requests per scaled second
#: (requests / (17 * 600), rounded): 4,068, 3,125 and 2,065 requests.
#: NOTE: chosen from request counts only; FCFS queues on each (mean queue 15-54).
AZURE_LEVEL = (0.4, 0.3, 0.2)
SEEDS = (0, 1, 2)
#: Longest surge (scaled seconds): the committed scenarios' 10 minutes.
SURGE_MAX_S = 600.0


@dataclass(frozen=True)
class Scenario:
    """One simulated run's trace settings; ``family`` groups the instances of a split."""

    name: str
    family: str
    overrides: tuple[str, ...]


def _surge(start_s: float, end_s: float, factor: float) -> str:
    return f"trace.surges=[{{start_s:{start_s:g},end_s:{end_s:g},factor:{factor:g}}}]"


def _windowed(family: str, base: tuple[str, ...], scale: float, start: int, end: int,
              surge: float | None) -> Scenario:
    """A window of a trace; with ``surge``, the middle of the window (a third of
    it, at most ``SURGE_MAX_S`` scaled seconds) gets ``surge`` x the new-request rate."""
    span = (end - start) * scale
    over = [*base, f"trace.window_start_s={start}", f"trace.window_end_s={end}"]
    if surge is not None:
        length = min(span / 3, SURGE_MAX_S)
        over.append(_surge((span - length) / 2, (span + length) / 2, surge))
        family += " + surge"
    return Scenario(f"{family} [{start}, {end}) s", family, tuple(over))


TUNING: tuple[Scenario, ...] = (
    _windowed("mooncake x3", MOONCAKE, 3.0, 0, 1800, None),
    _windowed("mooncake x3", MOONCAKE, 3.0, 0, 1800, 2.0),
    _windowed("azure x0.4", AZURE, 0.4, 0, 1800, None),
    _windowed("azure x0.4", AZURE, 0.4, 0, 1800, 1.5),
)

EVALUATION: tuple[Scenario, ...] = (
    *(_windowed("mooncake x3", MOONCAKE, 3.0, a, b, None) for a, b in WINDOWS),
    *(_windowed("mooncake x3", MOONCAKE, 3.0, a, b, 2.0) for a, b in WINDOWS),
    *(_windowed("azure x0.4", AZURE, 0.4, a, b, None) for a, b in WINDOWS),
    *(_windowed("azure x0.4", AZURE, 0.4, a, b, 1.5) for a, b in WINDOWS),
    *(_windowed("azure ~17 req/s", ("trace=azure_conversation", f"trace.time_scale={k}"), k, a, b, None)
      for (a, b), k in zip(WINDOWS, AZURE_LEVEL)),
    *(Scenario(f"servegen deepseek-r1 x0.15 seed {s}", "servegen deepseek-r1 x0.15",
               ("trace=servegen_deepseek_r1", "trace.servegen.rate_scale=0.15",
                "trace.servegen.duration_s=1800", f"trace.seed={s}")) for s in SEEDS),
    *(Scenario(f"servegen m-small x0.6 seed {s}", "servegen m-small x0.6",
               ("trace=servegen_language_small", "trace.servegen.rate_scale=0.6",
                "trace.servegen.duration_s=600", f"trace.seed={s}")) for s in SEEDS),
)


def families(scenarios: tuple[Scenario, ...]) -> dict[str, list[Scenario]]:
    """Scenarios grouped by family, in order."""
    out: dict[str, list[Scenario]] = {}
    for sc in scenarios:
        out.setdefault(sc.family, []).append(sc)
    return out
