"""``python -m bench [overrides]``: replay a trace in the simulator, or live.

Every documented form works verbatim, e.g.::

    python -m bench                                          # Mooncake, H100, Llama-3.1-8B
    python -m bench trace=azure_conversation +policy=lpm +cache=lfu
    python -m bench trace.time_scale=2 accelerator=h200 model_profile=qwen3-32b
    python -m bench -m +policy=fcfs,lpm,shortest_prefill     # one results folder per run
    python -m bench --cfg job                                # print the composed config
    python -m bench trace=azure_conversation accelerator=cpu model_profile=smollm2-135m \
        live.endpoint=http://127.0.0.1:30000 live.input_scale=0.0625 live.output_scale=0.125

Config mistakes exit with status 2 and one line naming the field or option; a
live endpoint that cannot serve the replay exits with status 1 and one line.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from bench.config import BENCH_CONFIG_NAME, compose_bench, resolve_bench
from bench.schema import register_bench_schemas
from compose.config import CONF_DIR, ConfigError
from compose.help import reader_may_leave, register_resolver

EXIT_CONFIG = 2
EXIT_LIVE = 1
log = logging.getLogger("switchboard.bench")


def _fail(message: str) -> None:
    print(f"bench: config error: {message}", file=sys.stderr, flush=True)
    sys.exit(EXIT_CONFIG)


def run(cfg: DictConfig) -> None:
    """Resolve ``cfg`` and replay into Hydra's output folder for this job."""
    from hydra.core.hydra_config import HydraConfig

    from bench.live.replay import LiveReplayError
    from bench.run import run_bench

    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # NOTE: one line per /v1/loads poll
    try:
        settings = resolve_bench(cfg)
    except ConfigError as exc:
        _fail(str(exc))
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        result = run_bench(settings, out_dir)
    except ConfigError as exc:  # NOTE: found once the trace is loaded (live.input_scale vs its blocks)
        _fail(str(exc))
    except LiveReplayError as exc:
        print(f"bench: live replay error: {exc}", file=sys.stderr, flush=True)
        sys.exit(EXIT_LIVE)
    s = result["summary"]
    log.info("bench: %d finished, TTFT p50 %.3f s p99 %.3f s, goodput %.2f req/s, hit rate %s",
             s["finished"], s["ttft_s"]["p50"] or float("nan"), s["ttft_s"]["p99"] or float("nan"),
             s["goodput_rps"], f"{s['prefix_hit_rate']:.1%}" if s["prefix_hit_rate"] is not None else "-")


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=BENCH_CONFIG_NAME)
def _hydra_main(cfg: DictConfig) -> None:
    run(cfg)


def main() -> None:
    """CLI entry: a one-line config check first, then Hydra's own main."""
    from hydra._internal.utils import get_args_parser

    register_bench_schemas()
    register_resolver()  # NOTE: `--help` is Hydra's page; its middle is generated (compose/help.py)
    args = get_args_parser().parse_args(sys.argv[1:])
    informational = args.help or args.hydra_help or args.info or args.shell_completion
    custom_config = args.config_path or args.config_name or args.config_dir
    # NOTE: Hydra composes `--help`'s overrides too: a mistake there is the same one line.
    with_overrides = bool(args.overrides) and not args.shell_completion
    if not (custom_config or args.multirun) and (with_overrides or not informational):
        # NOTE: Hydra would print a multi-line report and exit 1; compose once
        # here so a mistake is one line naming the field, exit status 2.
        try:
            resolve_bench(compose_bench(args.overrides))
        except ConfigError as exc:
            _fail(str(exc))
    with reader_may_leave() if informational else contextlib.nullcontext():
        _hydra_main()


if __name__ == "__main__":
    main()
