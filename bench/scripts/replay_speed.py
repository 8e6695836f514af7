"""Simulator speed: replay the full Mooncake conversation trace and print the time.

    python -m bench.scripts.replay_speed                 # +policy=fcfs (the pure policy)
    python -m bench.scripts.replay_speed --builtin       # SGLang's built-in order
    python -m bench.scripts.replay_speed trace.time_scale=4 +cache=lfu

Target: the 12,031 requests (3,537 s of arrivals) in at most 30 s on one core.
At trace speed one H100 with Llama-3.1-8B is about 3x overloaded (TTFT grows to
hours, thousands wait), so the pure FCFS policy orders a queue of thousands at
every scheduling pass: the slow end of what the simulator does. Nothing is written.
"""

from __future__ import annotations

import argparse
import resource
import time

from bench.config import compose_bench, resolve_bench
from bench.sim import CostModel, SimSettings, build_simulator
from bench.sim.binding import Scope, sim_parts
from bench.traces import load_trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builtin", action="store_true",
                        help="no +policy: SGLang's built-in order (the queue as it arrived)")
    parser.add_argument("overrides", nargs="*", help="bench config overrides")
    args = parser.parse_args()
    overrides = list(args.overrides)
    if not args.builtin and not any(o.startswith("+policy=") for o in overrides):
        overrides.append("+policy=fcfs")

    t0 = time.perf_counter()
    s = resolve_bench(compose_bench(["output.progress=false", *overrides]))
    trace = load_trace(s.trace, s.data_root)
    cost = CostModel(s.accelerator, s.model_profile)
    settings = SimSettings.resolve(s.sim, s.accelerator, s.model_profile, cost)
    sim = build_simulator(trace, cost, settings, sim_parts(s, Scope.replica))
    t1 = time.perf_counter()
    cpu0 = time.process_time()
    sim.run()
    t2 = time.perf_counter()
    cpu = time.process_time() - cpu0
    finished = sum(1 for r in sim.requests.values() if r.phase.value == "finished")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"trace      {trace.name}: {len(trace.requests)} requests, {trace.duration_s:.0f} s of arrivals")
    print(f"config     {' '.join(overrides) or '(defaults)'}; {s.accelerator.name} + {s.model_profile.name}")
    print(f"simulated  {sim.now:.0f} s, {sim.num_iterations} iterations "
          f"({sim.running.step} decode steps), {finished} finished")
    print(f"load       {t1 - t0:.2f} s wall")
    print(f"replay     {t2 - t1:.2f} s wall, {cpu:.2f} s CPU (peak RSS {rss:.0f} MiB)")


if __name__ == "__main__":
    main()
