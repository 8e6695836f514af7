"""Switchboard's SGLang plugin (entry point ``sglang.srt.plugins: switchboard``).

SGLang calls ``register()`` early in every process it starts (launcher,
schedulers, detokenizer). It is inert unless Switchboard launched SGLang
(``$SWITCHBOARD_PLAN`` names the plan). Then, in the processes that run (or
launch) SGLang's scheduler, it verifies the hook contract and installs the
chosen policies. The detokenizer runs no hook: it is left as SGLang starts it.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from server.sglang.launch.env import PLAN_ENV

if TYPE_CHECKING:
    from server.resolve import LaunchPlan

log = logging.getLogger("switchboard.plugin")

SCHEDULER_MODULE = "sglang.srt.managers.scheduler"
SCHEDULER_TARGET = f"{SCHEDULER_MODULE}.Scheduler"


def register() -> None:
    """SGLang plugin entry point."""
    plan_path = os.environ.get(PLAN_ENV)
    if not plan_path:
        return
    if SCHEDULER_MODULE not in sys.modules:
        # NOTE: SGLang loads plugins from the scheduler's own module (run_scheduler_process)
        # and the launcher verifies before loading them (launch/main.py); a process
        # without that module (the detokenizer) runs none of the hooked symbols, and
        # verifying there would import the whole scheduler stack for nothing.
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


def install(plan: LaunchPlan) -> None:
    """Install the chosen kinds in this process through their bindings (idempotent per process).

    NOTE: called where SGLang's scheduler module is imported (``register`` returns before
    it elsewhere)."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from server.sglang.launch.binding import SchedulerParts, chosen
    from server.sglang.scheduling.scheduler import scheduler_class

    if plan.device == "cpu":
        from server.sglang.launch.args import hicache_on
        from server.sglang.launch.hybrid import cpu_hybrid

        if cpu_hybrid(plan.model_path):
            from server.sglang.launch import conv_kernels

            conv_kernels.install()
        if hicache_on(plan):
            from server.sglang.hicache import cpu as cpu_hicache

            cpu_hicache.install()
    parts = SchedulerParts()
    for spec, binding in chosen(plan):
        binding.install(spec, plan, parts)
    # NOTE: always replaced: the KV-fit check on arrival is on whatever the policies.
    HookRegistry.register(SCHEDULER_TARGET, scheduler_class(parts, plan.feedback_log),
                          HookType.REPLACE)
    log.info("switchboard plugin: %s", " ".join(parts.installed) or "stock SGLang (no kind chosen)")
