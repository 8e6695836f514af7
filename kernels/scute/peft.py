"""Read a saved PEFT adapter (``adapter_config.json`` + safetensors) into Scute slots.

Supported, exactly as PEFT computes them at inference (eval mode, no dropout):
LoRA (with rsLoRA, ``rank_pattern``/``alpha_pattern``), DoRA (``use_dora``),
VeRA (``save_projection=true``), OFT (block-diagonal; Cayley or
Cayley-Neumann, ``block_share``, ``coft``) and IA3. Where PEFT computes a value
from the adapter and the base weight at every forward pass, it is computed once
here, with the same operations (``NOTE``): DoRA's row norms of ``W + scaling BA``,
OFT's rotation blocks, IA3's biased-output shift.

Everything else is refused at load with ``UnsupportedAdapter``, naming what:
other PEFT types (LoHa, LoKr, ...), adapters that add or retrain tokens or
whole modules (``modules_to_save``, ``trainable_token_indices``), trained biases
(``bias`` other than ``none``, ``lora_bias``), ``fan_in_fan_out`` layers, layer
replication, and VeRA saved without its projections.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from kernels.scute.slots import AdapterSlots

#: Module path (``model.layers.0.self_attn.q_proj``) -> the base layer's weight and bias.
BaseLinear = Callable[[str], tuple[torch.Tensor, torch.Tensor | None]]
#: The PEFT types Scute reads (DoRA is ``LORA`` with ``use_dora``).
SUPPORTED = ("LORA", "VERA", "OFT", "IA3")
PREFIX = "base_model.model."


class UnsupportedAdapter(ValueError):
    """A PEFT adapter Scute cannot serve exactly; the message names why."""


@dataclass(frozen=True)
class ScuteAdapter:
    """One adapter, converted: its method and the slots of every layer it touches."""

    name: str
    method: str
    """``lora``, ``dora``, ``vera``, ``oft`` or ``ia3``."""
    slots: dict[str, AdapterSlots]
    """Module path (as in the base model) -> that layer's slots."""


def read_config(path: Path) -> dict[str, Any]:
    """``adapter_config.json`` of ``path``, with its type checked."""
    cfg_path = Path(path) / "adapter_config.json"
    if not cfg_path.exists():
        raise UnsupportedAdapter(f"{path}: no adapter_config.json (not a PEFT adapter directory)")
    cfg: dict[str, Any] = json.loads(cfg_path.read_text())
    kind = str(cfg.get("peft_type", "")).upper()
    if kind not in SUPPORTED:
        raise UnsupportedAdapter(f"{path}: PEFT type {kind or '(none)'} is not supported; Scute serves "
                                 "LORA (and DoRA), VERA, OFT and IA3")
    for key, why in (("modules_to_save", "it replaces whole modules"),
                     ("trainable_token_indices", "it adds or retrains tokens"),
                     ("layer_replication", "it replicates layers"),
                     ("fan_in_fan_out", "its layers store W transposed (Conv1D)")):
        if cfg.get(key):
            raise UnsupportedAdapter(f"{path}: {kind} adapter with {key}={cfg[key]!r} is not supported: {why}")
    if cfg.get("bias", "none") != "none" or cfg.get("lora_bias"):
        raise UnsupportedAdapter(f"{path}: {kind} adapter trains biases (bias={cfg.get('bias')!r}, "
                                 f"lora_bias={cfg.get('lora_bias')!r}); only bias='none' is supported")
    return cfg


def read_peft(path: Path | str, base: BaseLinear, name: str | None = None) -> ScuteAdapter:
    """Convert the adapter saved in ``path`` (see module docs); ``base`` gives
    the base layers' weights (DoRA's norms and IA3's shifts need them)."""
    path = Path(path)
    cfg = read_config(path)
    tensors = _load_tensors(path)
    kind = cfg["peft_type"].upper()
    modules = _by_module(tensors)
    name = name or path.name
    if kind == "LORA":
        method = "dora" if cfg.get("use_dora") else "lora"
        slots = {m: _lora(m, t, cfg, base) for m, t in modules.items()}
    elif kind == "VERA":
        method, slots = "vera", _vera(path, modules, tensors, base)
    elif kind == "OFT":
        method = "oft"
        slots = {m: AdapterSlots(blocks=oft_blocks(t["oft_R.weight"], cfg, base(m)[0].shape[1]))
                 for m, t in modules.items()}
    else:
        method = "ia3"
        slots = {m: _ia3(m, t["ia3_l"], cfg, base) for m, t in modules.items()}
    for m, s in slots.items():
        w = base(m)[0]
        s.check(w.shape[1], w.shape[0])
    return ScuteAdapter(name, method, slots)


def _load_tensors(path: Path) -> dict[str, torch.Tensor]:
    st = path / "adapter_model.safetensors"
    if st.exists():
        return load_file(str(st))
    raise UnsupportedAdapter(f"{path}: no adapter_model.safetensors (pickled .bin adapters are not read)")


def _by_module(tensors: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """``{module path: {parameter suffix: tensor}}`` of the per-layer tensors."""
    suffixes = ("lora_A.weight", "lora_B.weight", "lora_magnitude_vector", "vera_lambda_b", "vera_lambda_d",
                "oft_R.weight", "ia3_l")
    out: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        if key in ("base_model.vera_A", "base_model.vera_B"):
            continue
        suffix = next((s for s in suffixes if key.endswith("." + s)), None)
        if suffix is None or not key.startswith(PREFIX):
            raise UnsupportedAdapter(f"unexpected tensor {key!r} in the adapter (not a per-layer "
                                     "parameter Scute knows)")
        out.setdefault(key[len(PREFIX):-len(suffix) - 1], {})[suffix] = value
    return out


def _pattern_value(patterns: dict[str, Any] | None, module: str, default: Any) -> Any:
    """PEFT's ``rank_pattern``/``alpha_pattern`` lookup: a key matches a module
    path that ends with it (as a regex, after a dot)."""
    for key, value in (patterns or {}).items():
        if re.match(rf"(.*\.)?({key})$", module):
            return value
    return default


def _lora(module: str, t: dict[str, torch.Tensor], cfg: dict[str, Any], base: BaseLinear) -> AdapterSlots:
    a, b = t["lora_A.weight"].float(), t["lora_B.weight"].float()
    r = a.shape[0]
    alpha = _pattern_value(cfg.get("alpha_pattern"), module, cfg.get("lora_alpha", 8))
    scaling = alpha / math.sqrt(r) if cfg.get("use_rslora") else alpha / r
    out = b.shape[0]
    if not cfg.get("use_dora"):
        return AdapterSlots(lora_a=a, lora_b=b, out_scale=torch.full((out,), float(scaling)))
    magnitude = t["lora_magnitude_vector"].float()
    weight = base(module)[0].float()
    # NOTE: PEFT's DoRA norm, computed at every forward pass there and once here, with
    # the same operations: lora_B(lora_A(I)).T, then ||W + scaling * that|| per output row.
    eye = torch.eye(a.shape[1], dtype=a.dtype)
    lora_weight = ((eye @ a.T) @ b.T).T
    norm = torch.linalg.norm(weight + scaling * lora_weight, dim=1)
    scale = magnitude / norm
    return AdapterSlots(scale=scale, lora_a=a, lora_b=b, out_scale=scale * scaling)


def _vera(path: Path, modules: dict[str, dict[str, torch.Tensor]], tensors: dict[str, torch.Tensor],
          base: BaseLinear) -> dict[str, AdapterSlots]:
    if "base_model.vera_A" not in tensors or "base_model.vera_B" not in tensors:
        raise UnsupportedAdapter(f"{path}: VERA adapter saved without its projection matrices "
                                 "(save_projection=false); PEFT regenerates them from a seed, Scute reads them")
    va, vb = tensors["base_model.vera_A"].float(), tensors["base_model.vera_B"].float()
    out = {}
    for m, t in modules.items():
        lb, ld = t["vera_lambda_b"].float(), t["vera_lambda_d"].float()
        out_features, in_features = base(m)[0].shape
        # NOTE: PEFT slices the shared matrices to the layer: A[:, :in], B[:out, :].
        out[m] = AdapterSlots(lora_a=va[:, :in_features], lora_b=vb[:out_features, :], mid_scale=ld, out_scale=lb)
    return out


def _ia3(module: str, l_vec: torch.Tensor, cfg: dict[str, Any], base: BaseLinear) -> AdapterSlots:
    ff = _matches(cfg.get("feedforward_modules"), module)
    vec = l_vec.float().flatten()
    if ff:  # NOTE: PEFT scales the input of feed-forward layers: a diagonal input transform
        return AdapterSlots(blocks=vec.reshape(-1, 1, 1))
    bias = base(module)[1]
    # NOTE: elsewhere PEFT scales the biased output: l * (x W^T + b) = l * x W^T + b + (l - 1) * b
    shift = None if bias is None else (vec - 1) * bias.float()
    return AdapterSlots(scale=vec, shift=shift)


def _matches(targets: Any, module: str) -> bool:
    """PEFT's module matching: a regex string over the whole path, or a list of name suffixes."""
    if not targets:
        return False
    if isinstance(targets, str):
        return re.fullmatch(targets, module) is not None
    return any(module == t or module.endswith("." + t) for t in targets)


def oft_blocks(weight: torch.Tensor, cfg: dict[str, Any], in_features: int) -> torch.Tensor:
    """OFT's rotation as (n, k, k) blocks, computed as PEFT computes it at every
    forward pass: skew-symmetric blocks from the saved upper triangles,
    optionally projected (COFT), then Cayley or its Neumann series."""
    q = weight.float()
    k = int(cfg.get("oft_block_size") or 0) or in_features // int(cfg["r"])
    rows, cols = torch.triu_indices(k, k, 1)

    def skew(vec: torch.Tensor) -> torch.Tensor:
        m = torch.zeros(vec.shape[0], k, k, dtype=vec.dtype)
        m[:, rows, cols] = vec
        return m - m.transpose(-2, -1)

    if cfg.get("coft"):
        q = _coft_project(skew(q), float(cfg.get("eps", 6e-5)))[:, rows, cols]
    s = skew(q)
    n_terms = int(cfg.get("num_cayley_neumann_terms", 5))
    if cfg.get("use_cayley_neumann", True):
        # NOTE: PEFT's truncated series of the Cayley transform: I + 2Q + 2Q^2 + ... + 2Q^(n-2) + Q^(n-1).
        r = torch.eye(k, dtype=s.dtype).repeat(s.shape[0], 1, 1)
        if n_terms > 1:
            r = r + 2.0 * s
            if n_terms > 2:
                power = torch.bmm(s, s)
                r = r + 2.0 * power
                for _ in range(3, n_terms - 1):
                    power = torch.bmm(power, s)
                    r = r + 2.0 * power
                power = torch.bmm(power, s)
                r = r + power
    else:
        eye = torch.eye(k, dtype=s.dtype).expand(s.shape[0], k, k)
        r = torch.linalg.solve(eye + s, eye - s, left=False)
    n = in_features // k
    if cfg.get("block_share"):
        r = r.repeat(n, 1, 1)
    if r.shape[0] * k != in_features:
        raise UnsupportedAdapter(f"OFT blocks {tuple(r.shape)} do not cover {in_features} input features")
    return r


def _coft_project(m: torch.Tensor, eps: float) -> torch.Tensor:
    """COFT's projection of the skew matrices onto a ball around zero (PEFT ``_project_batch``)."""
    eps = eps / math.sqrt(m.shape[0])
    norm = torch.norm(m, dim=(1, 2), keepdim=True)
    return torch.where(norm <= eps, m, eps * (m / norm))
