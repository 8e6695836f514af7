"""The unit's supervisor with stand-in processes: restarts, failure, stop, no orphans.

The workers and the gateway are tiny HTTP servers (``/health``, ``/readiness``)
started exactly as the real ones are (``server.supervisor``), so the restart and
failure rules run in seconds; the live tier checks them with SGLang and SMG.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import psutil
import pytest

from bench.live.server import free_port
from tests.conftest import REPO

pytestmark = pytest.mark.config

#: Serves 200 on every GET at the port of its plan (a worker) or of argv[1] (the gateway).
FAKE = textwrap.dedent("""
    import json, os, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    port = int(sys.argv[1]) if len(sys.argv) > 1 else json.load(open(os.environ["SWITCHBOARD_PLAN"]))["sglang"]["port"]
    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
        def log_message(self, *a): pass
    HTTPServer(("127.0.0.1", port), H).serve_forever()
""")

DRIVER = textwrap.dedent("""
    import dataclasses, logging, sys
    logging.basicConfig(level="INFO", format="%(message)s")
    import server.supervisor as sup
    from compose.config import compose
    from server.cluster.plan import resolve_cluster
    from server.resolve import resolve
    fake, port, restarts, grace = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    cfg = compose(["server.device=cpu", "+router=round_robin", "cluster.replicas=2", f"server.port={port}",
                   f"cluster.max_restarts={restarts}", f"server.shutdown_grace_s={grace}"])
    plan = resolve(cfg)
    cluster = resolve_cluster(cfg, plan)
    sup.LAUNCHER = [sys.executable, fake]
    gateway = dataclasses.replace(cluster.gateway, argv=(sys.executable, fake, str(port)))
    sys.exit(sup.supervise(plan, dataclasses.replace(cluster, gateway=gateway)))
""")


class Unit:
    def __init__(self, tmp_path: Path, restarts: int, grace: float = 5.0) -> None:
        (tmp_path / "fake.py").write_text(FAKE)
        (tmp_path / "driver.py").write_text(DRIVER)
        self.port = free_port(span=3)  # the gateway, then two workers
        self.log = tmp_path / "unit.log"
        self.proc = subprocess.Popen(
            [sys.executable, str(tmp_path / "driver.py"), str(tmp_path / "fake.py"), str(self.port),
             str(restarts), str(grace)], cwd=REPO, stdout=self.log.open("w"), stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONPATH=str(REPO)))
        self.wait_for(lambda: "ready: " in self.text(), "the unit ready")

    def text(self) -> str:
        return self.log.read_text()

    def wait_for(self, cond, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            assert self.proc.poll() is None or what.startswith("exit"), f"unit exited:\n{self.text()}"
            assert time.monotonic() < deadline, f"no {what} after {timeout}s:\n{self.text()}"
            time.sleep(0.1)

    def children(self) -> list[psutil.Process]:
        return psutil.Process(self.proc.pid).children(recursive=True)

    def worker(self, i: int) -> psutil.Process:
        """The stand-in of worker ``i`` (the one whose plan names its port)."""
        want = f"plan-{self.port + 1 + i}.json"
        for p in self.children():
            if p.environ().get("SWITCHBOARD_PLAN", "").endswith(want):
                return p
        raise AssertionError(f"no worker {i}")

    def gateway(self) -> psutil.Process:
        return next(p for p in self.children() if p.cmdline()[-1] == str(self.port))


def healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_dead_worker_is_restarted_then_the_unit_fails_loudly(tmp_path):
    unit = Unit(tmp_path, restarts=1)
    first = unit.worker(1)
    os.killpg(first.pid, signal.SIGKILL)
    unit.wait_for(lambda: "restarting it (restart 1 of 1)" in unit.text(), "restart")
    unit.wait_for(lambda: healthy(unit.port + 2), "worker 1 healthy again")
    assert unit.worker(1).pid != first.pid
    survivors = unit.children()
    os.killpg(unit.worker(0).pid, signal.SIGKILL)  # the second death: no restarts left
    assert unit.proc.wait(timeout=30) == 1
    assert "unit failed: worker 0 (port" in unit.text() and "after 1 of 1 restarts" in unit.text()
    assert not [p for p in survivors if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_the_gateway_dying_stops_the_unit(tmp_path):
    unit = Unit(tmp_path, restarts=3)
    procs = unit.children()
    unit.gateway().kill()
    assert unit.proc.wait(timeout=30) == 1
    assert "unit failed: the gateway exited" in unit.text()
    assert not [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_one_signal_stops_every_process_within_the_grace(tmp_path, sig):
    unit = Unit(tmp_path, restarts=3, grace=3.0)
    procs = unit.children()
    assert len(procs) == 3
    t0 = time.monotonic()
    unit.proc.send_signal(sig)
    assert unit.proc.wait(timeout=10) == 0
    assert time.monotonic() - t0 < 3.0 + 1.0
    assert not [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert json.dumps(unit.text()).count("restarting") == 0
