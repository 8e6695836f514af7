"""The names the cache kind gives SGLang's own flags, and the parser choice it adds.

A leaf module (no torch, no SGLang import at module level): the binding
(launch, in the launching process) and the seams it installs (``eviction.py``,
``gap_cache.py``, in SGLang's scheduler processes) read the same names here.
NOTE: invariant: this module imports nothing of ``server/``, so neither side
reaches the other through it (tests/config/test_boundaries.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: ``--radix-eviction-policy`` value that selects Switchboard's eviction seam.
EVICTION_STRATEGY_NAME = "switchboard"
#: ``--radix-cache-backend`` of the gap cache (``gap_cache.register_gap_cache``).
GAP_CACHE_BACKEND = "switchboard_gap"
#: ``--radix-cache-backend`` of the snapshot cache (``histate_setup.register_histate_cache``).
HISTATE_CACHE_BACKEND = "switchboard_histate"


def register_eviction_choice() -> None:
    """Make ``switchboard`` a valid ``--radix-eviction-policy`` for SGLang's parser."""
    from sglang.srt.arg_groups.choices import RADIX_EVICTION_POLICY_CHOICES, add_radix_eviction_policy_choices

    if EVICTION_STRATEGY_NAME not in RADIX_EVICTION_POLICY_CHOICES:
        add_radix_eviction_policy_choices([EVICTION_STRATEGY_NAME])


def register_backend(name: str, build: Callable[[Any], Any]) -> str:
    """Make ``--radix-cache-backend <name>`` build with ``build`` (SGLang's cache registry); return ``name``.

    NOTE: registered once per process; a caller that registers again with new settings keeps
    them where ``build`` reads them at build time (each cache's ``_active``), so re-entry replaces them."""
    from sglang.srt.mem_cache import registry

    if registry.get_radix_cache_factory(name) is None:
        registry.register_radix_cache_backend(name, build)
    return name
