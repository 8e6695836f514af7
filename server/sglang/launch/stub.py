"""A strict stand-in ``sgl_kernel`` for CPU-only machines.

The PyPI ``sglang-kernel`` wheel holds CUDA kernels only and fails to import
without ``libcuda``; yet with ``SGLANG_USE_CPU_ENGINE=1`` SGLang imports a few
of its CPU kernels at module level, with no fallback. SGLang's own CPU tests
swap in a ``MagicMock`` module (``sglang.test.test_utils.maybe_stub_sgl_kernel``);
that answers *every* name and turns each missing kernel into a silent no-op.
This stand-in is strict instead:

* it provides exactly the names in :data:`PROVIDED`, which SGLang imports
  unguarded; each is a :class:`StandInKernel` whose *call* raises
  :class:`StandInKernelCalled` naming the kernel (on the CPU path nothing calls
  them: the model runs on SGLang's torch-native kernels);
* the names in :data:`DECLINED` SGLang imports inside ``try/except ImportError``:
  they are refused on purpose, so SGLang takes its own no-kernel fallback;
* any other attribute raises ``AttributeError`` (``from sgl_kernel import x``:
  ``ImportError``) naming it, and any other submodule ``ModuleNotFoundError``.

Its ``__file__`` is :data:`LOCATION`, not a path: Python's ``cannot import name
... from 'sgl_kernel' (...)`` then points here. ``torch.ops.sgl_kernel``
is not registered (SGLang probes it with ``hasattr`` and takes its non-AMX
path; models that need those ops at import are skipped by SGLang's registry,
as without the stand-in).

How :data:`PROVIDED` and :data:`DECLINED` were produced (SGLang 0.5.23,
December): a temporary recording stand-in (MagicMock modules that appended
every module import, module-attribute lookup, child-attribute lookup and call,
with the importing SGLang module and line, to a file) was installed through
``sitecustomize`` in every SGLang process of two real CPU servers
(``model.dtype=float32``, and ``+policy=leap +admission=basin +cache=lru``),
each serving two chats, one ``/generate``, one streamed chat and ``/metrics``,
and in the whole ``tests/seams`` tier. Per server start it saw, in 3 processes
and all at import, 266 module-attribute lookups and 30 lookups on the returned
objects, and no call of anything SGLang imported: 108 lookups were the stdlib's
``inspect`` reading ``__file__`` (the only calls were on that value), 108 were
``scalar_type.ScalarType``/``scalar_types`` (guarded), 2 ``rmsnorm`` (guarded)
and 48 the 8 ``*_cpu`` kernels below (twice per process); ``allreduce`` was
imported as a module (guarded). The seams tier (no ``SGLANG_USE_CPU_ENGINE``)
touched only ``sgl_kernel.scalar_type``. Re-record after an SGLang upgrade; an unguarded
name SGLang newly imports fails the import with a message naming it
(``tests/seams/test_stub.py`` imports what the server imports).

NOTE: install only on CPU; on a CUDA machine the real ``sgl_kernel`` is used.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any, NoReturn

STUBBED_TOP_LEVEL = ("sgl_kernel",)

#: Module -> names SGLang imports from it unguarded on the CPU engine path
#: (``if _is_cpu: from sgl_kernel import ...``), with the importing module.
#: Each becomes a :class:`StandInKernel` that raises when called.
PROVIDED: dict[str, dict[str, str]] = {
    "sgl_kernel": {
        "assign_draft_cache_locs_contiguous_cpu": "sglang.kernels.ops.speculative.cache_locs",
        "assign_extend_cache_locs_cpu": "sglang.kernels.ops.speculative.cache_locs",
        "assign_req_to_token_pool_cpu": "sglang.srt.mem_cache.allocation",
        "build_tree_kernel_efficient_cpu": "sglang.kernels.ops.speculative.spec_tree",
        "copy_all_layer_kv_cache_cpu": "sglang.kernels.ops.kvcache.cache_move",
        "fill_accept_out_cache_loc_cpu": "sglang.kernels.ops.speculative.eagle",
        "fill_bonus_tokens_cpu": "sglang.kernels.ops.speculative.eagle",
        "verify_tree_greedy_cpu": "sglang.kernels.ops.speculative.spec_tree",
    },
    # NOTE: imported (unguarded) when SGLang's NGRAM worker module is, which the
    # hook contract does in every process; +speculative serves it (provide_kernels).
    "sgl_kernel.speculative": {
        "reconstruct_indices_from_tree_mask": "sglang.kernels.ops.speculative.reconstruct_tree",
    },
    # NOTE: imported (unguarded) when SGLang builds a hybrid model's linear-attention
    # backend (attention_registry); a short-conv model (LFM2) never calls them.
    "sgl_kernel.mamba": {
        "causal_conv1d_fn_cpu": "sglang.srt.layers.attention.linear.gdn_backend",
        "causal_conv1d_update_cpu": "sglang.srt.layers.attention.linear.gdn_backend",
        "chunk_gated_delta_rule_cpu": "sglang.srt.layers.attention.linear.kernels.gdn_triton",
    },
}

#: ``torch.ops.sgl_kernel`` operators SGLang looks up unguarded on the CPU path (the
#: same hybrid-model backend import), with the looking-up module: defined as
#: stand-ins that raise when called (``define_stand_in_ops``).
PROVIDED_OPS: dict[str, str] = {
    "fused_gdn_gating_cpu": "sglang.srt.layers.attention.linear.gdn_backend",
    "fused_sigmoid_gating_delta_rule_update_cpu": "sglang.srt.layers.attention.linear.kernels.gdn_triton",
}

#: Names (attributes or submodules) SGLang looks up at import inside
#: ``try/except ImportError``: refused, so SGLang runs its own fallback.
DECLINED: dict[str, str] = {
    "sgl_kernel.rmsnorm": "sglang.srt.models.inkling_common.norm then uses torch's rms_norm",
    "sgl_kernel.scalar_type": "sglang.srt.layers.quantization.utils then uses its mock scalar types",
    "sgl_kernel.allreduce": "sglang.srt.distributed.device_communicators.custom_all_reduce_ops then disables "
                            "custom all-reduce",
}

#: Real kernels a binding provides in this process (module -> name -> function),
#: served instead of stand-ins (``provide_kernels``).
_REAL: dict[str, dict[str, Callable[..., Any]]] = {}

_WHERE = "server/sglang/launch/stub.py"
#: ``__file__`` of the stand-in modules (not a path: nothing reads files from it).
LOCATION = f"<sgl_kernel stand-in: {_WHERE}>"


class StandInKernelCalled(RuntimeError):
    """A stand-in kernel was called: the CPU path needs a kernel the stand-in cannot run."""


class StandInKernel:
    """A name SGLang imports from ``sgl_kernel``; calling it raises, naming it."""

    def __init__(self, module: str, name: str) -> None:
        # NOTE: the names a function carries (functools.wraps, inspect, pickle read them).
        self.__dict__.update(__module__=module, __name__=name, __qualname__=name)

    @property
    def qualified_name(self) -> str:
        return f"{self.__module__}.{self.__name__}"

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise StandInKernelCalled(
            f"sgl_kernel stand-in: '{self.qualified_name}' was called, but the CPU stand-in has no kernels "
            f"(it only satisfies SGLang's imports; see {_WHERE})")

    def __getattr__(self, attr: str) -> NoReturn:
        raise AttributeError(f"sgl_kernel stand-in: '{self.qualified_name}' is a stand-in kernel with no "
                             f"attribute {attr!r} ({_WHERE})")

    def __repr__(self) -> str:
        return f"<sgl_kernel stand-in {self.qualified_name}>"

    def __reduce__(self) -> tuple[Any, ...]:
        # NOTE: pickled by reference, like the function it stands in for.
        return (_lookup, (self.__module__, self.__name__))


def _lookup(module: str, name: str) -> Any:
    return getattr(importlib.import_module(module), name)


def _refusal(qualified: str) -> str:
    if qualified in DECLINED:
        return (f"sgl_kernel stand-in: '{qualified}' is refused on purpose: "
                f"{DECLINED[qualified]} ({_WHERE} DECLINED)")
    return (f"sgl_kernel stand-in: '{qualified}' is not provided; the CPU stand-in holds only the names "
            f"SGLang imports unguarded ({_WHERE} PROVIDED)")


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        name = module.__name__
        module.__file__ = LOCATION
        for attr in PROVIDED.get(name, {}):
            setattr(module, attr, StandInKernel(name, attr))
        for attr, fn in _REAL.get(name, {}).items():
            setattr(module, attr, fn)
        if "torch" in sys.modules:
            # NOTE: SGLang looks its CPU operators up right after importing from
            # sgl_kernel (gdn_triton, gdn_backend), torch long imported by then.
            define_stand_in_ops()

        def __getattr__(attr: str) -> NoReturn:
            raise AttributeError(_refusal(f"{name}.{attr}"), name=attr, obj=module)

        # NOTE: a module-level __getattr__ (PEP 562); typeshed declares ModuleType's as a method.
        module.__getattr__ = __getattr__  # type: ignore[method-assign]


class _StubFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] not in STUBBED_TOP_LEVEL:
            return None
        if fullname not in STUBBED_TOP_LEVEL and fullname not in PROVIDED and fullname not in _REAL:
            raise ModuleNotFoundError(_refusal(fullname), name=fullname)
        return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)


def install_sgl_kernel_stub() -> None:
    """Serve the stand-in ``sgl_kernel`` in this process (idempotent)."""
    if not any(isinstance(f, _StubFinder) for f in sys.meta_path):
        for name in [m for m in sys.modules if m.split(".")[0] in STUBBED_TOP_LEVEL]:
            del sys.modules[name]
        sys.meta_path.insert(0, _StubFinder())


def define_stand_in_ops() -> None:
    """Put ``PROVIDED_OPS`` on ``torch.ops.sgl_kernel`` as stand-ins that raise when called
    (idempotent; an operator that exists, e.g. the real ``sgl_kernel``'s, is kept).

    NOTE: SGLang reads them as attributes of the namespace (``torch.ops.sgl_kernel.X``)
    and binds them; nothing dispatches through the operator registry."""
    import torch

    namespace = torch.ops.sgl_kernel
    for name in PROVIDED_OPS:
        if not hasattr(namespace, name):
            setattr(namespace, name, StandInKernel("torch.ops.sgl_kernel", name))


def provide_kernels(module: str, kernels: Mapping[str, Callable[..., Any]]) -> None:
    """Serve ``kernels`` (real implementations, e.g. a binding's torch ops) as names of
    the stand-in ``module`` (``sgl_kernel`` or a submodule of it) in this process.

    NOTE: a binding calls this only when its option is chosen, so the strict
    stand-ins stay for everyone else; an SGLang module that already did
    ``from sgl_kernel import x`` keeps the stand-in it bound, so callers also
    patch those importers."""
    _REAL.setdefault(module, {}).update(kernels)
    loaded = sys.modules.get(module)
    if loaded is not None:
        for attr, fn in kernels.items():
            setattr(loaded, attr, fn)
