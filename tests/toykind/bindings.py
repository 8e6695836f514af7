"""The toy kind's two bindings: the server's (SGLang launch field and hook) and the simulator's."""

from __future__ import annotations

from typing import Any

from bench.sim.binding import Scope, SimParts
from compose.specs import PolicySpec, build_policy
from server.sglang.launch.symbols import HookedSymbol

#: The SGLang method the server binding wraps (a real one; ``HookRegistry`` resolves it).
HOOKED = "sglang.srt.managers.scheduler.Scheduler.get_next_batch_to_run"
#: The policy objects the bindings built, newest last (the tests read them).
BUILT: list[Any] = []


class ToyServerBinding:
    """``+toy`` in SGLang: ``--schedule-conservativeness`` and an AROUND hook on the batch pick."""

    symbols = (HookedSymbol(HOOKED, ("self", "running_batch", "last_batch")),)
    """Its row of the hook contract: the method it wraps."""

    def launch(self, spec: PolicySpec, launch: Any) -> None:
        needs = spec.needs_of()
        launch.require("schedule_conservativeness", needs.conservativeness, f"+toy ({spec.target})")

    def install(self, spec: PolicySpec, plan: Any, parts: Any) -> None:
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType

        from tests.toykind import ToyView

        policy = build_policy(spec)
        BUILT.append(policy)
        passes = [0]

        def around(original: Any, *args: Any, **kwargs: Any) -> Any:
            passes[0] += 1
            if not policy.decide(ToyView(passes[0])).run:
                return None  # NOTE: SGLang's loop treats "no batch" as an idle pass
            return original(*args, **kwargs)

        HookRegistry.register(HOOKED, around, HookType.AROUND)
        parts.installed.append(f"toy={spec.target}")

    def extend_cli(self) -> None:
        return None


class ToySimBinding:
    """``+toy`` in the simulator: told of every finished request."""

    scope = Scope.replica
    counters: tuple[str, ...] = ()

    def attach(self, spec: PolicySpec, settings: Any, parts: SimParts) -> None:
        policy = settings.build(spec.group)
        BUILT.append(policy)
        parts.observers.append(policy)


SERVER = ToyServerBinding()
SIM = ToySimBinding()
