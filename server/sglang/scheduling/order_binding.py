"""Server binding of the scheduling kind (``+policy``): SGLang's queue order seam.

Launch: a Switchboard order runs through SGLang's ``fcfs`` slot (the seam
re-sorts the queue, ``ordering.py``); a stock option sets its own
``--schedule-policy``. For a diffusion LM the order decides dLLM rounds
(``dllm.py``) and sizes SGLang's slots. Install: the policy object, built once
in the process, is handed to the scheduler subclass (``scheduler.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from compose.specs import build_policy
from server.sglang.launch.binding import LaunchFields, SchedulerParts

if TYPE_CHECKING:
    from compose.specs import PolicySpec
    from server.resolve import LaunchPlan


class OrderBinding:
    """``+policy``: launch flags from ``SchedulingNeeds``; the order handed to the scheduler."""

    def launch(self, spec: PolicySpec, launch: LaunchFields) -> None:
        needs = spec.needs_of()
        why = f"+policy ({spec.target})"
        if launch.plan.is_diffusion and needs.dllm_slots is not None:
            # NOTE: SGLang sizes the dLLM slots (DllmManager) and the request pool from it
            launch.require("max_running_requests", needs.dllm_slots, f"{why} slots")
        if needs.hidden_state_layer is not None or needs.denoise_hidden_state:
            # NOTE: the feature capture is a forward hook; hooks do not run in CUDA graphs.
            launch.require("cuda_graph_backend_prefill", "disabled", f"{why} capturing hidden states")
        # Our policies run through SGLang's fcfs slot: the seam re-sorts the queue.
        launch.require("schedule_policy", needs.sglang_native or "fcfs", why)

    def install(self, spec: PolicySpec, plan: LaunchPlan, parts: SchedulerParts) -> None:
        # NOTE: a stock option (``needs.sglang_native``) only set --schedule-policy:
        # SGLang orders its queue itself, nothing runs through the seam.
        if spec.needs_of().sglang_native is None:
            parts.order = build_policy(spec)
        parts.installed.append(f"order={spec.target if parts.order is not None else 'sglang'}")

    def extend_cli(self) -> None:
        return None


BINDING = OrderBinding()
