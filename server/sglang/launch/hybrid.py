"""Hybrid (recurrent) models on SGLang's CPU path: what their processes need (no SGLang import).

SGLang serves a hybrid model (short-convolution or state-space layers next to
attention layers) on CPU through Triton kernels it runs only under Triton's
interpreter, with a recurrent-state pool whose conv states default to
bfloat16. Switchboard serves the architectures below on CPU (checked live:
``tests/live/test_server_decisions.py``): their SGLang processes get
``TRITON_INTERPRET=1`` (read when SGLang's kernel modules are imported, so in
the environment before any SGLang import; the short convolutions, the hot
Triton kernels, run on torch CPU kernels instead: ``conv_kernels.py``, installed
by the plugin), float32 conv states when the model
runs in float32 (else the state is rounded to bfloat16 between passes), and a
bounded state pool (``max_mamba_cache_size``; SGLang's default sizes it from
free memory, gigabytes on a CPU host).
"""

from __future__ import annotations

import json
from pathlib import Path

#: Hybrid architectures Switchboard serves on CPU.
CPU_HYBRID_ARCHITECTURES = frozenset({"Lfm2ForCausalLM"})
#: ``model_type`` of the checkpoints SGLang 0.5.23 serves with a recurrent-state pool
#: (its ``configs/hybrid_arch.mambaish_config``: Mamba2, GDN, KDA and lightning layers).
HYBRID_MODEL_TYPES = frozenset({
    "lfm2", "lfm2_moe", "lfm2_vl", "qwen3_next", "qwen3_5", "qwen3_5_moe", "falcon_h1", "falcon_mamba",
    "nemotron_h", "granitemoehybrid", "kimi_linear", "mamba", "mamba2", "jet_nemotron", "bailing_hybrid",
    "minicpm_hybrid", "zaya",
})
#: Recurrent-state slots reserved when the user sets none (``sglang.max_mamba_cache_size``).
DEFAULT_STATE_SLOTS = 64


def checkpoint_config(model_path: str | None) -> dict[str, object] | None:
    """The checkpoint's ``config.json``; ``None`` without a checkpoint or a readable one."""
    if model_path is None:
        return None
    try:
        config = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def _architecture(config: dict[str, object]) -> str:
    architectures = config.get("architectures")
    return str(architectures[0]) if isinstance(architectures, list) and architectures else "?"


def cpu_hybrid(model_path: str | None) -> str | None:
    """The checkpoint's architecture if it is a hybrid one served on CPU, else ``None``."""
    architectures = (checkpoint_config(model_path) or {}).get("architectures")
    found = [a for a in architectures or () if a in CPU_HYBRID_ARCHITECTURES] if isinstance(architectures, list) else []
    return str(found[0]) if found else None


#: Generated models (``model.source.kind``) that are hybrid, by the architecture they build.
GENERATED_HYBRIDS = {"random_lfm2": "Lfm2ForCausalLM"}


def hybrid_architecture(model_path: str | None, source_kind: str | None = None) -> str | None:
    """The architecture if SGLang serves the model with recurrent states (any device), else
    ``None``: the checkpoint's, or (before a generated model is built) its source's."""
    if model_path is None and source_kind is not None:
        return GENERATED_HYBRIDS.get(source_kind)
    config = checkpoint_config(model_path) or {}
    found = cpu_hybrid(model_path)
    if found is None and config.get("model_type") in HYBRID_MODEL_TYPES:
        found = _architecture(config)
    return found


def hybrid_env(dtype: str | None) -> dict[str, str]:
    """Environment of a CPU hybrid model's SGLang processes."""
    env = {"TRITON_INTERPRET": "1"}
    if dtype == "float32":
        env["SGLANG_MAMBA_CONV_DTYPE"] = "float32"
    return env
