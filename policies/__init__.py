"""Pure serving policies: one small Protocol per kind, one decision each.

Every module under this package is pure: no torch, no sglang, no clocks, no
globals, no environment. A policy sees frozen ``*View`` snapshots that its host
builds (the SGLang adapter in ``server/sglang/`` or the trace simulator in
``bench/``) and returns ``*Decision`` data. The same object therefore runs
inside SGLang and inside the simulator.

Config groups map to kinds (``conf/<group>/<option>.yaml`` ->
``policies/<kind>/<option>.py``, a ``-`` in an option name becomes ``_``):

=========== ============ ================================================
group       kind package Protocol
=========== ============ ================================================
``policy``  scheduling   :class:`policies.scheduling.SchedulingPolicy`
``cache``   cache        :class:`policies.cache.EvictionPolicy`
``admission`` admission  :class:`policies.admission.AdmissionPolicy`
=========== ============ ================================================
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    """One policy kind: its config group, its package and its Protocol."""

    group: str
    """Config group (``+<group>=<option>``)."""
    package: str
    """Package under ``policies/`` holding the Protocol and the options."""
    protocol: str
    """Name of the Protocol class in that package."""


#: Every policy kind, in the order hosts apply them.
KINDS: tuple[Kind, ...] = (
    Kind("policy", "scheduling", "SchedulingPolicy"),
    Kind("cache", "cache", "EvictionPolicy"),
    Kind("admission", "admission", "AdmissionPolicy"),
)
