"""The kinds registry is complete: every kind has all of its parts and both hosts bind it.

Adding a kind is ``docs/adding-a-kind.md``; this test fails until every step is done.
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from tests.seams import sglang_env  # noqa: F401  (installs the sgl_kernel stub)

# isort: split
# NOTE: everything below may import SGLang: the stub must be in place first.

from bench.sim.binding import SimBinding, sim_binding
from compose.config import CONF_DIR, compose, group_options
from compose.kinds import KINDS, Kind
from compose.specs import build_policy, specs_from_config
from server.sglang.launch.binding import ServerBinding, server_binding


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.group)
def test_every_kind_has_its_package_protocol_needs_and_options(kind: Kind):
    protocol = kind.protocol_class()
    assert getattr(protocol, "_is_protocol", False) and getattr(protocol, "_is_runtime_protocol", False), \
        f"{kind.protocol} must be a runtime-checkable Protocol"
    assert protocol.__doc__, f"{kind.protocol} needs its contract in a docstring"
    assert "needs" in protocol.__annotations__, f"{kind.protocol} must declare `needs`"
    needs = kind.needs_class()
    assert dataclasses.is_dataclass(needs) and needs.__dataclass_params__.frozen, \
        f"{kind.needs} must be a frozen dataclass"
    assert needs() is not None, f"{kind.needs} must have defaults for every field"
    assert (CONF_DIR / kind.group).is_dir(), f"no conf/{kind.group}/"
    assert group_options(kind.group), f"conf/{kind.group}/ has no option"


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.group)
def test_every_option_builds_a_policy_of_its_kind_with_its_needs(kind: Kind):
    for option in group_options(kind.group):
        spec = specs_from_config(compose([f"+{kind.group}={option}"]))[kind.group]
        module = spec.target.rpartition(".")[0]
        assert module == f"policies.{kind.package}.{option.replace('-', '_')}", \
            f"conf/{kind.group}/{option}.yaml must name policies/{kind.package}/{option}.py"
        policy = build_policy(spec)
        assert isinstance(policy, kind.protocol_class())
        assert isinstance(policy.needs, kind.needs_class()), f"{spec.target}.needs"


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.group)
def test_both_hosts_bind_every_kind_with_an_object_of_the_contract(kind: Kind):
    server, sim = server_binding(kind), sim_binding(kind)
    assert isinstance(server, ServerBinding) and isinstance(sim, SimBinding)
    for binding in (server, sim):
        assert not inspect.isclass(binding), f"{kind.group}: a binding is an object, not a class"
        assert type(binding).__doc__, f"{kind.group}: {type(binding).__name__} needs a docstring"


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.group)
def test_every_option_carries_its_needs_as_data(kind: Kind):
    for option in group_options(kind.group):
        spec = specs_from_config(compose([f"+{kind.group}={option}"]))[kind.group]
        assert spec.needs_of() == build_policy(spec).needs, f"{spec.target}: needs read at composition"
