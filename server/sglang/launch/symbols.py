"""One row of the hook contract: an SGLang symbol and the signature Switchboard expects.

A leaf module (no SGLang import): the core table (``contract.py``) and every
kind's server binding (``ServerBinding.symbols``) write rows of it.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Module prefixes the rows abbreviate.
SCHED = "sglang.srt.managers.scheduler"
POLICY = "sglang.srt.managers.schedule_policy"
LORA = "sglang.srt.lora"


@dataclass(frozen=True)
class HookedSymbol:
    """One SGLang symbol and, for callables, its expected parameter names."""

    path: str
    """Dotted path: ``module.Attr[.attr]``."""
    params: tuple[str, ...] | None = None
    """Expected parameter names (``self`` included); ``None`` = not a callable check."""
