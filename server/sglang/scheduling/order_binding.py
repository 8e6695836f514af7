"""Server binding of the scheduling kind (``+policy``): SGLang's queue order seam.

Launch: a Switchboard order runs through SGLang's ``fcfs`` slot (the seam
re-sorts the queue, ``ordering.py``); a stock option sets its own
``--schedule-policy``. For a diffusion LM the order decides dLLM rounds
(``dllm.py``, its ``needs.rounds``) and sizes SGLang's slots. Install: the
policy object, built once in the process, orders the prefill queue
(``SchedulerParts.order``), or, on a diffusion LM, hosts the dLLM rounds (the
served model picks the face, ``policies.scheduling.rounds``); the feature
captures its needs ask for subscribe to the scheduler's events
(``capture.py``, ``events.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from compose.specs import build_policy
from server.sglang.launch.binding import ForcedFlag, LaunchFields, SchedulerParts
from server.sglang.scheduling.symbols import ORDER_SYMBOLS

if TYPE_CHECKING:
    from compose.specs import PolicySpec
    from server.resolve import LaunchPlan


class OrderBinding:
    """``+policy``: launch flags from ``SchedulingNeeds``; the order handed to the scheduler."""

    symbols = ORDER_SYMBOLS
    """Its rows of the hook contract (the match tracker, the dLLM round host, the capture)."""

    def launch(self, spec: PolicySpec, launch: LaunchFields) -> list[ForcedFlag]:
        needs = spec.needs_of()
        flags = []
        # NOTE: compose/compat.py refused an option without the served model's face before
        rounds = needs.rounds if launch.plan.is_diffusion else None
        if rounds is not None and rounds.slots is not None:
            # NOTE: SGLang sizes the dLLM slots (DllmManager) and the request pool from it
            flags.append(ForcedFlag("max_running_requests", rounds.slots, "SGLang sizes the diffusion slots from it"))
        if needs.hidden_state_layer is not None or (rounds is not None and rounds.denoise_hidden_state):
            # NOTE: the feature capture is a forward hook; hooks do not run in CUDA graphs.
            flags.append(ForcedFlag("cuda_graph_backend_prefill", "disabled",
                                    "hidden states are captured by a forward hook, which a CUDA graph skips"))
        if needs.sglang_native:
            flags.append(ForcedFlag("schedule_policy", needs.sglang_native, "SGLang's own policy", control=False))
        else:
            # NOTE: our policies run through SGLang's fcfs slot: the seam re-sorts the queue.
            flags.append(ForcedFlag("schedule_policy", "fcfs", "the seam re-sorts SGLang's fcfs queue"))
        return flags

    def install(self, spec: PolicySpec, plan: LaunchPlan, parts: SchedulerParts) -> None:
        needs = spec.needs_of()
        # NOTE: a stock option (``needs.sglang_native``) only set --schedule-policy:
        # SGLang orders its queue itself, nothing runs through the seam.
        if needs.sglang_native is not None:
            parts.installed.append("order=sglang")
            return
        from server.sglang.scheduling import capture
        from server.sglang.scheduling.dllm import DllmRounds

        order = build_policy(spec)  # NOTE: it has the faces its needs promise (the kind's ``faces``)
        parts.policies.append(order)
        layer = needs.hidden_state_layer
        if layer is not None:
            parts.seams.append(lambda s: capture.HiddenStateCapture(s.tp_worker.model_runner.model, layer))
        if needs.prompt_embedding:
            parts.seams.append(lambda s: capture.PromptEmbedding(s.tp_worker.model_runner.model, s.tp_size))
        if plan.is_diffusion:
            # NOTE: on a diffusion LM the order decides dLLM rounds, not the prefill queue
            # (compose/compat.py refused an option without needs.rounds there).
            parts.seams.append(lambda s: DllmRounds(s, order) if s.dllm_config is not None else None)
            if needs.rounds is not None and needs.rounds.denoise_hidden_state:
                parts.seams.append(lambda s: capture.DenoiseHiddenCapture(s.tp_worker.model_runner.model)
                                   if s.dllm_config is not None else None)
        else:
            parts.order = order
        parts.installed.append(f"order={spec.target}")

    def extend_cli(self) -> None:
        return None


BINDING = OrderBinding()
