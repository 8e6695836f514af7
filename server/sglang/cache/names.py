"""The names the cache kind gives SGLang's own flags, and the parser choice it adds.

A leaf module (no torch, no SGLang import at module level): the binding
(launch, in the launching process) and the seams it installs (``eviction.py``,
``gap_cache.py``, in SGLang's scheduler processes) read the same names here.
NOTE: invariant: this module imports nothing of ``server/``, so neither side
reaches the other through it (tests/config/test_boundaries.py).
"""

from __future__ import annotations

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
