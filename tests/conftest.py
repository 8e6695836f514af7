"""Test tiers by folder; each folder's tests carry its marker.

==============  ==========  ================================================
folder          marker      what runs
==============  ==========  ================================================
``policies/``   ``policy``  pure policies on hand-built views (no torch, no SGLang)
``config/``     ``config``  composition, the kinds registry, the CLI, the model cache
``seams/``      ``seam``    SGLang seams on real SGLang classes, no model
``sim/``        ``sim``     the simulator and the replay harness (fake servers)
``kernels/``    ``kernel``  kernels against their torch references, references against PEFT
``live/``       ``server``  real CPU servers (minutes; they share server starts)
==============  ==========  ================================================

``pytest -m "not server"`` skips the live tier; ``pytest tests/sim`` runs one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

#: The repository root (tests run commands from there).
REPO = Path(__file__).resolve().parents[1]

#: Marker of each tier folder.
TIER_MARKERS = {"policies": "policy", "config": "config", "seams": "seam", "sim": "sim",
                "kernels": "kernel", "live": "server"}


#: The live modules that use the session's ``stock_server``: one xdist work unit,
#: so one stock server per run (``pytest_xdist_make_scheduler``).
STOCK_GROUP = "live-stock"
STOCK_MODULES = frozenset({"tests/live/test_live_server.py", "tests/live/test_server_default.py",
                           "tests/live/test_server_leap.py", "tests/live/test_server_penelope.py"})


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> Iterator[None]:
    """Mark every test with its tier folder's marker; check ``STOCK_MODULES``.

    NOTE: under ``pytest -n N`` (``make test``) a worker runs the live tests
    first (the stock unit first of all: the longest), so the short tests fill
    the other worker's gaps at the end; without xdist the order is the
    collection's."""
    root = Path(__file__).resolve().parent
    users = set()
    for item in items:
        rel = Path(str(item.path)).resolve().relative_to(root)
        marker = TIER_MARKERS.get(rel.parts[0])
        if marker is not None:
            item.add_marker(marker)
        if "stock_server" in getattr(item, "fixturenames", ()):
            users.add(f"tests/{rel.as_posix()}")
    if users - STOCK_MODULES:
        raise pytest.UsageError(f"add {sorted(users - STOCK_MODULES)} to STOCK_MODULES in tests/conftest.py: "
                                "modules using stock_server share one xdist work unit")
    yield
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: 0 if _unit(item.nodeid) == STOCK_GROUP else 1 if item.get_closest_marker("server")
                   else 2)


def _unit(nodeid: str) -> str:
    """A test's xdist work unit: its module, or ``STOCK_GROUP``."""
    module = nodeid.split("::", 1)[0]
    return STOCK_GROUP if module in STOCK_MODULES else module


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``pytest -n N``: whole modules per worker (``_unit``), in collection order.

    NOTE: a module's fixtures (its server) then start once per run. Not
    xdist's ``loadgroup``: it marks groups by editing ``item._nodeid``, which
    pytest 9 no longer reads (groups are silently ignored)."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

    config.option.loadscopereorder = False  # NOTE: keep the workers' order (live units first)
    return ModuleScheduling(config, log)


def pytest_configure(config: pytest.Config) -> None:
    from tests.data import MARKER

    config.addinivalue_line("markers", f"{MARKER}(*paths): reads trace data; missing, it fails under CI=true, "
                                       "else skips (tests/data.py)")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Trace data a test needs (``tests.data.needs_data``): checked before its fixtures load it."""
    from tests.data import MARKER, check_data

    for mark in item.iter_markers(MARKER):
        check_data(mark.args)
