"""Trace data the tests read in place, and the one rule for when it is missing.

The data root is ``bench.traces.paths.default_data_root()``: ``$SWITCHBOARD_DATA``,
else ``<repo>/../shared/data``. A test (or a module, through ``pytestmark``) that
reads it says so with ``needs_data(path, ...)``; before its fixtures run
(``tests/conftest.py``), a missing path

* **fails** it under CI (``CI=true``, which CI services set): a CI run without
  the data must not pass green by skipping what it could not check;
* skips it elsewhere (a checkout without the shared data).

Both messages name every missing path.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.traces.paths import DATA_ROOT_ENV, default_data_root

#: The marker ``needs_data`` puts on a test; ``tests/conftest.py`` checks it.
MARKER = "needs_data"


def in_ci() -> bool:
    """Whether this run is a CI run (``CI`` set to true, as CI services do)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def needs_data(*paths: Path) -> pytest.MarkDecorator:
    """Mark a test (or a module, as ``pytestmark``) as reading ``paths`` under the data root."""
    return getattr(pytest.mark, MARKER)(*paths)


def check_data(paths: tuple[Path, ...]) -> None:
    """Fail (under CI) or skip (elsewhere) unless every path in ``paths`` exists."""
    missing = [str(p) for p in paths if not Path(p).exists()]
    if not missing:
        return
    what = (f"trace data missing: {', '.join(missing)} (data root {default_data_root()}: "
            f"${DATA_ROOT_ENV} or <repo>/../shared/data)")
    if in_ci():
        pytest.fail(f"{what}; CI=true, so missing data fails instead of skipping", pytrace=False)
    pytest.skip(what)
