"""``python -m server [overrides]``: compose the config, prepare the model, run SGLang.

Every documented form works verbatim, e.g.::

    python -m server
    python -m server +policy=shortest_prefill +cache=lru
    python -m server server.port=31000 sglang.max_running_requests=8
    python -m server --cfg job          # print the composed config, start nothing

Config mistakes exit with status 2 and one line naming the field or option.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import NoReturn

import hydra
from omegaconf import DictConfig, OmegaConf

from compose.config import CONF_DIR, CONFIG_NAME, ConfigError, compose
from compose.help import reader_may_leave, register_resolver
from compose.schema import register_schemas

EXIT_CONFIG = 2
log = logging.getLogger("switchboard")


def _fail(message: str) -> None:
    print(f"switchboard: config error: {message}", file=sys.stderr, flush=True)
    sys.exit(EXIT_CONFIG)


def run(cfg: DictConfig) -> int:
    """Resolve ``cfg``, materialize the model, and supervise SGLang (and the gateway)."""
    from compose.model import ModelCacheError, ensure_default_model
    from compose.schema import ModelSource
    from server.auth import load_keys
    from server.cluster.plan import resolve_cluster
    from server.ports import PortUse, check_ports
    from server.resolve import describe, resolve
    from server.supervisor import supervise

    logging.basicConfig(level=cfg.server.log_level.upper(),
                        format="[%(asctime)s] %(name)s: %(message)s", datefmt="%H:%M:%S")
    from server.sglang.launch.args import forced_flags, validate

    try:
        plan = resolve(cfg)
        validate(plan)  # NOTE: SGLang's own parser checks sglang.* before any model work
        cluster = resolve_cluster(cfg, plan)
        keys = load_keys(cfg.server.api_key_file, cfg.server.admin_api_key_file,
                         OmegaConf.select(cfg, "router.tenant_keys_file"))
        # NOTE: before any model work or process: a taken port is one line, not a half-started unit
        check_ports(list(cluster.ports) if cluster is not None
                    else [PortUse(int(plan.sglang["port"]), str(plan.sglang["host"]), "server.port")])
    except ConfigError as exc:
        _fail(str(exc))
    log.info("%s", keys.describe())
    if cluster is not None and not cluster.workers:
        log.info("gateway only (workers discovered): %s", " ".join(cluster.gateway.argv[1:]))
        return supervise(plan, cluster, keys)
    if plan.model_path is None:
        assert plan.default_model is not None  # NOTE: resolve() sets it whenever model_path is None
        try:
            path = ensure_default_model(ModelSource(**plan.default_model))
        except ModelCacheError as exc:
            print(f"switchboard: model error: {exc}", file=sys.stderr)
            return 1
        plan = plan.with_model_path(str(path))
        if cluster is not None:
            cluster = cluster.with_model_path(str(path))
    diffusion = f" (diffusion LM, dllm_algorithm={plan.sglang['dllm_algorithm']})" if plan.is_diffusion else ""
    log.info("device=%s model=%s%s", plan.device, plan.model_path, diffusion)
    for line in describe(plan):
        log.info("%s", line)
    for forced in forced_flags(plan):
        log.info("%s", forced.line())
    if cluster is not None:
        log.info("cluster: %d workers on ports %s behind %s", len(cluster.workers),
                 ", ".join(str(w.sglang["port"]) for w in cluster.workers), cluster.gateway.url)
    return supervise(plan, cluster, keys)


def _exit_now(code: int) -> NoReturn:
    """Exit without tearing the interpreter down.

    NOTE: once SGLang has stopped there is nothing left to clean up, but this
    process has torch and SGLang imported (device detection, ``sglang.*``
    validation) and their teardown at interpreter exit takes seconds (4 s
    measured on 2 cores), which a stop would spend past ``shutdown_grace_s``.
    Logs and standard streams are flushed first.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=CONFIG_NAME)
def _hydra_main(cfg: DictConfig) -> None:
    _exit_now(run(cfg))


def main() -> None:
    """CLI entry: a one-line config check first, then Hydra's own main."""
    from hydra._internal.utils import get_args_parser

    register_schemas()
    register_resolver()  # NOTE: `--help` is Hydra's page; its middle is generated (compose/help.py)
    args = get_args_parser().parse_args(sys.argv[1:])
    informational = args.help or args.hydra_help or args.info or args.shell_completion
    custom_config = args.config_path or args.config_name or args.config_dir
    # NOTE: Hydra composes `--help`'s overrides too: a mistake there is the same one line.
    with_overrides = bool(args.overrides) and not args.shell_completion
    if not custom_config and (with_overrides or not informational):
        # NOTE: Hydra would print a multi-line report and exit 1; compose once
        # here so a mistake is one line naming the field, exit status 2.
        try:
            compose(args.overrides)
        except ConfigError as exc:
            _fail(str(exc))
    with reader_may_leave() if informational else contextlib.nullcontext():
        _hydra_main()


if __name__ == "__main__":
    main()
