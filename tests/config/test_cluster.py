"""``+router=`` and ``cluster.*``: what one command starts, and every mistake named at startup."""

from __future__ import annotations

import dataclasses

import pytest

from compose.config import ConfigError, compose, group_options
from compose.specs import build_policy, specs_from_config
from server.cluster.gateway import SMG_LAUNCH, check_with_smg
from server.cluster.plan import cpu_sets, resolve_cluster
from server.resolve import resolve
from tests.config.test_config import run_cli

pytestmark = pytest.mark.config

CPU = "server.device=cpu"


def cluster_of(*overrides: str):
    cfg = compose([CPU, *overrides])
    return resolve_cluster(cfg, resolve(cfg))


def flag(argv: tuple[str, ...], name: str) -> list[str]:
    """The values after ``name`` up to the next flag."""
    i = argv.index(name)
    out = []
    for a in argv[i + 1:]:
        if a.startswith("--"):
            break
        out.append(a)
    return out


def test_without_router_nothing_changes():
    assert cluster_of() is None
    plan = resolve(compose([CPU]))
    assert "router" not in plan.policies


def test_replicas_get_ports_cpus_and_the_gateway_the_policy_needs():
    cluster = cluster_of("+router=prefix_hash", "cluster.replicas=3", "server.port=31000",
                         "router.prefix_token_count=64")
    assert [w.sglang["port"] for w in cluster.workers] == [31001, 31002, 31003]
    assert {w.sglang["host"] for w in cluster.workers} == {"127.0.0.1"}
    for w, cpus in zip(cluster.workers, cluster.cpu_sets, strict=True):
        assert w.cpu_threads == len(cpus) >= 1
    argv = cluster.gateway.argv
    assert argv[1:3] == ("-m", "server.cluster.smg_main")
    assert flag(argv, "--port") == ["31000"] and flag(argv, "--policy") == ["prefix_hash"]
    assert flag(argv, "--prefix-token-count") == ["64"]
    assert flag(argv, "--worker-urls") == [f"http://127.0.0.1:{p}" for p in (31001, 31002, 31003)]
    assert cluster.gateway.url == "http://127.0.0.1:31000"
    # the gateway's flags are the policy's own needs, whatever the option
    for option in group_options("router"):
        c = cluster_of(f"+router={option}", "cluster.replicas=2")
        needs = build_policy(specs_from_config(compose([CPU, f"+router={option}"]))["router"]).needs
        assert flag(c.gateway.argv, "--policy") == [needs.gateway_policy]
        for name, value in needs.gateway_flags:
            assert flag(c.gateway.argv, name) == [value]


def test_every_option_and_setting_passes_smgs_own_parser():
    for option in group_options("router"):
        argv = cluster_of(f"+router={option}", "cluster.replicas=2", "router.health_check_port=31500",
                          "router.prometheus_port=31600").gateway.argv
        check_with_smg(argv[len(SMG_LAUNCH):])  # raises ConfigError if SMG refuses a flag or value
    with pytest.raises(ConfigError, match="invalid choice"):
        check_with_smg(["--policy", "nope"])


def test_kubernetes_discovery_starts_only_the_gateway():
    cluster = cluster_of("+router=cache_aware", "cluster.discovery=kubernetes", "cluster.worker_port=30000",
                         "cluster.selector='app=switchboard-worker,tier=gpu'", "cluster.namespace=serving")
    assert cluster.workers == ()
    argv = cluster.gateway.argv
    assert "--service-discovery" in argv and "--worker-urls" not in argv
    assert flag(argv, "--selector") == ["app=switchboard-worker", "tier=gpu"]
    assert flag(argv, "--service-discovery-port") == ["30000"]
    assert flag(argv, "--service-discovery-namespace") == ["serving"]


def test_cpu_shares_are_disjoint_while_cores_last():
    assert cpu_sets(2, {0, 1}) == ((0,), (1,))
    assert cpu_sets(2, range(16)) == (tuple(range(8)), tuple(range(8, 16)))
    assert cpu_sets(3, {0, 1}) == ((0,), (1,), (0,))  # more workers than cores: shared single cores
    assert all(len(s) == 1 for s in cpu_sets(8, {0, 1}))
    assert cpu_sets(2, {5, 2}) == ((2,), (5,))  # the CPUs this process may use, by id


@pytest.mark.parametrize("argv, message", [
    (["+router=round_robin", "cluster.replicas=0"], "invalid value for 'cluster.replicas': must be >= 1, got 0"),
    (["cluster.replicas=2"], "'cluster.replicas' needs a gateway in front of the replicas: add +router="),
    (["cluster.worker_port=31001"], "'cluster.worker_port' needs a gateway"),
    (["+router=round_robin", "cluster.replicas=2", "server.port=31000", "cluster.worker_port=30999"],
     "invalid value for 'cluster.worker_port'"),
    (["+router=round_robin", "cluster.max_restarts=-1"], "invalid value for 'cluster.max_restarts'"),
    (["+router=round_robin", "cluster.discovery=kubernetes", "cluster.replicas=2"],
     "'cluster.replicas' must stay 1 with cluster.discovery=kubernetes"),
    (["+router=round_robin", "cluster.discovery=kubernetes", "cluster.selector=app"],
     "invalid value for 'cluster.selector'"),
])
def test_cluster_mistakes_name_the_field(argv, message):
    with pytest.raises(ConfigError) as err:
        cluster_of(*argv)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("argv, message", [
    (["+router=prefix_hash", "router.prefix_token_count=many"], "invalid value for 'router.prefix_token_count'"),
    (["+router=cache_aware", "router.cache_treshold=0.5"], "unknown config key 'router.cache_treshold'"),
    (["+router=round_robin", "router.max_retries=-1"], "invalid value for 'router.max_retries'"),
    (["+router=round_robin", "router.prometheus_port=70000"], "invalid value for 'router.prometheus_port'"),
])
def test_router_mistakes_name_the_field(argv, message):
    with pytest.raises(ConfigError) as err:
        cluster_of(*argv)
    assert message in str(err.value)


def test_cli_refuses_bad_cluster_configs_in_one_line():
    """The three the issue names, through the real command line (exit 2, one line)."""
    for argv, needle in [
        (["+router=nope"], "unknown option 'nope' for +router= (valid options: cache_aware,"),
        (["+router=prefix_hash", "router.load_factor=high"], "invalid value for 'router.load_factor'"),
        (["+router=round_robin", "cluster.replicas=0"], "invalid value for 'cluster.replicas'"),
    ]:
        proc = run_cli(*argv, CPU)
        assert proc.returncode == 2, proc.stderr
        lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("switchboard:")]
        assert len(lines) == 1 and needle in lines[0], proc.stderr
        assert "Traceback" not in proc.stderr


def test_worker_plans_keep_every_composed_policy():
    cluster = cluster_of("+router=round_robin", "cluster.replicas=2", "+policy=lpm", "+admission=max_queue")
    for w in cluster.workers:
        assert {"policy", "admission"} <= set(w.policies)
        assert dataclasses.replace(w, sglang={}, cpu_threads=1) == dataclasses.replace(
            cluster.workers[0], sglang={}, cpu_threads=1)
