"""The router kind's server binding: SGLang's gateway (SMG) started with the policy's needs.

SMG (``smg`` on PyPI, pinned) does the routing; Switchboard never routes. A
routing policy cannot run inside SMG, so its ``needs`` name the SMG policy it
twins and the flags carrying its parameters (``policies/router``); this module
turns them, with the host settings under ``router.*``, into one ``smg launch``
command (run by ``smg_main``, which adds the keys). Nothing here knows an option's name.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from compose.config import ConfigError
from compose.schema import ClusterConfig, RouterHostConfig
from policies.router import RouterNeeds
from server.ports import PortUse

#: Offset of the gateway's Prometheus port from ``server.port`` when
#: ``router.prometheus_port`` is null (SMG's own default, 29000, would clash
#: between two units on one machine).
PROMETHEUS_OFFSET = 1000


#: The gateway's command; its arguments follow (``smg launch``'s, through the
#: wrapper that gives SMG its keys from the environment: ``smg_main``).
SMG_LAUNCH = (sys.executable, "-m", "server.cluster.smg_main")

#: The model name that clients may always use (SGLang's own default name).
DEFAULT_ALIAS = "default"


@dataclass(frozen=True)
class GatewayPlan:
    """One SMG process."""

    argv: tuple[str, ...]
    """The full command line."""
    url: str
    """Where clients reach it (``http://host:port``)."""
    worker_urls: tuple[str, ...]
    """Workers it routes to, in registration order (empty: discovered)."""
    grace_s: float
    """Seconds it gets to drain on SIGTERM before it is killed."""
    ports: tuple[PortUse, ...] = ()
    """Every port it listens on, with the setting that chose it (``server.ports``)."""


def _client_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


def selector_terms(selector: str) -> list[str]:
    """``key=value`` terms of a label selector; ``[]`` if any term is not one."""
    terms = [t.strip() for t in selector.split(",")]
    for term in terms:
        key, eq, value = term.partition("=")
        if not (eq and key.strip() and value.strip()) or key.endswith("!"):
            return []
    return terms


def gateway_plan(needs: RouterNeeds, settings: RouterHostConfig, *, host: str, port: int, log_level: str,
                 grace_s: float, model_name: str, worker_urls: Sequence[str] = (),
                 discovery: ClusterConfig | None = None) -> GatewayPlan:
    """The SMG command for a routing policy's ``needs`` and the deployment's settings."""
    argv = [*SMG_LAUNCH,
            "--host", host, "--port", str(port),
            "--policy", needs.gateway_policy]
    for flag, value in needs.gateway_flags:
        argv += [flag, value]
    if discovery is not None:
        argv += ["--service-discovery", "--selector", *selector_terms(discovery.selector),
                 "--service-discovery-port", str(discovery.worker_port or port)]
        if discovery.namespace:
            argv += ["--service-discovery-namespace", discovery.namespace]
    else:
        argv += ["--worker-urls", *worker_urls]
    prometheus = settings.prometheus_port or port + PROMETHEUS_OFFSET
    ports = [PortUse(port, host, "server.port"),
             PortUse(prometheus, "0.0.0.0", "router.prometheus_port" if settings.prometheus_port
                     else f"router.prometheus_port=null (server.port + {PROMETHEUS_OFFSET})")]
    argv += ["--prometheus-port", str(prometheus),
             "--health-check-interval-secs", str(settings.health_check_interval_secs),
             "--health-check-timeout-secs", str(settings.health_check_timeout_secs),
             "--retry-max-retries", str(settings.max_retries),
             "--request-timeout-secs", str(settings.request_timeout_secs),
             # NOTE: SMG drains for this long on SIGTERM; the supervisor kills
             # it after the same grace, so both clocks agree.
             "--shutdown-grace-period-secs", str(max(1, int(grace_s))),
             # NOTE: routing is on request text; SMG would otherwise try to
             # fetch the model's tokenizer from a hub.
             "--disable-tokenizer-autoload",
             "--log-level", log_level.lower(),
             # NOTE: SMG routes by model name; a single SGLang server takes any
             # name, and clients (and our docs) say "default".
             "--model-alias", f"{DEFAULT_ALIAS}={model_name}"]
    if settings.health_check_port is not None:
        argv += ["--health-check-port", str(settings.health_check_port)]
        ports.append(PortUse(settings.health_check_port, host, "router.health_check_port"))
    scheme = "http"
    if settings.tls_cert_path is not None and settings.tls_key_path is not None:
        argv += ["--tls-cert-path", _readable(settings.tls_cert_path, "router.tls_cert_path"),
                 "--tls-key-path", _readable(settings.tls_key_path, "router.tls_key_path")]
        scheme = "https"
    check_with_smg(argv[len(SMG_LAUNCH):])
    return GatewayPlan(tuple(argv), f"{scheme}://{_client_host(host)}:{port}", tuple(worker_urls), grace_s,
                       tuple(ports))


def _readable(path: str, field_name: str) -> str:
    """``path`` made absolute; a ``ConfigError`` naming ``field_name`` unless it is a readable file."""
    p = Path(path).expanduser().resolve()
    if not p.is_file() or not os.access(p, os.R_OK):
        raise ConfigError(f"{field_name}={path}: not a readable file")
    return str(p)


def check_with_smg(args: Sequence[str]) -> None:
    """Parse ``args`` with SMG's own argument parser (``smg launch``), as SGLang's
    parser checks ``sglang.*``; a refusal is a ``ConfigError`` at startup.

    NOTE: the policy classes type their parameters; this catches a flag or
    value that this SMG release does not take (a version skew), before any
    worker starts."""
    from smg.launch_router import parse_router_args

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parse_router_args(list(args))
    except SystemExit:
        lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
        raise ConfigError(f"router: smg {' '.join(args[:4])} ... refused: "
                          f"{lines[-1] if lines else 'no reason given'}") from None
