"""Pure serving policies: one small Protocol per kind, one decision each.

Every module under this package is pure: no torch, no sglang, no clocks, no
globals, no environment. A policy sees frozen ``*View`` snapshots that its host
builds (the SGLang adapter in ``server/sglang/`` or the trace simulator in
``bench/``) and returns ``*Decision`` data. The same object therefore runs
inside SGLang and inside the simulator.

Config groups map to kinds (``conf/<group>/<option>.yaml`` ->
``policies/<kind>/<option>.py``, a ``-`` in an option name becomes ``_``):

============= ============ ======================= ===================
group         kind package Protocol                Needs
============= ============ ======================= ===================
``policy``    scheduling   ``SchedulingPolicy``    ``SchedulingNeeds``
``cache``     cache        ``EvictionPolicy``      ``EvictionNeeds``
``admission`` admission    ``AdmissionPolicy``     ``AdmissionNeeds``
============= ============ ======================= ===================

The registry of kinds is ``compose.kinds.KINDS``; adding a kind follows
``docs/adding-a-kind.md``. Each kind's package holds its Protocol, its frozen
Needs dataclass (what a host must provide or may skip; every policy states
its own as ``needs``), its views and decisions.
"""
