"""Server binding of the decisions kind (``+decisions``): SGLang's ``/v1/decisions``.

``separate`` is SGLang's own route, untouched; its option may ask for SGLang's
``lpm`` order (``needs.schedule_policy``). ``flide`` (``needs.packed_forward``)
answers the route by packing (``serving.py``, in the HTTP process; the shared
input tokenized once, ``encoding.py``) and runs
the packed sequences exactly inside SGLang's scheduler: positions and
readouts (``layout.py``), the segment mask in the torch-native attention
(``attention.py``), each question's short convolutions restarted from the
context's end on LFM2 (``conv.py``), whole admission and context-only
caching (``admission.py``).

NOTE: packing runs on SGLang's torch-native attention (the CPU path) only:
on a GPU SGLang's FlashInfer/Triton backends would not apply the mask, and
``kernels/segment_mask``'s FlashInfer path has not run on a GPU, so a packed
option on another backend is refused at launch. A hybrid model other than
LFM2 (``serving.RESTARTABLE``) keeps SGLang's own scoring.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from compose.config import ConfigError
from compose.specs import build_policy
from policies.decisions import DecisionsNeeds
from server.sglang.decisions.symbols import (
    DECISIONS_SYMBOLS,
    ENCODE_TARGET,
    EXTEND_TARGET,
    INIT_NEW_TARGET,
    SCORE_TARGET,
)
from server.sglang.launch.binding import ForcedFlag, LaunchFields, SchedulerParts

if TYPE_CHECKING:
    from compose.specs import PolicySpec
    from server.resolve import LaunchPlan


class DecisionsBinding:
    """``+decisions``: stock or packed ``/v1/decisions``."""

    symbols = DECISIONS_SYMBOLS
    """Its rows of the hook contract (the route, the forward batch, the torch-native
    extend attention, the prefill walk and the tree's checkpoint)."""

    def launch(self, spec: PolicySpec, launch: LaunchFields) -> list[ForcedFlag]:
        needs: DecisionsNeeds = spec.needs_of()
        why = f"+decisions ({spec.target})"
        flags = []
        if needs.schedule_policy is not None:
            flags.append(ForcedFlag("schedule_policy", needs.schedule_policy,
                                    "SGLang's own order of the decision's prompts", control=False))
        if not needs.packed_forward:
            return flags
        if launch.plan.device != "cpu" or launch.fields.get("attention_backend") not in (None, "torch_native"):
            raise ConfigError(
                f"{why}: packed decisions run on SGLang's torch-native attention (device cpu) only; "
                "the FlashInfer segment-mask path has not run on a GPU (kernels/segment_mask/gpu_check.py)")
        # NOTE: the route is hooked in the process that loads the plugin; extra
        # tokenizer workers would answer it unpacked.
        return [*flags, ForcedFlag("attention_backend", "torch_native", "the packed pass's segment mask"),
                ForcedFlag("tokenizer_worker_num", 1, "the packed route runs in the main process")]

    def install(self, spec: PolicySpec, plan: LaunchPlan, parts: SchedulerParts) -> None:
        needs: DecisionsNeeds = spec.needs_of()
        if needs.packed_forward:
            from sglang.srt.plugins.hook_registry import HookRegistry, HookType

            from server.sglang.decisions import conv, serving
            from server.sglang.decisions.admission import PackedAdmission
            from server.sglang.decisions.attention import forward_extend_packed
            from server.sglang.decisions.layout import after_init_new

            serving.HOST = serving.PackingHost(build_policy(spec))
            HookRegistry.register(SCORE_TARGET, serving.packed_score, HookType.AROUND)
            HookRegistry.register(ENCODE_TARGET, serving.encode_question_once, HookType.AROUND)
            HookRegistry.register(INIT_NEW_TARGET, after_init_new, HookType.AFTER)
            HookRegistry.register(EXTEND_TARGET, forward_extend_packed, HookType.AROUND)
            conv.install()
            parts.seams.append(PackedAdmission)
        parts.installed.append(f"decisions={spec.target}")

    def extend_cli(self) -> None:
        return None


BINDING = DecisionsBinding()
