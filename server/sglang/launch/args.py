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
from typing import Any, NoReturn

from compose.compat import ModelInHost, ModelKind, check_host_settings, check_model_fit
from compose.config import ConfigError
from compose.kinds import kinds
from server.resolve import LaunchPlan
from server.sglang.hicache.symbols import CPU_IO_BACKEND, CPU_MEM_LAYOUTS, HYBRID_MEM_LAYOUT
from server.sglang.launch.binding import Forced, LaunchFields, chosen, server_binding
from server.sglang.launch.hybrid import DEFAULT_STATE_SLOTS, checkpoint_config, cpu_hybrid, hybrid_architecture


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ConfigError(message)


def launch_fields(plan: LaunchPlan) -> LaunchFields:
    """ServerArgs fields: the plan's, plus what the chosen kinds' bindings and the device imply,
    with every flag an option forced (``LaunchFields.forced``).

    NOTE: the model-kind and host-setting rules (``compose.compat``) run first,
    so a refused pair is named before any binding adds a flag for it."""
    check_model_fit(served_model(plan), plan.policies)
    check_host_settings(plan.policies, "sglang.enable_hierarchical_cache=true",
                        bool(plan.sglang.get("enable_hierarchical_cache")))
    launch = LaunchFields(plan, dict(plan.sglang))
    for spec, binding in chosen(plan):
        launch.apply(f"+{spec.group} ({spec.target.rsplit('.', 1)[-1]})", binding.launch(spec, launch))
    for name, value in plan.device_defaults.items():
        # NOTE: after the options: a device default (server.cpu_sglang) yields to a forced flag.
        launch.default(name, value)
    if plan.device == "cpu":
        # NOTE: CUDA graphs do not exist on CPU (device defaults, not an option's: stock gets them too).
        launch.default("cuda_graph_backend_decode", "disabled")
        launch.default("cuda_graph_backend_prefill", "disabled")
        if checkpoint_dtype(plan.model_path) == "float32":
            # NOTE: SGLang's auto downcasts a float32 checkpoint to float16, a GPU practice; a CPU
            # without AVX512-FP16/AMX computes float16 matmuls at ~1 GFLOPS against ~150 in float32
            # (one core, bench/results/cpu_dtype.md). On CPU auto keeps the checkpoint's dtype.
            launch.resolve_auto("dtype", "float32")
        if cpu_hybrid(plan.model_path):
            launch.default("max_mamba_cache_size", DEFAULT_STATE_SLOTS)
        if launch.fields.get("enable_hierarchical_cache"):
            _cpu_hicache(launch, cpu_hybrid(plan.model_path))
    return launch


def checkpoint_dtype(model_path: str | None) -> str | None:
    """The dtype a checkpoint's ``config.json`` names (``dtype``, or the older ``torch_dtype``;
    SGLang reads neither as float32); ``None`` without a checkpoint."""
    config = checkpoint_config(model_path)
    if config is None:
        return None
    found = config.get("dtype") or config.get("torch_dtype") or "float32"
    return "float32" if found in ("float32", "float") else str(found)


def _cpu_hicache(launch: LaunchFields, hybrid: str | None) -> None:
    """HiCache on CPU: the io backend and host layouts ``server/sglang/hicache/cpu.py`` serves.

    NOTE: defaults (stock gets them too), then a refusal naming the field for any
    other value: SGLang's ``kernel`` backend and the other page-first layouts are
    CUDA kernels the CPU path does not have, and would fail at the first copy. A
    hybrid model's recurrent-state host pool refuses ``layer_first`` (SGLang's
    ``MambaPoolHost``), so a hybrid model defaults to ``page_first_direct``."""
    launch.default("hicache_io_backend", CPU_IO_BACKEND)
    launch.default("hicache_mem_layout", HYBRID_MEM_LAYOUT if hybrid is not None else CPU_MEM_LAYOUTS[0])
    backend, layout = launch.fields["hicache_io_backend"], launch.fields["hicache_mem_layout"]
    if backend != CPU_IO_BACKEND:
        raise ConfigError(f"sglang.hicache_io_backend={backend} does not run on CPU: SGLang's HiCache there is "
                          f"served with hicache_io_backend={CPU_IO_BACKEND} (server/sglang/hicache/cpu.py)")
    if layout not in CPU_MEM_LAYOUTS:
        raise ConfigError(f"sglang.hicache_mem_layout={layout} does not run on CPU: SGLang's HiCache there is "
                          f"served with hicache_mem_layout={' or '.join(CPU_MEM_LAYOUTS)} "
                          "(server/sglang/hicache/cpu.py)")
    if hybrid is not None and layout != HYBRID_MEM_LAYOUT:
        raise ConfigError(f"sglang.hicache_mem_layout={layout} is refused for a hybrid model ({hybrid}): SGLang's "
                          f"recurrent-state host pool needs hicache_mem_layout={HYBRID_MEM_LAYOUT}")


def hicache_on(plan: LaunchPlan) -> bool:
    """Whether the plan launches SGLang with its hierarchical cache (a user's flag or an option's)."""
    return bool(sglang_fields(plan).get("enable_hierarchical_cache"))


def sglang_fields(plan: LaunchPlan) -> dict[str, Any]:
    """ServerArgs fields: the plan's, plus what the chosen kinds' bindings and the device imply."""
    return launch_fields(plan).result()


def forced_flags(plan: LaunchPlan) -> list[Forced]:
    """Every SGLang flag the plan's options force, with the option and the reason (startup log)."""
    return launch_fields(plan).forced


def controls(plan: LaunchPlan) -> list[str]:
    """The overrides that run stock SGLang under the same forced flags as ``plan``'s options
    (the control row of a live comparison): every forced flag that changes how stock serves."""
    return [f.flag.override() for f in forced_flags(plan) if f.flag.control]


def served_model(plan: LaunchPlan) -> ModelInHost:
    """The served model, in the words the server's errors use (``model.dllm_algorithm``)."""
    algorithm = plan.sglang.get("dllm_algorithm") if plan.is_diffusion else None
    if algorithm is None:
        hybrid = hybrid_architecture(plan.model_path, (plan.default_model or {}).get("kind"))
        if hybrid is not None:
            return ModelInHost(ModelKind.autoregressive,
                               f"the served model is a hybrid autoregressive model ({hybrid})",
                               f"a hybrid model ({hybrid})", "serve a diffusion LM (e.g. model=sdar_tiny)",
                               hybrid=hybrid)
        return ModelInHost(ModelKind.autoregressive,
                           "the served model is autoregressive and attention-only (model.dllm_algorithm is null)",
                           "an autoregressive model", "serve a diffusion LM (e.g. model=sdar_tiny)")
    return ModelInHost(ModelKind.diffusion, "the served model is a diffusion LM (model.dllm_algorithm is set)",
                       f"a diffusion LM (model.dllm_algorithm={algorithm})",
                       "serve a diffusion LM (e.g. model=sdar_tiny)", str(algorithm))


def _parser() -> argparse.ArgumentParser:
    from sglang.srt.server_args import ServerArgs

    for kind in kinds():
        server_binding(kind).extend_cli()  # NOTE: before SGLang builds its choices
    parser = _RaisingParser(prog="sglang", add_help=False)
    ServerArgs.add_cli_args(parser)
    return parser


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


def build_server_args(plan: LaunchPlan) -> tuple[Any, list[str]]:  # (ServerArgs, argv); SGLang is untyped
    """Validated ``ServerArgs`` for ``plan``, built the way ``sglang serve`` builds them."""
    from sglang.srt.server_args import prepare_server_args

    argv = to_argv(sglang_fields(plan))
    return prepare_server_args(argv), argv
