"""Trace replay (``python -m bench``): real LLM-serving traces replayed through a
model of SGLang's scheduler, driven by the same pure policies as the server,
or live against any OpenAI-compatible endpoint (``live.endpoint=...``).

======================= ===========================================================
module                  job
======================= ===========================================================
``__main__``            the Hydra CLI: ``python -m bench [+policy=...] [trace=...]``
``config``              compose ``conf/bench.yaml`` through ``compose/`` (the
                        server's groups and policy specs); typed settings
``schema``              structured-config schema of the bench's own groups
``run``                 one run: load, shape, build, replay, measure, write
``traces/``             loaders (Mooncake, Azure, Claude Code sessions, ServeGen),
                        transforms (window, time scale, surges) and ``shape``
                        (lengths scaled for a small model, in both modes)
``sim/``                the simulator: scheduler loop, prefill budget, radix
                        prefix cache, running batch, roofline cost model, the
                        synchronous-forward token clock (``overlap``); binds
                        each kind (``binding``); imports nothing of ``live/``
``metrics``             pure metric functions over per-request records (TTFT,
                        TPOT, ITL, E2E, goodput, hit rate, windows)
``report``              results folder: JSON, markdown, CSV, PNG plots
``live/``               live replay (prompts from block hashes, open- and
                        closed-loop sender over SGLang's ``bench_serving``
                        request functions), CPU calibration probes, the
                        cost-model fit, a real server as a subprocess (shared
                        with tests)
``leap/``               the LEAP prompt sets (templated; public) and the predictor studies
``scripts/``            one results table each (``python -m bench.scripts.<name>``;
                        committed tables under ``bench/results/``)
======================= ===========================================================

NOTE: ``bench`` imports ``compose`` and ``policies``, never ``server``; the two
seam benchmarks ``scripts/order_overhead`` and ``scripts/cache_overhead`` are
the exception, since what they time is the server's SGLang glue itself
(``tests/config/test_boundaries.py`` holds both rules).

``metrics`` scores simulated and live records alike.
"""
