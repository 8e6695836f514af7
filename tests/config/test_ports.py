"""Every port a command binds is checked before anything starts (``server.ports``)."""

from __future__ import annotations

import socket

import pytest

from bench.live.server import GATEWAY_METRICS_OFFSET, free_port
from compose.config import ConfigError, compose
from server.cluster.gateway import PROMETHEUS_OFFSET
from server.cluster.plan import resolve_cluster
from server.ports import PortUse, check_ports
from server.resolve import resolve
from tests.config.test_config import run_cli

pytestmark = pytest.mark.config

CPU = "server.device=cpu"


def unit_ports(*overrides: str) -> list[PortUse]:
    cfg = compose([CPU, "+router=round_robin", *overrides])
    cluster = resolve_cluster(cfg, resolve(cfg))
    assert cluster is not None
    return list(cluster.ports)


def test_a_unit_lists_every_port_with_the_setting_that_chose_it():
    ports = unit_ports("server.port=31000", "cluster.replicas=2", "router.health_check_port=31500")
    assert [(u.port, u.setting) for u in ports] == [
        (31000, "server.port"), (32000, f"router.prometheus_port=null (server.port + {PROMETHEUS_OFFSET})"),
        (31500, "router.health_check_port"), (31001, "cluster.worker_port=null (server.port + 1)"),
        (31002, "cluster.worker_port=null (server.port + 1) + 1")]
    ports = unit_ports("server.port=31000", "cluster.replicas=2", "cluster.worker_port=40000",
                       "router.prometheus_port=9100")
    assert [(u.port, u.setting) for u in ports][1:] == [
        (9100, "router.prometheus_port"), (40000, "cluster.worker_port"), (40001, "cluster.worker_port + 1")]


def test_a_port_chosen_twice_is_named_with_both_settings():
    with pytest.raises(ConfigError, match=r"port 31001 is chosen twice: by router.prometheus_port and by "
                                          r"cluster.worker_port=null \(server.port \+ 1\)"):
        check_ports(unit_ports("server.port=31000", "router.prometheus_port=31001"))


def test_a_taken_port_is_named_with_its_setting():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"port {port} \(cluster.worker_port\) on 127.0.0.1 is not free"):
            check_ports([PortUse(port - 1, "127.0.0.1", "server.port"), PortUse(port, "127.0.0.1",
                                                                                  "cluster.worker_port")])
    check_ports([PortUse(port, "127.0.0.1", "server.port")])  # free again once closed


def test_the_cli_refuses_a_taken_port_in_one_line_before_any_model_work():
    with socket.socket() as held:
        port = free_port()
        held.bind(("127.0.0.1", port))
        held.listen()
        proc = run_cli(f"server.port={port}", "server.device=cpu")
    assert proc.returncode == 2
    assert f"port {port} (server.port) on 127.0.0.1 is not free" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_the_harness_keeps_a_units_metrics_port_free_too():
    assert GATEWAY_METRICS_OFFSET == PROMETHEUS_OFFSET
    port = free_port(8, extra=(GATEWAY_METRICS_OFFSET,))
    check_ports([PortUse(p, "127.0.0.1", "test") for p in [*range(port, port + 8), port + GATEWAY_METRICS_OFFSET]])
