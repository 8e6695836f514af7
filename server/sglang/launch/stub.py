"""A stand-in ``sgl_kernel`` for CPU-only machines (SGLang's own CPU-test approach).

The PyPI ``sglang-kernel`` wheel holds CUDA kernels only and fails to import
without ``libcuda``; yet with ``SGLANG_USE_CPU_ENGINE=1`` SGLang imports it
unconditionally. SGLang's CPU unit tests swap in a ``MagicMock`` module
(``sglang.test.test_utils.maybe_stub_sgl_kernel``); this finder does the same
for every process, before the first SGLang import. On the CPU path nothing in
the stub is ever called (the model runs on SGLang's torch-native kernels).

NOTE: install only on CPU; on a CUDA machine the real ``sgl_kernel`` is used.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from unittest.mock import MagicMock

STUBBED_TOP_LEVEL = ("sgl_kernel",)


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        name = module.__name__
        module.__getattr__ = lambda attr: MagicMock(name=f"{name}.{attr}")  # type: ignore[method-assign]


class _StubFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):  # type: ignore[no-untyped-def]
        if fullname.split(".")[0] in STUBBED_TOP_LEVEL:
            return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)
        return None


def install_sgl_kernel_stub() -> None:
    """Serve stub modules for ``sgl_kernel`` in this process (idempotent)."""
    if not any(isinstance(f, _StubFinder) for f in sys.meta_path):
        for name in [m for m in sys.modules if m.split(".")[0] in STUBBED_TOP_LEVEL]:
            del sys.modules[name]
        sys.meta_path.insert(0, _StubFinder())
