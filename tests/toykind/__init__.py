"""A toy policy kind defined entirely inside ``tests/``: the proof that a kind is a recipe.

``+toy=<option>`` holds the scheduler back on every ``every``-th pass
(``ToyPolicy.decide``) and counts the requests it sees finish. Its contract is
here, its one option in ``hold.py``, its bindings in ``bindings.py``; the
tests register it with ``compose.kinds.register_kind`` and put its YAML in a
temporary config directory (``hydra.searchpath``). Nothing outside
``tests/`` names it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from compose.kinds import Kind


@dataclass(frozen=True)
class ToyView:
    """One scheduler pass, as the toy sees it."""

    passes: int
    """Passes seen so far, this one included."""


@dataclass(frozen=True)
class ToyDecision:
    """Whether the scheduler may form a batch on this pass."""

    run: bool


@dataclass(frozen=True)
class ToyNeeds:
    """What the toy asks of its host."""

    conservativeness: float = 1.0
    """SGLang's ``--schedule-conservativeness`` (a launch field the server binding sets)."""


@runtime_checkable
class ToyPolicy(Protocol):
    """Decides, per scheduler pass, whether a batch may be formed."""

    needs: ToyNeeds

    def decide(self, view: ToyView) -> ToyDecision:
        """Run this pass or hold it."""
        ...


#: The toy kind's registry entry (``register_kind(TOY)`` in the tests).
TOY = Kind("toy", "toykind", "ToyPolicy", "ToyNeeds", "tests.toykind.bindings:SERVER",
           "tests.toykind.bindings:SIM", module="tests.toykind")
