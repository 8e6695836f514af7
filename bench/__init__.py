"""Trace replay (``python -m bench``): real LLM-serving traces replayed through a
model of SGLang's scheduler, driven by the same pure policies as the server,
or live against any OpenAI-compatible endpoint (``live.endpoint=...``).

======================= ===========================================================
module                  job
======================= ===========================================================
``__main__``            the Hydra CLI: ``python -m bench [+policy=...] [trace=...]``
``config``              compose ``conf/bench.yaml``; typed settings and policies
``schema``              structured-config schema of the bench groups
``run``                 one run: load, build, replay, measure, write
``traces/``             loaders (Mooncake, Azure, Claude Code sessions, ServeGen)
                        and transforms (window, time scale, surges)
``sim/``                the simulator: scheduler loop, prefill budget, radix
                        prefix cache, running batch, roofline cost model
``metrics``             pure metric functions over per-request records (TTFT,
                        TPOT, ITL, E2E, goodput, hit rate, windows)
``report``              results folder: JSON, markdown, CSV, PNG plots
``live/``               live replay (prompt synthesis from block hashes, open- and
                        closed-loop sender over SGLang's ``bench_serving``
                        request functions), CPU calibration probes, and
                        helpers to start a real server (shared with tests)
``leap/``               the LEAP prompt set
``scripts/``            ``replay_speed``, ``baselines``, ``fairway``,
                        ``order_overhead``, ``leap_curve``, ``calibrate_cpu``,
                        ``validate_sim``, ``hf_agreement`` (one table each,
                        committed ones under ``bench/results/``)
======================= ===========================================================

``metrics`` scores simulated and live records alike.
"""
