"""The strict ``sgl_kernel`` stand-in: SGLang imports work, and any kernel use fails loudly, naming it."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest

from tests.seams import sglang_env  # noqa: F401  (installs the sgl_kernel stub)

# isort: split
# (SGLang only after the stub)
import sgl_kernel

from server.sglang.launch.env import PLAN_ENV, SITE_DIR
from server.sglang.launch.stub import DECLINED, PROVIDED, StandInKernel, StandInKernelCalled
from tests.conftest import REPO

#: Where the server's SGLang processes start: what they import at module level.
SERVER_ENTRY_MODULES = (
    "sglang.srt.entrypoints.http_server",           # main process: HTTP, tokenizer manager
    "sglang.srt.managers.scheduler",                # scheduler process
    "sglang.srt.model_executor.model_runner",
    "sglang.srt.managers.detokenizer_manager",
    "sglang.srt.models.registry",                   # imports every model module, as at server start
    "sglang.srt.models.llama",                      # the default model
)

#: Run in a fresh interpreter with the server's CPU environment: the stand-in comes
#: from ``_site/sitecustomize.py`` and ``SGLANG_USE_CPU_ENGINE=1`` makes SGLang
#: import its CPU kernels, exactly as in a server's processes.
_PROBE = r"""
import importlib, json, logging, sys

skipped = []
class _Keep(logging.Handler):
    def emit(self, record):
        skipped.append(record.getMessage())
logging.getLogger("sglang.srt.models.registry").addHandler(_Keep(level=logging.WARNING))

from server.sglang.launch.stub import PROVIDED, StandInKernel, StandInKernelCalled

finders = [f"{type(f).__module__}.{type(f).__qualname__}" for f in sys.meta_path]
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
loader = type(sys.modules["sgl_kernel"].__spec__.loader)

holders, errors = {}, {}
for module, names in PROVIDED.items():
    kernels = importlib.import_module(module)
    for attr, importer in names.items():
        kernel = getattr(kernels, attr)
        holders[f"{module}.{attr}"] = any(v is kernel for v in vars(importlib.import_module(importer)).values())
        try:
            kernel()
        except StandInKernelCalled as exc:
            errors[f"{module}.{attr}"] = str(exc)
print(json.dumps({"finder": finders[0], "loader": f"{loader.__module__}.{loader.__qualname__}",
                  "holders": holders, "errors": errors,
                  "skipped_by_stub": [m for m in skipped if "sgl_kernel stand-in" in m]}))
"""


@pytest.fixture(scope="module")
def server_imports() -> dict:
    env = {k: v for k, v in os.environ.items() if k != PLAN_ENV}
    env.update(SGLANG_USE_CPU_ENGINE="1", SWITCHBOARD_STUB_SGL_KERNEL="1", CUDA_VISIBLE_DEVICES="",
               OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(SITE_DIR), str(REPO)]))
    proc = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(SERVER_ENTRY_MODULES)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"importing the server's SGLang modules under the stand-in failed:\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_server_imports_sglang_under_the_stand_in(server_imports):
    # sitecustomize put the finder first, before any SGLang import; SGLang got its sgl_kernel from it
    assert server_imports["finder"] == "server.sglang.launch.stub._StubFinder"
    assert server_imports["loader"] == "server.sglang.launch.stub._StubLoader"
    # every provided kernel is really imported by the SGLang module the data names (no stale entries)
    assert server_imports["holders"] == {f"{m}.{a}": True for m, names in PROVIDED.items() for a in names}
    # NOTE: SGLang's registry skips models that fail to import; none may fail because of the stand-in
    assert server_imports["skipped_by_stub"] == []


def test_a_kernel_sglang_imported_raises_naming_it_when_called(server_imports):
    for qualified, message in server_imports["errors"].items():
        assert message.startswith(f"sgl_kernel stand-in: '{qualified}' was called, but the CPU stand-in has no "
                                  f"kernels (it only satisfies SGLang's imports"), message
    assert len(server_imports["errors"]) == sum(len(names) for names in PROVIDED.values())


@pytest.mark.parametrize("name", sorted(PROVIDED["sgl_kernel"]))
def test_calling_a_provided_kernel_raises_naming_it(name):
    kernel = getattr(sgl_kernel, name)
    assert isinstance(kernel, StandInKernel)
    with pytest.raises(StandInKernelCalled, match=rf"^sgl_kernel stand-in: 'sgl_kernel\.{name}' was called"):
        kernel(1, 2, out=3)
    with pytest.raises(AttributeError, match=rf"'sgl_kernel\.{name}' is a stand-in kernel with no attribute 'default'"):
        kernel.default  # noqa: B018  (what a torch.ops-style call would read)


def test_an_unknown_attribute_raises_naming_it():
    with pytest.raises(AttributeError, match=r"^sgl_kernel stand-in: 'sgl_kernel\.fused_add_rmsnorm' is not provided"):
        sgl_kernel.fused_add_rmsnorm  # noqa: B018
    assert not hasattr(sgl_kernel, "silu_and_mul")
    with pytest.raises(ImportError, match=r"cannot import name 'gelu_and_mul' from 'sgl_kernel' \(<sgl_kernel stand-in"):
        from sgl_kernel import gelu_and_mul  # noqa: F401
    with pytest.raises(ModuleNotFoundError, match=r"^sgl_kernel stand-in: 'sgl_kernel\.elementwise' is not provided"):
        importlib.import_module("sgl_kernel.elementwise")


def test_declined_names_are_refused_so_sglang_takes_its_own_fallback():
    with pytest.raises(AttributeError, match=r"'sgl_kernel\.rmsnorm' is refused on purpose: sglang\.srt\.models"):
        sgl_kernel.rmsnorm  # noqa: B018
    for name in ("sgl_kernel.scalar_type", "sgl_kernel.allreduce"):
        assert name in DECLINED
        with pytest.raises(ModuleNotFoundError, match=rf"'{name}' is refused on purpose"):
            importlib.import_module(name)
    from sglang.srt.layers.quantization.utils import scalar_types

    assert scalar_types.uint4b8 == "uint4b8"  # SGLang's own stand-in for missing sgl_kernel scalar types


def test_a_provided_kernel_pickles_by_reference():
    import pickle

    kernel = sgl_kernel.copy_all_layer_kv_cache_cpu
    assert pickle.loads(pickle.dumps(kernel)) is kernel
