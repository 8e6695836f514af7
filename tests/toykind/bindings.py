"""The toy kind's two bindings: the server's (a launch field and a prefill-walk seam) and the
simulator's (the same decision on the simulator's walk).

Both ask the policy once per prefill pass whether to run it; a held pass admits no
waiting request (the server's walk stops at the first, the simulator's skips them all).
Neither names anything outside ``tests/`` but the public seams: the server's event faces
(``server/sglang/scheduling/events.py``: ``WrapsPrefillAdder``) and the simulator's
(``bench/sim/events.py``: ``FiltersWalk``).
"""

from __future__ import annotations

import logging
from typing import Any

from bench.sim.binding import Scope, SimParts
from compose.specs import PolicySpec, build_policy
from server.sglang.launch.binding import ForcedFlag
from server.sglang.launch.symbols import POLICY, HookedSymbol
from tests.toykind import ToyPolicy, ToyView

log = logging.getLogger("switchboard.toy")

#: The SGLang member the toy's seam uses beyond the core's rows (its contract row).
HOOKED = f"{POLICY}.AddReqResult.OTHER"
#: The policy objects the bindings built, newest last (in-process tests read them).
BUILT: list[Any] = []


class HoldSeam:
    """``WrapsPrefillAdder``: each prefill pass (one ``PrefillAdder``) asks the policy; on a
    held pass the adder refuses every waiting request (SGLang's ``AddReqResult.OTHER``)."""

    def __init__(self, policy: ToyPolicy) -> None:
        self.policy = policy
        self.passes = 0
        self.held = 0
        self._classes: dict[type, type] = {}

    def decide(self) -> bool:
        """One more pass: whether it runs."""
        self.passes += 1
        run = self.policy.decide(ToyView(self.passes)).run
        if not run:
            self.held += 1
            log.info("toy: held prefill pass %d (%d held)", self.passes, self.held)
        return run

    def adder_class(self, base: type) -> type:
        if base not in self._classes:  # NOTE: one subclass per base, not one per pass
            from sglang.srt.managers.schedule_policy import AddReqResult

            seam = self

            class HeldAdder(base):  # type: ignore[misc, valid-type]
                def __init__(self, *args: Any, **kwargs: Any) -> None:
                    super().__init__(*args, **kwargs)
                    self.toy_runs = seam.decide()

                def add_one_req(self, req: Any, *args: Any, **kwargs: Any) -> Any:
                    if not self.toy_runs:
                        return AddReqResult.OTHER
                    return super().add_one_req(req, *args, **kwargs)

            self._classes[base] = HeldAdder
        return self._classes[base]


class ToyServerBinding:
    """``+toy`` in SGLang: ``--schedule-conservativeness`` and a prefill-walk seam."""

    symbols = (HookedSymbol(HOOKED),)
    """Its row of the hook contract: what its seam uses beyond the core's rows."""

    def launch(self, spec: PolicySpec, launch: Any) -> list[ForcedFlag]:
        needs = spec.needs_of()
        return [ForcedFlag("schedule_conservativeness", needs.conservativeness, "the toy's conservativeness")]

    def install(self, spec: PolicySpec, plan: Any, parts: Any) -> None:
        policy = build_policy(spec)
        BUILT.append(policy)
        parts.seams.append(lambda scheduler: HoldSeam(policy))
        parts.policies.append(policy)  # NOTE: told of finished requests (ObservesFinished)
        parts.installed.append(f"toy={spec.target}")

    def extend_cli(self) -> None:
        return None


class WalkHold:
    """The toy on the simulator's walk (``FiltersWalk``): a held pass admits nobody."""

    def __init__(self, policy: ToyPolicy) -> None:
        self.policy = policy
        self.passes = 0
        self.held = 0
        self._runs = True

    def walk_started(self, running: Any, batch: Any) -> None:
        self.passes += 1
        self._runs = self.policy.decide(ToyView(self.passes)).run
        self.held += not self._runs

    def admits(self, r: Any) -> bool:
        return self._runs

    def walked(self, r: Any) -> None:
        return None


class ToySimBinding:
    """``+toy`` in the simulator: decides each prefill walk, told of every finished request."""

    scope = Scope.replica
    counters: tuple[str, ...] = ()

    def attach(self, spec: PolicySpec, settings: Any, parts: SimParts) -> None:
        policy = build_policy(spec)
        BUILT.append(policy)
        parts.seams.append(WalkHold(policy))
        parts.observers.append(policy)


SERVER = ToyServerBinding()
SIM = ToySimBinding()
