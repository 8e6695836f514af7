"""Runs SGLang (one server, or N workers behind SMG) and takes it all down cleanly.

One server: SGLang in its own process group; its exit status is ours.

A unit (``+router=``): N workers, each one SGLang server on loopback, and the
SMG gateway in front of them on ``server.port``, started once every worker
answers ``/health``. A worker that dies is reported and restarted on the same
port (the gateway retries its requests on the others meanwhile) up to
``cluster.max_restarts`` times in all; one more death, or the gateway's, stops
the whole unit with exit status 1. With ``cluster.discovery=kubernetes`` the
unit is the gateway alone.

NOTE: on Ctrl-C/SIGTERM (or a failure) every child gets SIGTERM, then its
whole process group SIGKILL after ``shutdown_grace_s``; every group is killed
once more on the way out, and each child gets SIGTERM if the supervisor dies
(``server.process.Child``), so nothing outlives the unit.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
from pathlib import Path

from server.auth import Keys, put_keys
from server.cluster.plan import ClusterPlan
from server.process import Child, StopSignal, healthy
from server.resolve import LaunchPlan
from server.sglang.launch.env import child_env

log = logging.getLogger("switchboard")
LAUNCHER = [sys.executable, "-m", "server.sglang.launch.main"]
EXIT_UNIT_FAILED = 1
POLL_S = 0.2


def _sglang_child(name: str, plan: LaunchPlan, run_dir: Path, keys: Keys, cpus: tuple[int, ...] = ()) -> Child:
    plan_path = run_dir / f"plan-{plan.sglang['port']}.json"
    plan_path.write_text(plan.to_json())  # NOTE: holds no key (server.auth)
    env = child_env(plan, plan_path)
    put_keys(keys, env)
    return Child(name, LAUNCHER, env=env, cpus=cpus)


def _gateway_child(cluster: ClusterPlan, keys: Keys) -> Child:
    env = dict(os.environ)
    put_keys(keys, env)
    return Child("gateway", cluster.gateway.argv, env=env)


def _wait_all(children: list[Child], stop: StopSignal) -> None:
    """Wait for every child to exit, killing all at the stop deadline."""
    while any(c.poll() is None for c in children):
        if stop.overdue():
            log.warning("not all stopped in time; killing %s",
                        ", ".join(c.name for c in children if c.poll() is None))
            break
        time.sleep(POLL_S)


def supervise(plan: LaunchPlan, cluster: ClusterPlan | None = None, keys: Keys | None = None) -> int:
    """Run ``plan`` (or ``cluster``) until it exits or we are told to stop; return an exit code.

    ``keys`` (``server.auth``) reach each SGLang process and the gateway in its environment."""
    keys = keys or Keys()
    with tempfile.TemporaryDirectory(prefix="switchboard-run-") as tmp:
        if cluster is None:
            return _supervise_one(_sglang_child("SGLang", plan, Path(tmp), keys), plan.shutdown_grace_s)
        return _Unit(cluster, Path(tmp), plan.shutdown_grace_s, keys).run()


def _supervise_one(child: Child, grace_s: float) -> int:
    with StopSignal(grace_s, child.terminate) as stop:
        child.start()
        try:
            while child.poll() is None and not stop.overdue():
                time.sleep(POLL_S)
            if stop.overdue():
                log.warning("%s did not exit in time; killing it", child.name)
        finally:
            child.kill()
    code = child.poll()
    return 0 if stop.stopping else (code if code is not None else EXIT_UNIT_FAILED)


class _Unit:
    """The workers and the gateway of one ``+router=`` command."""

    def __init__(self, cluster: ClusterPlan, run_dir: Path, grace_s: float, keys: Keys) -> None:
        self.cluster = cluster
        self.grace_s = grace_s
        self.workers = [
            _sglang_child(f"worker {i} (port {w.sglang['port']})", w, run_dir, keys,
                          cluster.cpu_sets[i] if cluster.cpu_sets else ())
            for i, w in enumerate(cluster.workers)]
        self.gateway = _gateway_child(cluster, keys)
        self.restarts = 0
        self.failed = False
        self._next_probe = 0.0

    @property
    def children(self) -> list[Child]:
        return [*self.workers, self.gateway]

    def _stop_all(self) -> None:
        for child in self.children:
            child.terminate()

    def _fail(self, stop: StopSignal, message: str, *args: object) -> None:
        log.error("unit failed: " + message + "; stopping every process", *args)
        self.failed = True
        stop.request()

    def _check_workers(self, stop: StopSignal) -> None:
        for worker in self.workers:
            code = worker.poll()
            if code is None:
                continue
            worker.kill()  # NOTE: its scheduler processes must not hold the port
            if self.restarts >= self.cluster.max_restarts:
                self._fail(stop, "%s exited with status %s after %d of %d restarts",
                           worker.name, code, self.restarts, self.cluster.max_restarts)
                return
            self.restarts += 1
            log.error("%s exited with status %s; restarting it (restart %d of %d)",
                      worker.name, code, self.restarts, self.cluster.max_restarts)
            worker.start()

    def _start_gateway_when_ready(self) -> None:
        if self.gateway.proc is not None or time.monotonic() < self._next_probe:
            return
        self._next_probe = time.monotonic() + 1.0
        if all(healthy(url) for url in self.cluster.gateway.worker_urls):
            log.info("%d worker(s) healthy; starting the gateway: %s", len(self.workers),
                     " ".join(self.cluster.gateway.argv[1:]))
            self.gateway.start()

    def run(self) -> int:
        with StopSignal(self.grace_s, self._stop_all) as stop:
            try:
                for worker in self.workers:
                    worker.start()
                announced = False
                while not stop.stopping:
                    self._check_workers(stop)
                    self._start_gateway_when_ready()
                    code = self.gateway.poll()
                    if code is not None:
                        self._fail(stop, "the gateway exited with status %s", code)
                    elif not announced and self.gateway.proc is not None \
                            and healthy(self.cluster.gateway.url, "/readiness"):
                        log.info("ready: %s routes to %s", self.cluster.gateway.url,
                                 ", ".join(self.cluster.gateway.worker_urls) or "discovered workers")
                        announced = True
                    time.sleep(POLL_S)
                _wait_all(self.children, stop)
            finally:
                for child in self.children:
                    child.kill()
        return EXIT_UNIT_FAILED if self.failed else 0
