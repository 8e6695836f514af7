"""Every port a command will bind, checked before anything starts.

One server binds ``server.port``; a unit (``+router=``) binds the gateway's
``server.port``, its Prometheus port (``router.prometheus_port``, null:
``server.port + 1000``), its probe listener (``router.health_check_port``) and
each worker's port (``cluster.worker_port`` + i, null: ``server.port`` + 1 + i).
A port that is taken, or two settings that chose the same port, stop the
command with one line naming the port and the setting that chose it, instead
of a process failing half-started (as a gateway's metrics port once did in
the test suite, taken by an unrelated client connection).

NOTE: SGLang's own internal ports (its ZMQ and distributed ports) are picked
free by SGLang itself at startup; they are not ours to check.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from compose.config import ConfigError


@dataclass(frozen=True)
class PortUse:
    """One port a process of the command will listen on."""

    port: int
    host: str
    """The address it binds (``0.0.0.0``: every interface)."""
    setting: str
    """What chose it, in the config's words (e.g. ``cluster.worker_port + 1``)."""


def check_ports(uses: list[PortUse]) -> None:
    """Raise ``ConfigError`` naming the first port chosen twice or not free now."""
    seen: dict[int, PortUse] = {}
    for use in uses:
        if use.port in seen:
            raise ConfigError(f"port {use.port} is chosen twice: by {seen[use.port].setting} and by {use.setting}")
        seen[use.port] = use
    for use in uses:
        reason = _bind_error(use.host, use.port)
        if reason is not None:
            raise ConfigError(f"port {use.port} ({use.setting}) on {use.host} is not free: {reason}; "
                              "choose another or stop what holds it")


def _bind_error(host: str, port: int) -> str | None:
    """``None`` if ``host:port`` can be bound now, else why not.

    NOTE: with ``SO_REUSEADDR``, as uvicorn and SMG bind: a port whose last
    connections linger in TIME_WAIT is free to them, so it is free here too."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None
