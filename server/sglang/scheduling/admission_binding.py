"""Server binding of the admission kind (``+admission``): the arrival gate.

No launch flag follows from an admission policy. Install: the policy is
handed to the scheduler subclass, whose arrival check runs it before any KV
allocation (``gate.py``; hop 5 of docs/lifecycle.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from compose.specs import build_policy
from server.sglang.launch.binding import LaunchFields, SchedulerParts

if TYPE_CHECKING:
    from compose.specs import PolicySpec
    from server.resolve import LaunchPlan


class AdmissionBinding:
    """``+admission``: the gate's policy, handed to the scheduler."""

    def launch(self, spec: PolicySpec, launch: LaunchFields) -> None:
        return None

    def install(self, spec: PolicySpec, plan: LaunchPlan, parts: SchedulerParts) -> None:
        parts.admission = build_policy(spec)
        parts.installed.append(f"admission={spec.target}")

    def extend_cli(self) -> None:
        return None


BINDING = AdmissionBinding()
