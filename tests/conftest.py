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

from pathlib import Path

import pytest

#: The repository root (tests run commands from there).
REPO = Path(__file__).resolve().parents[1]

#: Marker of each tier folder.
TIER_MARKERS = {"policies": "policy", "config": "config", "seams": "seam", "sim": "sim",
                "kernels": "kernel", "live": "server"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test with its tier folder's marker."""
    root = Path(__file__).resolve().parent
    for item in items:
        tier = Path(str(item.path)).resolve().relative_to(root).parts[0]
        marker = TIER_MARKERS.get(tier)
        if marker is not None:
            item.add_marker(marker)


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
