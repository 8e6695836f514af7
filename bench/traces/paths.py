"""Where trace files live: the data root and per-trace paths.

Traces are read in place, never copied. The data root is, first match wins:
the config key ``data_root``, the environment variable ``SWITCHBOARD_DATA``,
then ``<repo>/../shared/data`` (the workspace's shared data folder, found
relative to this package, so no machine path is written down anywhere).
A trace's ``path`` may be absolute or relative to the data root.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Environment variable naming the data root.
DATA_ROOT_ENV = "SWITCHBOARD_DATA"

#: The repository checkout this package belongs to.
REPO_ROOT = Path(__file__).resolve().parents[2]


def default_data_root() -> Path:
    """``$SWITCHBOARD_DATA`` if set, else ``<repo>/../shared/data``."""
    env = os.environ.get(DATA_ROOT_ENV)
    if env:
        return Path(env).expanduser()
    return REPO_ROOT.parent / "shared" / "data"


def resolve_data_root(configured: str | None) -> Path:
    """The data root for a run (``configured`` wins over the defaults)."""
    return Path(configured).expanduser() if configured else default_data_root()


def resolve_trace_path(path: str, data_root: Path) -> Path:
    """``path`` made absolute against ``data_root``; raises if it is missing."""
    p = Path(path).expanduser()
    if not p.is_absolute():
        p = data_root / p
    if not p.exists():
        raise FileNotFoundError(
            f"trace data not found: {p} (set trace.path=, data_root= or ${DATA_ROOT_ENV})"
        )
    return p
