"""From a ``LaunchPlan`` to SGLang ``ServerArgs``, validated by SGLang itself.

The ``sglang.*`` mapping is turned into the command line ``sglang serve``
would take and parsed by SGLang's own argument parser
(``ServerArgs.add_cli_args``), so types, choices and field names are checked
exactly as SGLang checks them. The only difference: a mistake raises
``ConfigError`` with one line naming ``sglang.<field>``, instead of argparse's
usage dump.
"""

from __future__ import annotations

import argparse
import difflib
import json
from typing import Any

from compose.config import ConfigError
from compose.specs import build_policy
from server.resolve import LaunchPlan

#: ``--radix-eviction-policy`` value that selects Switchboard's eviction seam.
EVICTION_STRATEGY_NAME = "switchboard"
#: ``--radix-cache-backend`` of the gap cache (= ``server.sglang.cache.gap_cache.GAP_CACHE_BACKEND``;
#: not imported from there: that module imports torch and SGLang's cache).
GAP_CACHE_BACKEND = "switchboard_gap"


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        raise ConfigError(message)


def sglang_fields(plan: LaunchPlan) -> dict[str, Any]:
    """ServerArgs fields: the plan's, plus what the chosen policies and device imply."""
    fields = dict(plan.sglang)

    def require(name: str, value: Any, why: str) -> None:
        if name in fields and fields[name] not in (None, value):
            raise ConfigError(f"sglang.{name}={fields[name]} conflicts with {why} (needs {value})")
        fields[name] = value

    algorithm = fields.get("dllm_algorithm") if plan.is_diffusion else None
    if algorithm is not None:
        _diffusion_refusals(plan, str(algorithm))
    sched = plan.policies.get("policy")
    if sched is not None:
        needs = build_policy(sched).needs
        builtin = needs.sglang_native
        _check_model_kind(sched.target, needs, algorithm)
        if algorithm is not None and needs.dllm_slots is not None:
            # NOTE: SGLang sizes the dLLM slots (DllmManager) and the request pool from it
            require("max_running_requests", needs.dllm_slots, f"+policy ({sched.target}) slots")
        if needs.hidden_state_layer is not None or needs.denoise_hidden_state:
            # NOTE: the feature capture is a forward hook; hooks do not run in CUDA graphs.
            require("cuda_graph_backend_prefill", "disabled", f"+policy ({sched.target}) capturing hidden states")
        # Our policies run through SGLang's fcfs slot: the seam re-sorts the queue.
        require("schedule_policy", builtin or "fcfs", f"+policy ({sched.target})")
    if "cache" in plan.policies:
        cache = plan.policies["cache"]
        interior = build_policy(cache).needs.interior
        if cache.host_settings().host_tier_tokens and not interior:
            # NOTE: our host tier lives in the gap cache; a tail-first cache has SGLang's own
            raise ConfigError(
                f"cache.host_tier_tokens needs a cache that holds gaps (+cache=penelope); "
                f"for +cache ({cache.target}) use SGLang's own host tier "
                "(sglang.enable_hierarchical_cache=true)")
        if interior:
            # NOTE: front eviction needs a cache that holds gaps: ours, through
            # SGLang's cache registry (server/sglang/cache/gap_cache.py); never a
            # silent fallback to tail-first eviction.
            why = f"+cache ({cache.target}) freeing history from the front (gap cache)"
            require("radix_cache_backend", GAP_CACHE_BACKEND, why)
            require("page_size", 1, why)
            # NOTE: a gap chunk's checkpoint hands the request its cached tail
            # before the next chunk is planned; overlap scheduling plans first.
            require("disable_overlap_schedule", True, why)
            for flag in ("enable_hierarchical_cache", "speculative_algorithm"):
                if fields.get(flag):
                    raise ConfigError(f"sglang.{flag} conflicts with {why}")
        else:
            require("radix_eviction_policy", EVICTION_STRATEGY_NAME, "+cache")
        if fields.get("disable_radix_cache"):
            raise ConfigError("+cache needs the prefix cache; remove sglang.disable_radix_cache")
    if "adapters" in plan.policies:
        _adapter_fields(plan, fields, require)
    if plan.device == "cpu":
        # NOTE: CUDA graphs do not exist on CPU.
        fields.setdefault("cuda_graph_backend_decode", "disabled")
        fields.setdefault("cuda_graph_backend_prefill", "disabled")
    return fields


def _check_model_kind(target: str, needs: Any, algorithm: str | None) -> None:
    """Refuse a scheduling policy made for the other kind of model (``algorithm``:
    the diffusion LM's ``dllm_algorithm``, ``None`` for an autoregressive one),
    or for this diffusion algorithm, naming why."""
    diffusion = algorithm is not None
    if diffusion and not needs.diffusion:
        raise ConfigError(
            f"+policy ({target}) orders an autoregressive model's prefill queue, but the served model is a "
            "diffusion LM (model.dllm_algorithm is set), whose requests take block rounds: use +policy=dwise, "
            "+policy=fcfs (SGLang's stock dLLM order) or no +policy")
    if not diffusion and not needs.autoregressive:
        raise ConfigError(
            f"+policy ({target}) schedules a diffusion LM's block rounds, but the served model is "
            "autoregressive (model.dllm_algorithm is null): serve a diffusion LM (e.g. model=sdar_tiny)")
    if algorithm == "Gemma4Renoise" and needs.sglang_native is None:
        raise ConfigError(f"+policy ({target}) shares rounds between prompt and denoising blocks; "
                          "Gemma4Renoise encodes the context in separate forwards")


def _diffusion_refusals(plan: LaunchPlan, algorithm: str) -> None:
    """Kinds that SGLang's dLLM path does not carry, refused by name at startup."""
    why = f"a diffusion LM (model.dllm_algorithm={algorithm})"
    if "admission" in plan.policies:
        # NOTE: the dLLM path builds a plain PrefillAdder and moves the queue head
        # into its slots without the gate (docs/dwise-notes.md §5): deferral would not hold.
        raise ConfigError(f"+admission is not supported for {why}: SGLang's dLLM rounds bypass the gate")
    if "adapters" in plan.policies:
        raise ConfigError(f"+adapters is not supported for {why}: SGLang disables LoRA on its dLLM path")
    cache = plan.policies.get("cache")
    if cache is not None and build_policy(cache).needs.interior:
        raise ConfigError(f"+cache ({cache.target}) needs page_size 1; {why} pages KV by block")


def register_eviction_choice() -> None:
    from sglang.srt.arg_groups.choices import RADIX_EVICTION_POLICY_CHOICES, add_radix_eviction_policy_choices

    if EVICTION_STRATEGY_NAME not in RADIX_EVICTION_POLICY_CHOICES:
        add_radix_eviction_policy_choices([EVICTION_STRATEGY_NAME])


def _parser() -> argparse.ArgumentParser:
    from sglang.srt.server_args import ServerArgs

    register_eviction_choice()
    parser = _RaisingParser(prog="sglang", add_help=False)
    ServerArgs.add_cli_args(parser)
    return parser


def _adapter_fields(plan: LaunchPlan, fields: dict[str, Any], require: Any) -> None:
    """SGLang's LoRA settings from ``+adapters`` (its host settings)."""
    spec = plan.policies["adapters"]
    host = spec.host_settings()
    mixed = build_policy(spec).needs.mixed_methods
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
        require("lora_paths", [f"{name}={path}" for name, path in host.paths.items()], why + " (adapters.paths)")
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
        if plan.device == "cpu":
            # NOTE: SGLang's default (csgmv) dies at warm-up on CPU.
            require("lora_backend", "torch_native", why + " on CPU")


def to_argv(fields: dict[str, Any], parser: argparse.ArgumentParser | None = None) -> list[str]:
    """The ``sglang serve`` command line for ``fields`` (raises ``ConfigError``)."""
    parser = parser or _parser()
    actions = {a.dest: a for a in parser._actions if a.option_strings}
    argv: list[str] = []
    for name, value in fields.items():
        action = actions.get(name)
        if action is None:
            close = difflib.get_close_matches(name, list(actions), n=3)
            hint = f"; did you mean {', '.join('sglang.' + c for c in close)}?" if close else ""
            raise ConfigError(f"unknown config key 'sglang.{name}': not a ServerArgs field{hint}")
        if value is None:
            continue  # NOTE: null means "SGLang's default"
        flag = next(s for s in action.option_strings if s.startswith("--"))
        argv += _tokens(name, flag, action, value)
    _check(parser, argv, actions)
    return argv


def _tokens(name: str, flag: str, action: argparse.Action, value: Any) -> list[str]:
    if action.nargs == 0:  # store_true / store_const style flags
        if isinstance(action, argparse.BooleanOptionalAction):
            return [flag if value else f"--no-{flag[2:]}"]
        if value == action.const:
            return [flag]
        if value == action.default:
            return []
        raise ConfigError(
            f"invalid value for 'sglang.{name}': {value!r} (it is a flag: true or {action.default!r})"
        )
    if isinstance(value, (list, tuple)):
        return [flag, *(_scalar(v) for v in value)]
    return [flag, _scalar(value)]


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def _check(parser: argparse.ArgumentParser, argv: list[str], actions: dict[str, argparse.Action]) -> None:
    by_flag = {s: f"sglang.{d}" for d, a in actions.items() for s in a.option_strings}
    try:
        parser.parse_args(argv)
    except ConfigError as exc:
        msg = str(exc)
        for flag, name in sorted(by_flag.items(), key=lambda kv: -len(kv[0])):
            if f"argument {flag}" in msg or f"argument {flag}/" in msg:
                msg = msg.split(": ", 1)[-1]
                raise ConfigError(f"invalid value for '{name}': {msg}") from None
        raise ConfigError(f"sglang: {msg}") from None


def validate(plan: LaunchPlan) -> list[str]:
    """Check ``plan``'s SGLang settings (before the model exists); return the argv."""
    fields = sglang_fields(plan)
    fields["model_path"] = fields.get("model_path") or "<default model>"
    return to_argv(fields)


def build_server_args(plan: LaunchPlan):  # -> (ServerArgs, argv)
    """Validated ``ServerArgs`` for ``plan``, built the way ``sglang serve`` builds them."""
    from sglang.srt.server_args import prepare_server_args

    argv = to_argv(sglang_fields(plan))
    return prepare_server_args(argv), argv
