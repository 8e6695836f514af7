"""On a CPU server, SGLang's short convolutions run Switchboard's torch kernels instead of interpreted Triton.

SGLang's serving wrapper (``sglang.srt.layers.attention.mamba.causal_conv1d``)
sends ``causal_conv1d_fn`` (prefill) and ``causal_conv1d_update`` (decode) to
its compiled kernels when ``_HAS_CONV1D_KERNEL`` (CUDA), and to Triton
otherwise, which a CPU runs only under the interpreter (~3 ms per token and
conv layer). ``install`` gives the wrapper's compiled branch the torch kernels
of ``kernels/causal_conv1d`` (the same signatures and in-place contract as
``sglang.kernels.ops.mamba``'s), so every caller goes through SGLang's own
wrapper: LFM2's short conv, and Flide's packed-row restart
(``server/sglang/decisions/conv.py``). Equal to the Triton kernels bit for bit
in float32 (``tests/seams/test_conv_kernels.py``).

NOTE: CPU only (the plugin installs it where ``plan.device == "cpu"`` and the
model is a CPU hybrid); a CUDA server keeps SGLang's compiled kernels. SGLang's
speculative verify path calls the Triton update directly and is not served on CPU.
"""

from __future__ import annotations

import logging

from server.sglang.launch.symbols import HookedSymbol

log = logging.getLogger("switchboard.plugin")

#: SGLang's serving wrapper whose compiled-kernel branch gets the torch kernels.
WRAPPER = "sglang.srt.layers.attention.mamba.causal_conv1d"
_OPS = "sglang.kernels.ops.mamba"
#: The wrapper's switch between its compiled kernels (``True``) and Triton.
SWITCH = "_HAS_CONV1D_KERNEL"

#: Rows of the hook contract: the wrapper's two entry points and its switch, and the compiled
#: kernels' signatures (the torch kernels are called as they are).
CONV_KERNEL_SYMBOLS: tuple[HookedSymbol, ...] = (
    HookedSymbol(f"{WRAPPER}.{SWITCH}"),
    HookedSymbol(f"{WRAPPER}.causal_conv1d_fn",
                 ("x", "weight", "bias", "query_start_loc", "cache_indices", "has_initial_state", "conv_states",
                  "activation", "pad_slot_id", "kwargs")),
    HookedSymbol(f"{WRAPPER}.causal_conv1d_update",
                 ("x", "conv_state", "weight", "bias", "activation", "cache_seqlens", "conv_state_indices",
                  "pad_slot_id")),
    HookedSymbol(f"{_OPS}.causal_conv1d_fwd",
                 ("x", "weight", "bias_", "conv_states", "query_start_loc", "cache_indices", "has_initial_state",
                  "silu_activation", "pad_slot_id")),
    HookedSymbol(f"{_OPS}.causal_conv1d_update",
                 ("x", "conv_state", "weight", "bias_", "silu_activation", "cache_seqlens", "conv_state_indices",
                  "pad_slot_id")),
)


def install() -> None:
    """Point the wrapper's compiled branch at the torch kernels (idempotent)."""
    import importlib

    from kernels.causal_conv1d import reference

    wrapper = importlib.import_module(WRAPPER)
    # NOTE: the names the wrapper's compiled branch calls (imported there only on CUDA)
    for name, kernel in (("causal_conv1d_fwd", reference.causal_conv1d_fwd),
                         ("causal_conv1d_update_kernel", reference.causal_conv1d_update)):
        setattr(wrapper, name, kernel)
    # NOTE: set last: the branch it opens calls the two names above
    setattr(wrapper, SWITCH, True)
    log.info("switchboard plugin: short convolutions on torch CPU kernels (kernels/causal_conv1d)")
