"""Server binding of the router kind (``+router``): SGLang's gateway, not SGLang itself.

A routing policy changes nothing inside an SGLang worker: no launch field and
nothing installed in its processes. The supervisor starts SGLang's gateway
(SMG) in front of the replicas with the policy's needs (``plan.py``
``resolve_cluster``, ``gateway.py``), which is where this kind binds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from server.sglang.launch.symbols import HookedSymbol

if TYPE_CHECKING:
    from compose.specs import PolicySpec
    from server.resolve import LaunchPlan
    from server.sglang.launch.binding import ForcedFlag, LaunchFields, SchedulerParts


class RouterBinding:
    """``+router``: nothing in the worker; the gateway is planned by ``server/cluster/plan.py``."""

    symbols: tuple[HookedSymbol, ...] = ()
    """Its rows of the hook contract (none: SMG, not SGLang, routes)."""

    def launch(self, spec: PolicySpec, launch: LaunchFields) -> list[ForcedFlag]:
        return []  # NOTE: workers run stock; the gateway (SMG) routes between them

    def install(self, spec: PolicySpec, plan: LaunchPlan, parts: SchedulerParts) -> None:
        parts.installed.append(f"router={spec.target} (gateway)")

    def extend_cli(self) -> None:
        return None


BINDING = RouterBinding()
