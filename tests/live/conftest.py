"""Fixtures of the live tier: the default checkpoint, its HF reference and real
Switchboard servers on CPU.

NOTE: starting a server takes most of a live test's time; a module shares one
server (``module_server``), the modules that need a plain reference server share
``stock_server``, and every server is stopped at session end.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.live.chat import HFReference
from bench.live.server import ServerProcess, ServerStartError

__all__ = ["module_server"]

#: The stock server: no policy of ours, SGLang's default pool (16k tokens, never full
#: here), one running request at a time so that queue order is observable.
#: NOTE: ``sleep_on_idle``: an idle SGLang scheduler otherwise busy-polls one core,
#: and this server stays up while the other modules' servers run on 2 cores.
STOCK = ("model.dtype=float32", "sglang.max_running_requests=1", "sglang.sleep_on_idle=true")


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
def hf(checkpoint, tmp_path_factory) -> HFReference:
    """HF transformers on the checkpoint (float32, one thread); its answers are memoized, and
    shared with the other test worker (files under this run's shared temporary folder)."""
    return HFReference(checkpoint, memo_dir=_run_folder(tmp_path_factory) / "hf-answers")


def _run_folder(tmp_path_factory) -> Path:
    """This pytest run's temporary folder, one for every xdist worker (each has its own below it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if base.name.startswith("popen-gw") else base


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


@pytest.fixture(scope="session")
def stock_server(start_server) -> ServerProcess:
    """One stock SGLang server (``STOCK``) shared by every module that needs a reference."""
    return start_server(*STOCK)


def module_server(*overrides: str):
    """A module-scoped fixture running one server for the module's tests."""

    @pytest.fixture(scope="module")
    def _server(start_server) -> Iterator[ServerProcess]:
        server = start_server(*overrides)
        yield server
        server.stop()

    return _server


@pytest.fixture(scope="session")
def lfm2_checkpoint():
    """``model=lfm2_tiny``'s checkpoint (generated once into the cache)."""
    from omegaconf import OmegaConf

    from compose.config import compose
    from compose.model import ensure_default_model
    from compose.schema import ModelSource

    cfg = compose(["model=lfm2_tiny"])
    return ensure_default_model(ModelSource(**OmegaConf.to_container(cfg.model.source)))


@pytest.fixture(scope="session")
def lfm2_hf(lfm2_checkpoint):
    """HF transformers on it (float32): the reference of the hybrid-model modules."""
    return HFReference(lfm2_checkpoint)
