"""Shared fixtures: the default checkpoint and real Switchboard servers on CPU."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx
import psutil
import pytest

REPO = Path(__file__).resolve().parents[1]
SERVER_START_TIMEOUT_S = 900  # includes the one-time model conversion on a fresh machine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """``python -m server <overrides>`` on a free port, started and stopped like a user would."""

    def __init__(self, overrides: list[str], log_path: Path) -> None:
        self.port = free_port()
        self.overrides = [f"server.port={self.port}", *overrides]
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self.base_url = f"http://127.0.0.1:{self.port}"

    def start(self) -> "ServerProcess":
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "server", *self.overrides],
            cwd=REPO, env=env, stdout=self._log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(self.base_url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(1)
        self.stop()
        pytest.fail(f"server not healthy after {SERVER_START_TIMEOUT_S}s:\n{self.log_tail()}")

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_tail(self, n: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])

    def descendants(self) -> list[psutil.Process]:
        assert self.proc is not None
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> float:
        """Signal the supervisor; return seconds until it exited."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            return 0.0
        t0 = time.monotonic()
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            for p in [*self.descendants(), psutil.Process(self.proc.pid)]:
                p.kill()
            self.proc.wait()
        self._log.close()
        return time.monotonic() - t0


@pytest.fixture(scope="session")
def checkpoint() -> Path:
    """The default model's verified checkpoint (converted once per machine)."""
    from server.config import compose
    from server.model import ensure_default_model
    from server.schema import ModelSource
    from omegaconf import OmegaConf

    cfg = compose([])
    return ensure_default_model(ModelSource(**OmegaConf.to_container(cfg.model.source)))


@pytest.fixture(scope="session")
def start_server(checkpoint, tmp_path_factory):
    """Factory: start a server with overrides; every server is stopped at session end."""
    started: list[ServerProcess] = []

    def start(*overrides: str) -> ServerProcess:
        log = tmp_path_factory.mktemp("server") / "server.log"
        server = ServerProcess(list(overrides), log).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def module_server(*overrides: str):
    """A module-scoped fixture running one server for the module's tests."""

    @pytest.fixture(scope="module")
    def _server(start_server) -> Iterator[ServerProcess]:
        server = start_server(*overrides)
        yield server
        server.stop()

    return _server
