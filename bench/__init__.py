"""Trace-replay simulator (``python -m bench``): real LLM-serving traces replayed
through a model of SGLang's scheduler, driven by the same pure policies as the
server.

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
``live/``               start a real server and chat with it (shared with tests)
``scripts/``            ``replay_speed`` (simulator speed), ``baselines``
                        (policy table in ``bench/results/baselines.md``),
                        ``hf_agreement`` (CPU server vs HF transformers)
======================= ===========================================================

Replaying a trace against a live server is not part of this package yet;
``metrics`` is written so that it can score live records as well.
"""
