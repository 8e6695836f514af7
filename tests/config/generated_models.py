"""Helpers of the generated-model tests (``model=sdar_tiny``, ``model=lfm2_tiny``).

The tokenizer donor is the default model's real checkpoint (converted once per
machine); a generated checkpoint is built into a temporary cache with the donor
linked into it, the way the server builds it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from compose import model as model_cache
from compose.config import compose
from compose.schema import ModelSource


def source_of(*overrides: str) -> ModelSource:
    return ModelSource(**OmegaConf.to_container(compose(list(overrides)).model.source))  # type: ignore[arg-type]


def manifest(path: Path) -> dict[str, Any]:
    found: dict[str, Any] = json.loads((path / model_cache.MANIFEST).read_text())
    return found


def cache_with_donor(root: Path, donor: Path) -> Path:
    """A fresh cache directory at ``root`` whose donor checkpoint is ``donor`` (linked)."""
    (root / "models").mkdir(parents=True)
    (root / "models" / donor.name).symlink_to(donor, target_is_directory=True)
    return root


def build_in_fresh_cache(donor: Path, tmp_path_factory: pytest.TempPathFactory, model: str) -> Iterator[Path]:
    """``model=<model>``'s checkpoint, built the way the server builds it, in a fresh cache."""
    cache = cache_with_donor(tmp_path_factory.mktemp("cache"), donor)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SWITCHBOARD_CACHE", str(cache))
        path = model_cache.ensure_default_model(source_of(f"model={model}"))
        assert path.parent == cache / "models" and model_cache.verify_checkpoint(path) is None
        yield path
