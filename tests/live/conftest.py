"""Fixtures of the live tier: the default checkpoint and real Switchboard servers on CPU.

NOTE: starting a server takes most of a live test's time; modules share one
server (``module_server``) and every server is stopped at session end.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.live.server import ServerProcess, ServerStartError

__all__ = ["module_server"]


@pytest.fixture(scope="session")
def checkpoint() -> Path:
    """The default model's verified checkpoint (converted once per machine)."""
    from omegaconf import OmegaConf

    from compose.config import compose
    from compose.model import ensure_default_model
    from compose.schema import ModelSource

    cfg = compose([])
    return ensure_default_model(ModelSource(**OmegaConf.to_container(cfg.model.source)))


@pytest.fixture(scope="session")
def start_server(checkpoint, tmp_path_factory):
    """Factory: start a server with overrides; every server is stopped at session end."""
    started: list[ServerProcess] = []

    def start(*overrides: str) -> ServerProcess:
        log = tmp_path_factory.mktemp("server") / "server.log"
        server = ServerProcess(list(overrides), log)
        started.append(server)
        try:
            return server.start()
        except ServerStartError as exc:
            pytest.fail(str(exc))

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
