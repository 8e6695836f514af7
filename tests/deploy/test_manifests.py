"""deploy/k8s: every overlay renders, validates against the Kubernetes schema, and wires up.

The pods' launch scripts are run for real (bash, with a stand-in `python` that prints
its arguments), and the arguments they would pass to `python -m server` are composed
with the project's own config: the ConfigMap overrides are valid Switchboard overrides.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from compose.config import ConfigError, compose
from compose.specs import specs_from_config
from tests.deploy.kustomize import render

pytestmark = pytest.mark.config

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
OVERLAYS = ("cpu", "gpu")
# The oldest Kubernetes the manifests target and the newest schema kubernetes-validate ships.
K8S_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
OVERRIDES_DIR = "/etc/switchboard/overrides.d"  # where both launch scripts read overrides
WORKER_LABEL = ("app", "switchboard-worker")
Obj = dict[str, Any]


@pytest.fixture(scope="module", params=OVERLAYS)
def overlay(request: pytest.FixtureRequest) -> tuple[str, list[Obj]]:
    return request.param, render(K8S / "overlays" / request.param)


def one(objs: list[Obj], kind: str, name: str) -> Obj:
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def container(objs: list[Obj], deployment: str) -> Obj:
    containers = one(objs, "Deployment", deployment)["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def port_number(c: Obj, port: int | str) -> int:
    if isinstance(port, int):
        return port
    return next(p["containerPort"] for p in c["ports"] if p["name"] == port)


def launch_argv(objs: list[Obj], deployment: str, tmp: Path) -> list[str]:
    """Run the container's launch script with its ConfigMap; the argv it gives python."""
    pod = one(objs, "Deployment", deployment)["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["command"] == ["bash", "-c"] and len(c["args"]) == 1
    mount = next(m for m in c["volumeMounts"] if m["mountPath"] == OVERRIDES_DIR)
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    config = one(objs, "ConfigMap", volume["configMap"]["name"])
    (tmp / "overrides.d").mkdir()
    for key, text in config["data"].items():
        (tmp / "overrides.d" / key).write_text(text)
    (tmp / "bin").mkdir()
    fake = tmp / "bin" / "python"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\0" "$a"; done\n')
    fake.chmod(0o755)
    env = {"PATH": f"{tmp / 'bin'}:{os.environ['PATH']}"}
    for var in c.get("env", []):
        env[var["name"]] = var.get("value", f"ns-of-{deployment}")  # fieldRef: the pod namespace
    assert OVERRIDES_DIR in c["args"][0]
    script = c["args"][0].replace(OVERRIDES_DIR, str(tmp / "overrides.d"))
    out = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, check=True).stdout
    return out.split("\0")[:-1]


def compose_launch(argv: list[str]) -> Any:
    """What `python -m server` does with ``argv`` before touching a model: compose, then
    validate every chosen policy's parameters against its class."""
    assert argv[:2] == ["-m", "server"]
    cfg = compose(argv[2:])
    specs_from_config(cfg)
    return cfg


def test_every_object_is_valid_kubernetes(overlay: tuple[str, list[Obj]]) -> None:
    _, objs = overlay
    kinds = sorted(o["kind"] for o in objs)
    assert kinds == ["ConfigMap", "ConfigMap", "Deployment", "Deployment", "Role", "RoleBinding",
                     "Service", "ServiceAccount"]
    for version in K8S_VERSIONS:
        for obj in objs:
            kubernetes_validate.validate(obj, version, strict=True)


def test_schema_validation_rejects_a_broken_object(overlay: tuple[str, list[Obj]]) -> None:
    # NOTE: guards the check above: a misspelled field must fail strict validation.
    worker = one(overlay[1], "Deployment", "switchboard-worker")
    broken = yaml.safe_load(yaml.safe_dump(worker))
    broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSIONS[0], strict=True)


def test_worker_launch_composes(overlay: tuple[str, list[Obj]], tmp_path: Path) -> None:
    name, objs = overlay
    cfg = compose_launch(launch_argv(objs, "switchboard-worker", tmp_path))
    assert cfg.server.host == "0.0.0.0"
    assert cfg.server.port == port_number(container(objs, "switchboard-worker"), "http") == 30000
    assert cfg.server.device.value == {"cpu": "cpu", "gpu": "cuda"}[name]
    assert "policy" in cfg and "admission" in cfg  # the base ConfigMap's policies arrived


def test_a_bad_override_line_fails(overlay: tuple[str, list[Obj]], tmp_path: Path) -> None:
    # NOTE: guards the two tests around it: one bad line anywhere in a ConfigMap must fail.
    objs = copy.deepcopy(overlay[1])
    one(objs, "ConfigMap", "switchboard-worker-overrides")["data"]["30-bad"] = "admission.max_waiting=abc\n"
    with pytest.raises(ConfigError, match="admission.max_waiting"):
        compose_launch(launch_argv(objs, "switchboard-worker", tmp_path))


def test_gateway_launch_composes_and_finds_workers(overlay: tuple[str, list[Obj]], tmp_path: Path) -> None:
    _, objs = overlay
    cfg = compose_launch(launch_argv(objs, "switchboard-gateway", tmp_path))
    assert "router" in cfg
    assert cfg.cluster.discovery.value == "kubernetes"
    assert cfg.cluster.namespace == "ns-of-switchboard-gateway"
    assert cfg.server.port == port_number(container(objs, "switchboard-gateway"), "http")
    # The selector picks exactly the worker pods, on the port they serve.
    worker = one(objs, "Deployment", "switchboard-worker")
    labels = worker["spec"]["template"]["metadata"]["labels"]
    selector = dict(term.split("=", 1) for term in cfg.cluster.selector.split(","))
    assert selector and all(labels.get(k) == v for k, v in selector.items())
    assert labels[WORKER_LABEL[0]] == WORKER_LABEL[1]
    assert cfg.cluster.worker_port == port_number(container(objs, "switchboard-worker"), "http")
    gateway_labels = one(objs, "Deployment", "switchboard-gateway")["spec"]["template"]["metadata"]["labels"]
    assert not all(gateway_labels.get(k) == v for k, v in selector.items()), "gateway would route to itself"
    # What the pod then runs: the SMG command from the router binding, checked by SMG's own parser.
    from server.cluster.plan import resolve_cluster
    from server.resolve import resolve

    cluster = resolve_cluster(cfg, resolve(cfg))
    argv = list(cluster.gateway.argv)
    assert cluster.workers == () and "--service-discovery" in argv and "--worker-urls" not in argv
    assert argv[argv.index("--selector") + 1:argv.index("--service-discovery-port")] == \
        [f"{k}={v}" for k, v in selector.items()]
    assert argv[argv.index("--port") + 1] == str(cfg.server.port)


def test_gateway_may_watch_pods(overlay: tuple[str, list[Obj]]) -> None:
    _, objs = overlay
    account = one(objs, "Deployment", "switchboard-gateway")["spec"]["template"]["spec"]["serviceAccountName"]
    one(objs, "ServiceAccount", account)
    binding = one(objs, "RoleBinding", account)
    assert {"kind": "ServiceAccount", "name": account} in binding["subjects"]
    role = one(objs, binding["roleRef"]["kind"], binding["roleRef"]["name"])
    pods = [r for r in role["rules"] if "" in r["apiGroups"] and "pods" in r["resources"]]
    assert pods and {"get", "list", "watch"} <= set(pods[0]["verbs"])


def test_service_reaches_the_gateway(overlay: tuple[str, list[Obj]]) -> None:
    _, objs = overlay
    service = one(objs, "Service", "switchboard")
    template = one(objs, "Deployment", "switchboard-gateway")["spec"]["template"]
    assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()
    gateway = container(objs, "switchboard-gateway")
    assert port_number(gateway, service["spec"]["ports"][0]["targetPort"]) == 30000


def test_probes(overlay: tuple[str, list[Obj]]) -> None:
    _, objs = overlay
    for deployment, paths in (("switchboard-worker", {"/health"}),
                              ("switchboard-gateway", {"/health", "/liveness", "/readiness"})):
        c = container(objs, deployment)
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            get = c[probe]["httpGet"]
            assert get["path"] in paths, (deployment, probe)
            assert port_number(c, get["port"]) == 30000, (deployment, probe)
    # SGLang's /health is the worker's; a worker probe on the gateway's paths would 404.
    assert container(objs, "switchboard-worker")["livenessProbe"]["httpGet"]["path"] == "/health"


def test_both_deployments_take_the_api_key_from_one_secret(overlay: tuple[str, list[Obj]]) -> None:
    """The key reaches the workers and the gateway as ``$SWITCHBOARD_API_KEY`` from the same
    Secret key (required: a pod without it does not start), never from an override line."""
    from server.auth import API_KEY_ENV, OPEN_PATHS

    _, objs = overlay
    refs = []
    for deployment in ("switchboard-worker", "switchboard-gateway"):
        env = {v["name"]: v for v in container(objs, deployment).get("env", [])}
        ref = env[API_KEY_ENV]["valueFrom"]["secretKeyRef"]
        assert not ref.get("optional", False)
        refs.append((ref["name"], ref["key"]))
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert container(objs, deployment)[probe]["httpGet"]["path"] in OPEN_PATHS  # probes need no key
    assert refs[0] == refs[1]
    overrides = "\n".join(o["data"][k] for o in objs if o["kind"] == "ConfigMap" for k in o["data"])
    assert "api_key" not in overrides


def test_resources(overlay: tuple[str, list[Obj]]) -> None:
    name, objs = overlay
    worker = container(objs, "switchboard-worker")["resources"]
    gpus = {k: v.get("nvidia.com/gpu") for k, v in worker.items()}
    assert gpus == ({"requests": 1, "limits": 1} if name == "gpu" else {"requests": None, "limits": None})
    assert "nvidia.com/gpu" not in str(container(objs, "switchboard-gateway")["resources"])
    images = {container(objs, d)["image"] for d in ("switchboard-worker", "switchboard-gateway")}
    assert len(images) == 1, "the gateway runs the workers' image"
    assert images != {"switchboard"}, "the overlay sets the image"


def test_grace_period_covers_the_server_shutdown(overlay: tuple[str, list[Obj]]) -> None:
    _, objs = overlay
    grace = compose([]).server.shutdown_grace_s
    for deployment in ("switchboard-worker", "switchboard-gateway"):
        pod = one(objs, "Deployment", deployment)["spec"]["template"]["spec"]
        assert pod["terminationGracePeriodSeconds"] > grace


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed (compared only where present)")
def test_renderer_agrees_with_kubectl(overlay: tuple[str, list[Obj]]) -> None:
    name, objs = overlay
    out = subprocess.run(["kubectl", "kustomize", str(K8S / "overlays" / name)],
                         capture_output=True, text=True, check=True).stdout
    key = lambda o: (o["kind"], o["metadata"]["name"])  # noqa: E731
    assert sorted(objs, key=key) == sorted((d for d in yaml.safe_load_all(out) if d), key=key)
