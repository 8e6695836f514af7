"""Server binding of the adapters kind (``+adapters``): SGLang's LoRA path.

Launch: SGLang's LoRA settings from the kind's host settings (``adapters.*``);
Scute's mixed methods (``needs.mixed_methods``) hand SGLang a zero rank-1 LoRA
per adapter and keep the real values in their own slots. Install: the slot
eviction order and, for Scute, its backend (``hooks.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from compose.config import ConfigError
from compose.specs import build_policy
from server.sglang.adapters.symbols import ADAPTERS_SYMBOLS
from server.sglang.launch.binding import ForcedFlag, LaunchFields, SchedulerParts

if TYPE_CHECKING:
    from compose.specs import PolicySpec
    from server.resolve import LaunchPlan


class AdaptersBinding:
    """``+adapters``: LoRA launch fields and the slot hooks."""

    symbols = ADAPTERS_SYMBOLS
    """Its rows of the hook contract (SGLang's LoRA path)."""

    def launch(self, spec: PolicySpec, launch: LaunchFields) -> list[ForcedFlag]:
        fields = launch.fields
        host = spec.host_settings()
        mixed = spec.needs_of().mixed_methods
        why = f"+adapters ({spec.target})"
        if not host.paths and (host.max_rank is None or not host.target_modules):
            raise ConfigError("adapters: with no adapters.paths, set adapters.max_rank and "
                              "adapters.target_modules (the slots are sized at startup)")
        if int(fields.get("tp_size") or 1) > 1 and mixed:
            raise ConfigError(f"sglang.tp_size={fields['tp_size']} conflicts with {why}: Scute's slots "
                              "are not sharded (tp_size 1)")
        # NOTE: the adapters' own settings, carried into SGLang's LoRA flags (control=False)
        flags = [ForcedFlag("enable_lora", True, "adapters are LoRA slots", control=False),
                 ForcedFlag("max_loras_per_batch", host.max_per_batch, "adapters.max_per_batch",
                            control=False)]
        if host.paths:
            flags.append(ForcedFlag("lora_paths", [f"{name}={path}" for name, path in host.paths.items()],
                                    "adapters.paths", control=False))
        if host.target_modules:
            flags.append(ForcedFlag("lora_target_modules", list(host.target_modules),
                                    "adapters.target_modules", control=False))
        if mixed:
            # NOTE: SGLang is handed a zero rank-1 LoRA per adapter (the real
            # values live in Scute's slots) and builds its manager with the scute
            # backend, which its CLI cannot name: torch_native stands in there.
            flags += [ForcedFlag("max_lora_rank", 1, "zero rank-1 stand-ins: Scute's slots hold the weights",
                                 control=False),
                      ForcedFlag("lora_backend", "torch_native", "the scute backend's stand-in name", control=False)]
        else:
            if host.max_rank is not None:
                flags.append(ForcedFlag("max_lora_rank", host.max_rank, "adapters.max_rank", control=False))
            if launch.plan.device == "cpu":
                # NOTE: SGLang's default (csgmv) dies at warm-up on CPU.
                flags.append(ForcedFlag("lora_backend", "torch_native", "on CPU (SGLang's csgmv dies at warm-up)"))
        return flags

    def install(self, spec: PolicySpec, plan: LaunchPlan, parts: SchedulerParts) -> None:
        from server.sglang.adapters.hooks import install as install_adapters

        install_adapters(build_policy(spec), spec.host_settings())
        parts.installed.append(f"adapters={spec.target}")

    def extend_cli(self) -> None:
        return None


BINDING = AdaptersBinding()
