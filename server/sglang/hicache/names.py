"""The names the tier kind gives SGLang's own flags (a leaf: no torch, no SGLang import).

The binding (launch, in the launching process) and the tier cache
(``tier_cache.py``, in SGLang's scheduler processes) read the same name here.
"""

from __future__ import annotations

#: ``--radix-cache-backend`` of the tier cache (``tier_cache.register_tier_cache``).
TIER_CACHE_BACKEND = "switchboard_tier"
