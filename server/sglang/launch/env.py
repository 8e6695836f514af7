"""Environment of the SGLang processes Switchboard launches (no SGLang import).

Every SGLang process (the HTTP/tokenizer main process, schedulers, the
detokenizer) inherits this environment, which is how the plugin in each of
them finds the plan and how CPU processes get the ``sgl_kernel`` stub.
"""

from __future__ import annotations

import os
from pathlib import Path

from server.resolve import LaunchPlan
from server.sglang.launch.hybrid import cpu_hybrid, hybrid_env

#: Path of the JSON ``LaunchPlan``; its presence is what activates the plugin.
PLAN_ENV = "SWITCHBOARD_PLAN"
SITE_DIR = Path(__file__).resolve().parent / "_site"
#: The tree this code runs from (the repository, or a worktree of it).
CODE_ROOT = Path(__file__).resolve().parents[3]


def child_env(plan: LaunchPlan, plan_path: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for ``python -m server.sglang.launch.main``."""
    env = dict(os.environ if base is None else base)
    env[PLAN_ENV] = str(plan_path)
    # NOTE: the children import this same tree. Without it, sitecustomize (CPU) imports
    # ``server`` at interpreter start, before ``-m`` puts the working directory on the
    # path, from wherever the installed package points: a server started from a git
    # worktree ran the worktree's supervisor over the main checkout's launcher.
    env["PYTHONPATH"] = os.pathsep.join([str(CODE_ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
    if plan.device == "cpu":
        # NOTE: SGLang's CPU engine path; it requires the sgl_kernel stub.
        env["SGLANG_USE_CPU_ENGINE"] = "1"
        env["SWITCHBOARD_STUB_SGL_KERNEL"] = "1"
        env["OMP_NUM_THREADS"] = str(plan.cpu_threads)
        env["CUDA_VISIBLE_DEVICES"] = ""
        env["PYTHONPATH"] = os.pathsep.join([str(SITE_DIR), env["PYTHONPATH"]])
        if cpu_hybrid(plan.model_path):
            env.update(hybrid_env(plan.sglang.get("dtype")))
    if "cache" in plan.policies:
        # NOTE: SGLang's Rust tree core rejects eviction strategies it does not
        # know; the Python core runs any EvictionStrategy.
        env["SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"] = "python"
    return env
