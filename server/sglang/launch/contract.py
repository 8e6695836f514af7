"""Every SGLang symbol the adapter hooks or calls, with the signature it expects.

SGLang's plugin loader only *logs* a hook whose target is gone; a silently
unhooked policy would serve stock behaviour under a Switchboard config. So the
launcher and the plugin in every SGLang process call ``verify()`` and refuse
to start when anything is missing or has changed shape: the core's rows below
(the plugin, the launcher, the scheduler subclass) and every registered kind's
own (``ServerBinding.symbols``, next to its binding).

NOTE: keep the rows in step with the adapter: a symbol used in
``server/sglang/`` but in no row is a bug (tests/seams/test_contract.py greps for it).
"""

from __future__ import annotations

import importlib
import inspect

from server.sglang import SGLANG_VERSION
from server.sglang.hicache.symbols import HICACHE_SYMBOLS
from server.sglang.launch.conv_kernels import CONV_KERNEL_SYMBOLS
from server.sglang.launch.input_guard import NORMALIZE_TARGET, VALIDATE_TARGET
from server.sglang.launch.symbols import POLICY, SCHED, HookedSymbol
from server.sglang.middleware.bad_input import REQUEST_VALIDATION

#: The core's rows: what the plugin, the launcher and the scheduler subclass
#: (the fixed dispatcher) hook or call whatever kinds are chosen. Each kind's
#: own rows come with its server binding (``ServerBinding.symbols``).
HOOKED_SYMBOLS: tuple[HookedSymbol, ...] = (
    HookedSymbol("sglang.srt.plugins.load_plugins", ()),
    HookedSymbol("sglang.srt.plugins.hook_registry.HookRegistry.register",
                 ("target", "hook", "hook_type", "source")),
    HookedSymbol("sglang.srt.plugins.hook_registry.HookType.REPLACE"),
    HookedSymbol(f"{SCHED}.Scheduler"),
    HookedSymbol(f"{SCHED}.Scheduler.init_schedule_policy", ("self",)),
    HookedSymbol(f"{SCHED}.Scheduler.get_prefill_adder_class", ("self",)),
    HookedSymbol(f"{SCHED}.Scheduler._add_request_to_queue", ("self", "req", "is_retracted")),
    HookedSymbol(f"{SCHED}.Scheduler.send_abort_output", ("self", "abort_req", "req")),
    HookedSymbol(f"{SCHED}.Scheduler.init_req_max_new_tokens", ("self", "req")),
    HookedSymbol(f"{SCHED}.Scheduler.run_batch", ("self", "batch", "pp_proxy_tensors")),
    # NOTE: an iteration boundary of the hook clock (scheduling/hook_clock.py); its plan's batch_to_run
    HookedSymbol(f"{SCHED}.Scheduler.get_next_batch_to_run", ("self", "running_batch", "last_batch")),
    HookedSymbol("sglang.srt.managers.schedule_batch.NextBatchPlan.batch_to_run"),
    HookedSymbol("sglang.srt.model_executor.forward_batch_info.ForwardMode.is_extend",
                 ("self", "include_draft_extend_v2")),
    HookedSymbol("sglang.srt.model_executor.forward_batch_info.ForwardMode.is_target_verify", ("self",)),
    HookedSymbol(f"{SCHED}.Scheduler._release_aborted_request", ("self", "req")),
    HookedSymbol(f"{SCHED}._make_abort_req", ("req", "finished_reason")),
    HookedSymbol(f"{SCHED}.Scheduler.get_output_streamer_class", ("self",)),
    HookedSymbol(f"{SCHED}.Scheduler.close_session", ("self", "recv_req")),
    HookedSymbol("sglang.srt.managers.scheduler_components.output_streamer.SchedulerOutputStreamer.stream_output",
                 ("self", "reqs", "return_logprob", "skip_req")),
    HookedSymbol("sglang.srt.managers.schedule_batch.FINISH_ABORT"),
    HookedSymbol(f"{POLICY}.SchedulePolicy.__init__",
                 ("self", "policy", "tree_cache", "enable_hierarchical_cache",
                  "enable_priority_scheduling", "schedule_low_priority_values_first")),
    HookedSymbol(f"{POLICY}.SchedulePolicy.calc_priority",
                 ("self", "waiting_queue", "running_batch", "processed_tokens")),
    HookedSymbol(f"{POLICY}.SchedulePolicy._determine_active_policy", ("self", "waiting_queue")),
    HookedSymbol(f"{POLICY}.SchedulePolicy.waiting_queue_prefix_matched", ("self", "waiting_queue")),
    HookedSymbol(f"{POLICY}.PrefillAdder.add_one_req",
                 ("self", "req", "has_chunked_req", "truncation_align_size")),
    HookedSymbol(f"{POLICY}.AddReqResult"),
    HookedSymbol(f"{POLICY}.CacheAwarePolicy"),
    HookedSymbol(f"{POLICY}.SchedulePolicy.shortest_prefill_chunk_limit",
                 ("self", "chunked_req", "waiting_queue", "budget", "page_size")),
    HookedSymbol(f"{SCHED}.Scheduler.get_num_allocatable_reqs",
                 ("self", "running_bs", "beam_width", "running_batch", "num_held_rows")),
    HookedSymbol("sglang.srt.server_args.prepare_server_args", ("argv",)),
    HookedSymbol("sglang.srt.server_args.ServerArgs.add_cli_args", ("parser",)),
    HookedSymbol("sglang.srt.entrypoints.http_server.app"),
    # The HTTP process's input guard (server/sglang/launch/input_guard.py).
    HookedSymbol(VALIDATE_TARGET, ("self", "obj", "input_ids")),
    HookedSymbol("sglang.srt.managers.io_struct.SessionParams"),
    HookedSymbol(NORMALIZE_TARGET, ("self",)),
    # Not SGLang's, but the adapter relies on it (server/sglang/middleware/bad_input.py).
    HookedSymbol(".".join(REQUEST_VALIDATION), ("body_fields", "received_body", "embed_body_fields")),
    # Diffusion-LM rounds (server/sglang/scheduling/dllm.py).
    HookedSymbol(f"{SCHED}.Scheduler._fetch_waiting_reqs", ("self",)),
    HookedSymbol(f"{SCHED}.Scheduler._process_dllm_batches", ("self", "adder", "running_batch")),
    HookedSymbol(f"{SCHED}.Scheduler.get_new_batch_dllm", ("self", "running_batch")),
    HookedSymbol("sglang.srt.entrypoints.http_server.launch_server",
                 ("server_args", "init_tokenizer_manager_func", "run_scheduler_process_func",
                  "run_detokenizer_process_func", "execute_warmup_func", "launch_callback")),
    # SGLang's HiCache on the CPU path (server/sglang/hicache/cpu.py).
    *HICACHE_SYMBOLS,
    *CONV_KERNEL_SYMBOLS,
)


def all_symbols() -> tuple[HookedSymbol, ...]:
    """The core's rows, then every registered kind's (``ServerBinding.symbols``), registry order.

    NOTE: every registered kind's, chosen or not: a server refuses to start on an
    SGLang that one of its kinds could not hook, so a config change never meets it later."""
    from compose.kinds import kinds
    from server.sglang.launch.binding import server_binding

    return HOOKED_SYMBOLS + tuple(sym for k in kinds() for sym in server_binding(k).symbols)


class HookContractError(RuntimeError):
    """An SGLang symbol the adapter needs is missing or has another signature."""


def _resolve(path: str) -> object:
    parts = path.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attr in parts[split:]:
            obj = getattr(obj, attr)  # AttributeError: missing
        return obj
    raise ImportError(path)


def problems(symbols: tuple[HookedSymbol, ...] | None = None) -> list[str]:
    """What is wrong with ``symbols`` (``None``: ``all_symbols()``) in the installed SGLang (empty: all good)."""
    found = []
    for sym in all_symbols() if symbols is None else symbols:
        try:
            obj = _resolve(sym.path)
        except (ImportError, AttributeError) as exc:
            found.append(f"{sym.path} is missing ({type(exc).__name__}: {exc})")
            continue
        if sym.params is None:
            continue
        try:
            # NOTE: obj may be no callable; inspect then raises TypeError, caught below.
            actual = tuple(inspect.signature(obj).parameters)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            found.append(f"{sym.path} is not a callable with a signature")
            continue
        if actual != sym.params:
            found.append(f"{sym.path} has parameters {actual}, expected {sym.params}")
    return found


def verify(symbols: tuple[HookedSymbol, ...] | None = None) -> None:
    """Raise ``HookContractError`` naming every broken symbol."""
    found = problems(symbols)
    if found:
        try:
            import sglang

            installed = getattr(sglang, "__version__", "unknown")
        except ImportError:
            installed = "not installed"
        raise HookContractError(
            f"Switchboard's SGLang adapter is pinned to sglang=={SGLANG_VERSION} "
            f"(installed: {installed}) and cannot hook it: " + "; ".join(found)
        )
