"""Switchboard's SGLang plugin (entry point ``sglang.srt.plugins: switchboard``).

SGLang calls ``register()`` early in every process it starts (launcher,
schedulers, detokenizer). It is inert unless Switchboard launched SGLang
(``$SWITCHBOARD_PLAN`` names the plan). Then it verifies the hook contract and
installs the chosen policies in the processes that run SGLang's scheduler.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from server.sglang.launch.env import PLAN_ENV

log = logging.getLogger("switchboard.plugin")

SCHEDULER_MODULE = "sglang.srt.managers.scheduler"
SCHEDULER_TARGET = f"{SCHEDULER_MODULE}.Scheduler"


def register() -> None:
    """SGLang plugin entry point."""
    plan_path = os.environ.get(PLAN_ENV)
    if not plan_path:
        return
    from server.resolve import LaunchPlan
    from server.sglang.launch.contract import HookContractError, verify

    try:
        verify()
    except HookContractError as exc:
        # NOTE: SGLang's load_plugins() logs and swallows Exceptions raised by a
        # plugin; SystemExit passes through, so a broken contract stops the process.
        raise SystemExit(f"switchboard: {exc}") from exc
    install(LaunchPlan.from_json(Path(plan_path).read_text()))


def install(plan) -> None:  # plan: server.resolve.LaunchPlan
    """Register the hooks ``plan`` needs in this process (idempotent per process)."""
    # NOTE: only processes that run (or launch) SGLang's scheduler import its
    # module; the detokenizer does not, and needs none of these hooks.
    if SCHEDULER_MODULE not in sys.modules:
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from compose.specs import build_policy
    from server.sglang.cache.eviction import install_eviction_policy
    from server.sglang.scheduling.scheduler import scheduler_class

    order = own_order(plan)
    admission = build_policy(plan.policies["admission"]) if "admission" in plan.policies else None
    # NOTE: always replaced: the KV-fit check on arrival is on whatever the policies.
    HookRegistry.register(SCHEDULER_TARGET, scheduler_class(order, admission, plan.feedback_log),
                          HookType.REPLACE)
    if "cache" in plan.policies:
        cache_spec = plan.policies["cache"]
        cache = build_policy(cache_spec)
        if cache.needs.interior:
            from server.sglang.cache.gap_cache import register_gap_cache

            # NOTE: --radix-cache-backend switchboard_gap (args.py)
            register_gap_cache(cache, cache_spec.host_settings().host_tier_tokens)
        else:
            install_eviction_policy(cache)
    if "adapters" in plan.policies:
        from server.sglang.adapters.hooks import install as install_adapters

        spec = plan.policies["adapters"]
        install_adapters(build_policy(spec), spec.host_settings())
    log.info("switchboard plugin: order=%s admission=%s cache=%s adapters=%s",
             type(order).__name__ if order else "sglang", type(admission).__name__ if admission else "none",
             plan.policies["cache"].target if "cache" in plan.policies else "sglang",
             plan.policies["adapters"].target if "adapters" in plan.policies else "none")


def own_order(plan):  # -> SchedulingPolicy | None
    """The scheduling policy to run through the seam, built once (``None``:
    SGLang's own order, including stock options whose ``needs.sglang_native``
    just set ``--schedule-policy``)."""
    from compose.specs import build_policy

    sched = plan.policies.get("policy")
    order = build_policy(sched) if sched is not None else None
    return None if order is None or order.needs.sglang_native is not None else order
