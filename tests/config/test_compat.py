"""Which kinds and options each model kind refuses (``compose.compat``): the one table.

``REFUSED`` lists every refused pair (a kind's option on a model); the test
computes the refusals over every option in ``conf/`` and every model and fails
when they differ, so a new option or rule shows up here. Both hosts check the
same rules: each rule is then triggered through the server's argument builder
and through the simulator's settings, naming the same reason.
"""

from __future__ import annotations

import pytest

from bench.config import compose_bench, resolve_bench
from compose.compat import REFUSALS, ModelInHost, ModelKind, refusing_rule
from compose.config import ConfigError, compose, group_options
from compose.kinds import kinds
from compose.specs import specs_from_config
from server.resolve import resolve
from server.sglang.launch.args import sglang_fields

pytestmark = pytest.mark.config

#: The models a rule can tell apart: an autoregressive one, and a diffusion LM by SGLang algorithm.
MODELS = {"autoregressive": (ModelKind.autoregressive, None, None),
          "hybrid": (ModelKind.autoregressive, None, "Lfm2ForCausalLM"),
          "LowConfidence": (ModelKind.diffusion, "LowConfidence", None),
          "Gemma4Renoise": (ModelKind.diffusion, "Gemma4Renoise", None)}
DIFFUSION = ("LowConfidence", "Gemma4Renoise")
#: Autoregressive queue orders of Switchboard's own (no dLLM rounds).
QUEUE_ORDERS = ("fairway", "leap", "shortest_output", "shortest_prefill", "shortest_prompt")
#: SGLang's own autoregressive queue orders (``--schedule-policy``), which have no dLLM form.
STOCK_QUEUE_ORDERS = ("dfs-weight", "lof", "lpm", "shortest-prefill-first", "hrrn")

#: Every refused (group, option, model) and the rule that refuses it; anything else is accepted.
REFUSED: dict[tuple[str, str, str], str] = {
    ("policy", "dwise", "autoregressive"): "rounds-on-tokens",
    ("policy", "dwise", "hybrid"): "rounds-on-tokens",
    ("policy", "dwise", "Gemma4Renoise"): "shared-rounds-on-renoise",
    **{("policy", o, m): "queue-order-on-rounds" for o in QUEUE_ORDERS + STOCK_QUEUE_ORDERS for m in DIFFUSION},
    **{("cache", "penelope", m): "gaps-on-block-pages" for m in DIFFUSION},
    ("cache", "penelope", "hybrid"): "gaps-on-hybrid",
    ("cache", "histate", "autoregressive"): "snapshots-need-hybrid",
    **{("cache", "histate", m): "snapshots-on-rounds" for m in DIFFUSION},
    **{("admission", o, m): "admission-on-rounds" for o in ("basin", "max_queue") for m in DIFFUSION},
    **{("adapters", o, m): "adapters-on-rounds" for o in ("lora", "scute") for m in DIFFUSION},
    **{("speculative", o, m): "speculation-on-rounds" for o in ("sglang_adaptive", "static", "table", "tabletune")
       for m in DIFFUSION},
    **{("decisions", o, m): "decisions-on-rounds" for o in ("flide", "separate") for m in DIFFUSION},
}


def test_the_table_lists_every_refused_pair_and_only_those():
    found: dict[tuple[str, str, str], str] = {}
    for kind in kinds():
        for option in group_options(kind.group):
            spec = specs_from_config(compose([f"+{kind.group}={option}"]))[kind.group]
            for name, (model_kind, algorithm, hybrid) in MODELS.items():
                rule = refusing_rule(ModelInHost(model_kind, "d", "s", "t", algorithm, hybrid), spec)
                if rule is not None:
                    found[(kind.group, option, name)] = rule.name
    assert found == REFUSED
    assert {r.name for r in REFUSALS} == set(REFUSED.values()), "a rule no option triggers, or an unlisted one"


#: One pair per rule, through both hosts: the server's overrides, the simulator's (``None``:
#: the simulator does not model the algorithm), and the reason both name.
THROUGH_HOSTS = [
    ("rounds-on-tokens", ["+policy=dwise"], ["+policy=dwise"], "schedules a diffusion LM's block rounds"),
    ("queue-order-on-rounds", ["model=sdar_tiny", "+policy=leap"], ["sim.dllm.enabled=true", "+policy=leap"],
     "orders an autoregressive model's prefill queue"),
    ("shared-rounds-on-renoise", ["model=sdar_tiny", "+policy=dwise", "model.dllm_algorithm=Gemma4Renoise"],
     None, "separate forwards"),
    ("gaps-on-block-pages", ["model=sdar_tiny", "+cache=penelope"], ["sim.dllm.enabled=true", "+cache=penelope"],
     "pages KV by block"),
    ("gaps-on-hybrid", ["model=lfm2_tiny", "+cache=penelope"], ["sim.hybrid.enabled=true", "+cache=penelope"],
     "resumes a prefix only from a whole"),
    ("snapshots-need-hybrid", ["+cache=histate"], ["+cache=histate"], "ranks recurrent-state snapshots with KV, but"),
    ("snapshots-on-rounds", ["model=sdar_tiny", "+cache=histate"], ["sim.dllm.enabled=true", "+cache=histate"],
     "ranks recurrent-state snapshots with KV; a diffusion LM"),
    ("admission-on-rounds", ["model=sdar_tiny", "+admission=basin"], ["sim.dllm.enabled=true", "+admission=basin"],
     "rounds bypass the gate"),
    ("adapters-on-rounds", ["model=sdar_tiny", "+adapters=scute"], ["sim.dllm.enabled=true", "+adapters=scute"],
     "disables LoRA on its dLLM path"),
    ("speculation-on-rounds", ["model=sdar_tiny", "+speculative=tabletune"],
     ["sim.dllm.enabled=true", "+speculative=tabletune"], "denoised in rounds, not drafted"),
    ("decisions-on-rounds", ["model=sdar_tiny", "+decisions=flide"], ["sim.dllm.enabled=true", "+decisions=flide"],
     "which a diffusion LM does not produce"),
]


def test_every_rule_is_shown_through_both_hosts():
    assert {case[0] for case in THROUGH_HOSTS} == {r.name for r in REFUSALS}


@pytest.mark.parametrize("rule, server, sim, reason", THROUGH_HOSTS, ids=[c[0] for c in THROUGH_HOSTS])
def test_both_hosts_refuse_with_the_same_reason(rule, server, sim, reason):
    with pytest.raises(ConfigError, match=reason):
        sglang_fields(resolve(compose(["server.device=cpu", *server])))
    if sim is not None:
        with pytest.raises(ConfigError, match=reason):
            resolve_bench(compose_bench(sim))


#: Every (cache option) the host-tier rule refuses: the tail-first ones (no gaps to keep).
TIER_REFUSED = {o for o in group_options("cache") if o != "penelope"}


def test_one_host_tier_rule_refused_by_both_hosts():
    from compose.compat import HOST_RULES

    assert [r.name for r in HOST_RULES] == ["host-tier-needs-gaps", "gaps-refuse-sglang-tier",
                                            "snapshots-need-a-store", "store-needs-snapshots",
                                            "snapshots-beside-sglang-tier", "tier-needs-ssd",
                                            "tier-owns-sglang-tier", "draft-above-host-max"]
    tier = "++cache.host_tier_tokens=1000"
    for option in group_options("cache"):
        server, sim = f"+cache={option}", f"+cache={option}"
        # NOTE: an option ranking snapshots is tried on a hybrid model (else the model rule answers first)
        hybrid = ["model=lfm2_tiny"] if option == "histate" else []
        if option in TIER_REFUSED:
            with pytest.raises(ConfigError, match=r"cache.host_tier_tokens needs a cache that holds gaps.*"
                                                  r"sglang.enable_hierarchical_cache=true"):
                sglang_fields(resolve(compose(["server.device=cpu", *hybrid, server, tier])))
            with pytest.raises(ConfigError, match=r"cache.host_tier_tokens needs a cache that holds gaps.*"
                                                  r"sim.hicache_tokens"):
                resolve_bench(compose_bench([sim, tier, *(["sim.hybrid.enabled=true"] if hybrid else [])]))
        else:
            assert sglang_fields(resolve(compose(["server.device=cpu", server, tier])))["page_size"] == 1
            assert resolve_bench(compose_bench([sim, tier])).policies["cache"].host_settings().host_tier_tokens == 1000
    # SGLang's own host tier: the server's flag, the simulator's model of it
    assert resolve_bench(compose_bench(["+cache=lru", "sim.hicache_tokens=1000"])).sim.hicache_tokens == 1000
    # ...on a hybrid model too (its host KV pool beside the host state pool), never beside HiState's store
    hybrid = ["sim.hybrid.enabled=true", "sim.hybrid.host_states=4", "sim.hicache_tokens=1000"]
    assert resolve_bench(compose_bench(hybrid)).sim.hicache_tokens == 1000
    with pytest.raises(ConfigError, match="keeps recurrent-state snapshots in its own SSD store"):
        resolve_bench(compose_bench([*hybrid, "+cache=histate", "cache.snapshot_gb=1"]))


#: The tier kind's rules: (server overrides, simulator overrides, reason).
TIER_CASES = [
    (["+tier=ssd_only"], ["+tier=ssd_only"],
     r"\+tier \(.*SsdOnlyPolicy\) places blocks on SSD: set tier.ssd_dir and tier.ssd_gb"),
    (["+tier=hierarchical", "sglang.enable_hierarchical_cache=true"], ["+tier=hierarchical", "sim.hicache_tokens=100"],
     r"sets SGLang's own host tier up itself .*: remove (sglang.enable_hierarchical_cache=true|sim.hicache_tokens)"),
    (["+tier=hierarchical", "+cache=penelope"], ["+tier=hierarchical", "+cache=penelope"],
     r"\+tier \(.*HierarchicalPolicy\) runs on SGLang's hierarchical cache.*\+cache \(.*PenelopePolicy\) frees "
     r"history from the front in Switchboard's gap cache"),
]


@pytest.mark.parametrize("server, sim, reason", TIER_CASES, ids=["no-ssd", "two-host-tiers", "beside-gaps"])
def test_the_tier_rules_are_refused_by_both_hosts(server, sim, reason):
    from compose.compat import CONFLICTS

    assert [c.name for c in CONFLICTS] == ["tier-beside-gaps"]
    with pytest.raises(ConfigError, match=reason):
        sglang_fields(resolve(compose(["server.device=cpu", *server])))
    with pytest.raises(ConfigError, match=reason):
        resolve_bench(compose_bench(sim))
    # a tail-first +cache composes with +tier on both hosts
    assert sglang_fields(resolve(compose(["server.device=cpu", "+tier=hierarchical", "+cache=lru"])))[
        "enable_hierarchical_cache"] is True
    resolve_bench(compose_bench(["+tier=hierarchical", "+cache=lru"]))


@pytest.mark.parametrize("over", [["+speculative=static", "speculative.draft_tokens=6"],
                                  ["+speculative=table", "speculative.ranges=[[1,4,2],[5,8,5]]"]])
def test_a_draft_length_above_the_hosts_maximum_is_refused_by_both_hosts(over):
    reason = r"drafts \(.*\) tokens per step but speculative.max_draft_tokens=4"
    with pytest.raises(ConfigError, match=reason):
        sglang_fields(resolve(compose(["server.device=cpu", *over])))
    with pytest.raises(ConfigError, match=reason):
        resolve_bench(compose_bench(over))
    # the same lengths fit once the host prepares for them
    assert sglang_fields(resolve(compose(["server.device=cpu", *over, "speculative.max_draft_tokens=6"])))[
        "speculative_num_draft_tokens"] == 7
    resolve_bench(compose_bench([*over, "speculative.max_draft_tokens=6"]))


def test_the_cache_binding_hands_its_host_tier_to_the_simulators_cache():
    from bench.sim.binding import Scope, sim_parts

    settings = resolve_bench(compose_bench(["+cache=penelope", "++cache.host_tier_tokens=500"]))
    assert sim_parts(settings, Scope.replica).host_tier_tokens == 500 and settings.sim.hicache_tokens == 0
    # SGLang's own host tier beside the gap cache: refused, as the server refuses its flag there
    with pytest.raises(ConfigError, match=r"SGLang's own host tier \(sim.hicache_tokens=N.*\) conflicts with "
                                          r"\+cache \(.*Penelope.*\), a cache that holds gaps"):
        sim_parts(resolve_bench(compose_bench(["+cache=penelope", "sim.hicache_tokens=10"])), Scope.replica)
    with pytest.raises(ConfigError, match=r"SGLang's own host tier \(sglang.enable_hierarchical_cache=true\) "
                                          r"conflicts with \+cache \(.*Penelope.*\), a cache that holds gaps"):
        sglang_fields(resolve(compose(["server.device=cpu", "+cache=penelope",
                                       "sglang.enable_hierarchical_cache=true"])))


def test_a_hybrid_model_is_told_from_its_checkpoint_or_its_generated_source(tmp_path):
    from server.sglang.launch.args import served_model

    assert served_model(resolve(compose(["server.device=cpu", "model=lfm2_tiny"]))).hybrid == "Lfm2ForCausalLM"
    assert served_model(resolve(compose(["server.device=cpu"]))).hybrid is None
    (tmp_path / "config.json").write_text('{"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next"}')
    model = served_model(resolve(compose(["server.device=cpu", f"model.path={tmp_path}"])))
    assert model.hybrid == "Qwen3NextForCausalLM" and "hybrid" in model.short


STORE = ["cache.snapshot_dir=/tmp/switchboard-test-snapshots", "cache.snapshot_gb=0.001"]


def test_a_snapshot_order_runs_in_the_snapshot_cache_with_its_store():
    fields = sglang_fields(resolve(compose(["server.device=cpu", "model=lfm2_tiny", "+cache=histate", *STORE])))
    assert fields["radix_cache_backend"] == "switchboard_histate"
    assert "radix_eviction_policy" not in fields or fields["radix_eviction_policy"] != "switchboard"


@pytest.mark.parametrize("overrides, reason", [
    (["+cache=histate"], r"demotes recurrent-state snapshots to an SSD store: set cache.snapshot_gb"),
    (["+cache=histate", "cache.snapshot_dir=/tmp/x"], r"set cache.snapshot_gb"),
    (["+cache=histate", "cache.snapshot_gb=1"], r"demotes recurrent-state snapshots to an SSD store: "
                                                r"set cache.snapshot_dir$"),
    (["+cache=lru", "++cache.snapshot_dir=/tmp/x"], r"cache.snapshot_dir keeps recurrent-state snapshots for a "
                                                    r"cache that ranks them"),
    (["+cache=histate", *STORE, "sglang.enable_hierarchical_cache=true"],
     r"SGLang's own host tier \(sglang.enable_hierarchical_cache=true\) conflicts with \+cache"),
])
def test_the_snapshot_store_rules_name_the_field(overrides, reason):
    with pytest.raises(ConfigError, match=reason):
        sglang_fields(resolve(compose(["server.device=cpu", "model=lfm2_tiny", *overrides])))
