"""Server binding of the admission kind (``+admission``): the arrival gate.

No launch flag follows from an admission policy. Install: its gate
(``gate.py``) subscribes to the scheduler's arrival event, before any KV
allocation (hop 5 of docs/lifecycle.md), and stops the prefill walk at
deferred requests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from compose.specs import build_policy
from server.sglang.launch.binding import ForcedFlag, LaunchFields, SchedulerParts
from server.sglang.launch.symbols import HookedSymbol

if TYPE_CHECKING:
    from compose.specs import PolicySpec
    from server.resolve import LaunchPlan


class AdmissionBinding:
    """``+admission``: the gate's policy, handed to the scheduler."""

    symbols: tuple[HookedSymbol, ...] = ()
    """Its rows of the hook contract (none of its own: the gate runs on the core's scheduler events)."""

    def launch(self, spec: PolicySpec, launch: LaunchFields) -> list[ForcedFlag]:
        return []

    def install(self, spec: PolicySpec, plan: LaunchPlan, parts: SchedulerParts) -> None:
        from server.sglang.scheduling.gate import AdmissionGate

        policy = build_policy(spec)
        parts.policies.append(policy)
        # NOTE: the gate subscribes to arrival and the prefill walk (events.py)
        parts.seams.append(lambda scheduler: AdmissionGate(scheduler, policy))
        parts.installed.append(f"admission={spec.target}")

    def extend_cli(self) -> None:
        return None


BINDING = AdmissionBinding()
