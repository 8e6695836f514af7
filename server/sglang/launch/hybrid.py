"""Hybrid (recurrent) models on SGLang's CPU path: what their processes need (no SGLang import).

SGLang serves a hybrid model (short-convolution or state-space layers next to
attention layers) on CPU through Triton kernels it runs only under Triton's
interpreter, with a recurrent-state pool whose conv states default to
bfloat16. Switchboard serves the architectures below on CPU (checked live:
``tests/live/test_server_decisions.py``): their SGLang processes get
``TRITON_INTERPRET=1`` (read when SGLang's kernel modules are imported, so in
the environment before any SGLang import), float32 conv states when the model
runs in float32 (else the state is rounded to bfloat16 between passes), and a
bounded state pool (``max_mamba_cache_size``; SGLang's default sizes it from
free memory, gigabytes on a CPU host).
"""

from __future__ import annotations

import json
from pathlib import Path

#: Hybrid architectures Switchboard serves on CPU.
CPU_HYBRID_ARCHITECTURES = frozenset({"Lfm2ForCausalLM"})
#: Recurrent-state slots reserved when the user sets none (``sglang.max_mamba_cache_size``).
DEFAULT_STATE_SLOTS = 64


def cpu_hybrid(model_path: str | None) -> str | None:
    """The checkpoint's architecture if it is a hybrid one served on CPU, else ``None``."""
    if model_path is None:
        return None
    try:
        config = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    found = [a for a in config.get("architectures") or () if a in CPU_HYBRID_ARCHITECTURES]
    return found[0] if found else None


def hybrid_env(dtype: str | None) -> dict[str, str]:
    """Environment of a CPU hybrid model's SGLang processes."""
    env = {"TRITON_INTERPRET": "1"}
    if dtype == "float32":
        env["SGLANG_MAMBA_CONV_DTYPE"] = "float32"
    return env
