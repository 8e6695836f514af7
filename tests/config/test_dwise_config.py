"""``+policy=dwise`` and diffusion LMs at startup: what is refused, naming why, and
what DWISE sets in SGLang's arguments (no model, no server)."""

from __future__ import annotations

import pytest

from compose.config import ConfigError, compose
from server.resolve import resolve
from server.sglang.launch.args import sglang_fields, validate

pytestmark = pytest.mark.config


def fields(*overrides: str) -> dict:
    return sglang_fields(resolve(compose(["server.device=cpu", *overrides])))


def test_dwise_sets_the_slots_and_sglang_parses_it():
    plan = resolve(compose(["server.device=cpu", "model=sdar_tiny", "+policy=dwise", "policy.slots=6",
                            "policy.round_blocks=3"]))
    f = sglang_fields(plan)
    assert f["dllm_algorithm"] == "LowConfidence" and f["max_running_requests"] == 6
    assert f["schedule_policy"] == "fcfs"
    validate(plan)  # SGLang's own parser takes the arguments


def test_hidden_state_capture_needs_prefill_cuda_graphs_off():
    # NOTE: the capture is a forward hook; hooks do not run inside CUDA graphs
    assert fields("model=sdar_tiny", "+policy=dwise", "policy.record_hidden_state=true")[
        "cuda_graph_backend_prefill"] == "disabled"
    with pytest.raises(ConfigError, match="cuda_graph_backend_prefill=full conflicts with \\+policy"):
        fields("model=sdar_tiny", "+policy=dwise", "policy.record_hidden_state=true",
               "sglang.cuda_graph_backend_prefill=full")


def test_stock_dllm_scheduling_is_fcfs_or_no_policy():
    assert "max_running_requests" not in fields("model=sdar_tiny")
    assert fields("model=sdar_tiny", "+policy=fcfs")["schedule_policy"] == "fcfs"


@pytest.mark.parametrize("overrides, message", [
    (["+policy=dwise"], "diffusion LM's block rounds, but the served model is autoregressive"),
    (["model=sdar_tiny", "+policy=leap"], "orders an autoregressive model's prefill queue"),
    (["model=sdar_tiny", "+policy=shortest_prefill"], "use \\+policy=dwise"),
    (["model=sdar_tiny", "+policy=dwise", "sglang.max_running_requests=3"],
     "sglang.max_running_requests=3 conflicts with \\+policy"),
    (["model=sdar_tiny", "+admission=max_queue"], "rounds bypass the gate"),
    (["model=sdar_tiny", "+cache=penelope"], "pages KV by block"),
    (["model=sdar_tiny", "+policy=dwise", "model.dllm_algorithm=Gemma4Renoise"], "separate forwards"),
])
def test_mismatched_kinds_are_refused_naming_the_reason(overrides, message):
    with pytest.raises(ConfigError, match=message):
        fields(*overrides)


def test_dwise_parameters_are_checked_at_composition():
    with pytest.raises(ConfigError, match="round_blocks"):
        resolve(compose(["server.device=cpu", "model=sdar_tiny", "+policy=dwise", "policy.slots=8",
                                 "policy.round_blocks=9"]))


def test_an_order_whose_needs_promise_a_face_it_lacks_is_refused_for_every_host(monkeypatch):
    """``compose.specs.build_policy`` (both hosts build through it) checks the scheduling kind's
    faces (``policies.scheduling.rounds.missing_face``)."""
    from policies.scheduling import RoundsNeeds, SchedulingNeeds
    from policies.scheduling.fcfs import FcfsPolicy
    from policies.scheduling.rounds import missing_face

    assert missing_face(FcfsPolicy()) is None
    # fcfs promising its own rounds (not SGLang's) but having no order_round
    monkeypatch.setattr(FcfsPolicy, "needs", SchedulingNeeds(rounds=RoundsNeeds()))
    assert missing_face(FcfsPolicy()) == "order_round (a diffusion LM's block rounds)"
    with pytest.raises(ConfigError, match=r"policy: policies.scheduling.fcfs.FcfsPolicy's needs promise "
                                          r"order_round \(a diffusion LM's block rounds\), which it does not"):
        resolve(compose(["server.device=cpu", "+policy=fcfs"]))
