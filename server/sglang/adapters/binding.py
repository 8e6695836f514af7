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
from server.sglang.launch.binding import LaunchFields, SchedulerParts

if TYPE_CHECKING:
    from compose.specs import PolicySpec
    from server.resolve import LaunchPlan


class AdaptersBinding:
    """``+adapters``: LoRA launch fields and the slot hooks."""

    symbols = ADAPTERS_SYMBOLS
    """Its rows of the hook contract (SGLang's LoRA path)."""

    def launch(self, spec: PolicySpec, launch: LaunchFields) -> None:
        fields, require = launch.fields, launch.require
        host = spec.host_settings()
        mixed = spec.needs_of().mixed_methods
        why = f"+adapters ({spec.target})"
        if not host.paths and (host.max_rank is None or not host.target_modules):
            raise ConfigError("adapters: with no adapters.paths, set adapters.max_rank and "
                              "adapters.target_modules (the slots are sized at startup)")
        if int(fields.get("tp_size") or 1) > 1 and mixed:
            raise ConfigError(f"sglang.tp_size={fields['tp_size']} conflicts with {why}: Scute's slots "
                              "are not sharded (tp_size 1)")
        require("enable_lora", True, why)
        require("max_loras_per_batch", host.max_per_batch, why + " (adapters.max_per_batch)")
        if host.paths:
            require("lora_paths", [f"{name}={path}" for name, path in host.paths.items()],
                    why + " (adapters.paths)")
        if host.target_modules:
            require("lora_target_modules", list(host.target_modules), why + " (adapters.target_modules)")
        if mixed:
            # NOTE: SGLang is handed a zero rank-1 LoRA per adapter (the real
            # values live in Scute's slots) and builds its manager with the scute
            # backend, which its CLI cannot name: torch_native stands in there.
            require("max_lora_rank", 1, why)
            require("lora_backend", "torch_native", why)
        else:
            if host.max_rank is not None:
                require("max_lora_rank", host.max_rank, why + " (adapters.max_rank)")
            if launch.plan.device == "cpu":
                # NOTE: SGLang's default (csgmv) dies at warm-up on CPU.
                require("lora_backend", "torch_native", why + " on CPU")

    def install(self, spec: PolicySpec, plan: LaunchPlan, parts: SchedulerParts) -> None:
        from server.sglang.adapters.hooks import install as install_adapters

        install_adapters(build_policy(spec), spec.host_settings())
        parts.installed.append(f"adapters={spec.target}")

    def extend_cli(self) -> None:
        return None


BINDING = AdaptersBinding()
