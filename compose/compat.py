"""Which kinds and options a model refuses: the rules both hosts check, in one place.

A rule reads the kind's needs (``PolicySpec.needs_of``), never the option's
name, so a new option is judged by what it needs. Each host describes its model
in its own words (``ModelInHost``: where the user switches it) and calls
``check_model_fit`` once, before it builds anything; a host may refuse more
afterwards for what it does not model (the simulator's dLLM rounds model no
cache policy), saying so.

``tests/config/test_compat.py`` holds the table of every refused pair.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from compose.config import ConfigError
from compose.specs import PolicySpec


class ModelKind(StrEnum):
    """How the served model generates (it decides which host path runs)."""

    autoregressive = "autoregressive"
    """Token by token: SGLang's prefill queue, then decode steps."""
    diffusion = "diffusion"
    """Denoising block rounds (a diffusion LM, SGLang's dLLM path)."""


@dataclass(frozen=True)
class ModelInHost:
    """The served (or simulated) model as one host names it in its errors."""

    kind: ModelKind
    """What the model is."""
    described: str
    """A clause saying so, e.g. ``the served model is autoregressive (model.dllm_algorithm is null)``."""
    short: str
    """A noun phrase for it, e.g. ``a diffusion LM (model.dllm_algorithm=LowConfidence)``."""
    to_diffusion: str
    """How the user switches to a diffusion LM in this host."""
    algorithm: str | None = None
    """The diffusion LM's SGLang ``dllm_algorithm`` (``None``: unknown here, or autoregressive)."""
    hybrid: str | None = None
    """A hybrid model's architecture (attention beside recurrent layers, e.g.
    ``Lfm2ForCausalLM``); ``None``: attention only."""
    to_hybrid: str = "serve a hybrid model (e.g. model=lfm2_tiny)"
    """How the user switches to a hybrid model in this host."""


@dataclass(frozen=True)
class Refusal:
    """One refused pair: an option of ``group`` on a ``model`` kind, when ``when`` holds."""

    name: str
    """Short id (test tables name rules by it)."""
    group: str
    """The kind's config group."""
    model: ModelKind
    """The model kind that refuses it."""
    when: Callable[[Any], bool]
    """On the option's Needs: whether this option is refused."""
    why: str
    """The error, formatted with ``option`` and the ``ModelInHost`` fields."""
    algorithm: str | None = None
    """Only for this diffusion algorithm (``None``: any)."""
    hybrid: bool | None = None
    """Only for a hybrid model (``True``), only for an attention-only one (``False``), or any (``None``)."""


_TO_ROUNDS = "use +policy=dwise, +policy=fcfs (SGLang's stock dLLM order) or no +policy"

#: Every model-kind refusal, checked by both hosts in this order.
REFUSALS: tuple[Refusal, ...] = (
    # NOTE: the dLLM path builds a plain PrefillAdder and moves the queue head
    # into its slots without the gate (docs/dwise-notes.md §5): deferral would not hold.
    Refusal("admission-on-rounds", "admission", ModelKind.diffusion, lambda needs: True,
            "+admission is not supported for {short}: SGLang's dLLM rounds bypass the gate"),
    Refusal("adapters-on-rounds", "adapters", ModelKind.diffusion, lambda needs: True,
            "+adapters is not supported for {short}: SGLang disables LoRA on its dLLM path"),
    Refusal("gaps-on-block-pages", "cache", ModelKind.diffusion, lambda needs: needs.interior,
            "+cache ({option}) needs page_size 1; {short} pages KV by block"),
    Refusal("queue-order-on-rounds", "policy", ModelKind.diffusion, lambda needs: needs.rounds is None,
            "+policy ({option}) orders an autoregressive model's prefill queue, but {described}, "
            "whose requests take block rounds: " + _TO_ROUNDS),
    Refusal("speculation-on-rounds", "speculative", ModelKind.diffusion, lambda needs: True,
            "+speculative ({option}) is not supported for {short}: its blocks are denoised in rounds, "
            "not drafted and verified token by token"),
    Refusal("decisions-on-rounds", "decisions", ModelKind.diffusion, lambda needs: True,
            "+decisions ({option}) is not supported for {short}: SGLang's /v1/decisions scores "
            "next-token labels, which a diffusion LM does not produce"),
    # NOTE: the gap cache keeps KV only; a hybrid model resumes from whole recurrent-state
    # snapshots, which a gap cannot hold (server: gap_cache.py refuses is_hybrid_ssm).
    Refusal("gaps-on-hybrid", "cache", ModelKind.autoregressive, lambda needs: needs.interior,
            "+cache ({option}) frees history from the front in Switchboard's gap cache, which holds KV only; "
            "{short} resumes a prefix only from a whole recurrent-state snapshot", hybrid=True),
    Refusal("snapshots-need-hybrid", "cache", ModelKind.autoregressive, lambda needs: needs.snapshots,
            "+cache ({option}) ranks recurrent-state snapshots with KV, but {described}, which has none: "
            "{to_hybrid}", hybrid=False),
    Refusal("snapshots-on-rounds", "cache", ModelKind.diffusion, lambda needs: needs.snapshots,
            "+cache ({option}) ranks recurrent-state snapshots with KV; {short} has none"),
    Refusal("rounds-on-tokens", "policy", ModelKind.autoregressive, lambda needs: not needs.queue,
            "+policy ({option}) schedules a diffusion LM's block rounds, but {described}: {to_diffusion}"),
    Refusal("shared-rounds-on-renoise", "policy", ModelKind.diffusion,
            lambda needs: needs.sglang_native is None,
            "+policy ({option}) shares rounds between prompt and denoising blocks; "
            "Gemma4Renoise encodes the context in separate forwards", algorithm="Gemma4Renoise"),
)


def refusing_rule(model: ModelInHost, spec: PolicySpec) -> Refusal | None:
    """The first rule by which ``model`` refuses ``spec``'s option, or ``None``."""
    needs = spec.needs_of()
    for rule in REFUSALS:
        if rule.group != spec.group or rule.model is not model.kind:
            continue
        if rule.algorithm is not None and rule.algorithm != model.algorithm:
            continue
        if rule.hybrid is not None and rule.hybrid != (model.hybrid is not None):
            continue
        if rule.when(needs):
            return rule
    return None


def refusal_for(model: ModelInHost, spec: PolicySpec) -> str | None:
    """Why ``model`` refuses ``spec``'s option, or ``None``."""
    rule = refusing_rule(model, spec)
    if rule is None:
        return None
    return rule.why.format(option=spec.target, described=model.described, short=model.short,
                           to_diffusion=model.to_diffusion, to_hybrid=model.to_hybrid)


@dataclass(frozen=True)
class HostRule:
    """One refused host setting: a kind's host settings that its option cannot use."""

    name: str
    """Short id (test tables name rules by it)."""
    group: str
    """The kind's config group."""
    when: Callable[[Any, Any, bool], bool]
    """On the option's Needs, the kind's host settings and whether SGLang's own host
    tier (HiCache) is on in this host: whether they are refused."""
    why: str
    """The error, formatted with ``option``, ``needs``, ``host`` (the option's Needs and
    the kind's host settings) and ``sglang_host_tier`` (how this host switches SGLang's
    own host tier on)."""


#: Every host-setting refusal, checked by both hosts in this order.
HOST_RULES: tuple[HostRule, ...] = (
    # NOTE: Switchboard's host tier lives in the gap cache (server: host_kv.py); a
    # tail-first cache has SGLang's own (HiCache), switched on in the host's own words.
    HostRule("host-tier-needs-gaps", "cache",
             lambda needs, host, sglang_tier: host.host_tier_tokens > 0 and not needs.interior,
             "cache.host_tier_tokens needs a cache that holds gaps (+cache=penelope); "
             "for +cache ({option}) use SGLang's own host tier ({sglang_host_tier})"),
    # NOTE: the reverse: HiCache's host copies are of tail-first tree nodes; a gap cache's
    # nodes lose their front, so its host tier is the gap cache's own (server: host_kv.py).
    HostRule("gaps-refuse-sglang-tier", "cache",
             lambda needs, host, sglang_tier: sglang_tier and needs.interior,
             "SGLang's own host tier ({sglang_host_tier}) conflicts with +cache ({option}), a cache that "
             "holds gaps: use cache.host_tier_tokens"),
    # NOTE: a demoted snapshot needs a home; a store beside an order that demotes nothing is unused.
    # NOTE: the store's size; its directory is the server's alone (server/sglang/cache/binding.py)
    HostRule("snapshots-need-a-store", "cache",
             lambda needs, host, sglang_tier: needs.snapshots and host.snapshot_gb <= 0,
             "+cache ({option}) demotes recurrent-state snapshots to an SSD store: set cache.snapshot_gb "
             "(and, on the server, cache.snapshot_dir)"),
    HostRule("store-needs-snapshots", "cache",
             lambda needs, host, sglang_tier: not needs.snapshots and host.snapshot_dir is not None,
             "cache.snapshot_dir keeps recurrent-state snapshots for a cache that ranks them (+cache=histate); "
             "+cache ({option}) does not"),
    # NOTE: SGLang's host tier keeps a hybrid model's states in its own host pool, a second home.
    HostRule("snapshots-beside-sglang-tier", "cache",
             lambda needs, host, sglang_tier: sglang_tier and needs.snapshots,
             "SGLang's own host tier ({sglang_host_tier}) conflicts with +cache ({option}), which keeps "
             "recurrent-state snapshots in its own SSD store"),
    # NOTE: the host sizes its buffers and per-step KV for max_draft_tokens at startup.
    HostRule("tier-needs-ssd", "tier",
             lambda needs, host, sglang_tier: needs.ssd and not host.has_ssd,
             "+tier ({option}) places blocks on SSD: set tier.ssd_dir and tier.ssd_gb"),
    # NOTE: a tier option sets SGLang's host tier up from its own host settings (server:
    # hicache/binding.py); a second one beside it would be sized twice.
    HostRule("tier-owns-sglang-tier", "tier",
             lambda needs, host, sglang_tier: sglang_tier,
             "+tier ({option}) sets SGLang's own host tier up itself (tier.host_ratio, tier.ssd_dir, tier.ssd_gb): "
             "remove {sglang_host_tier}"),
    HostRule("draft-above-host-max", "speculative",
             lambda needs, host, sglang_tier: max(needs.draft_lengths, default=0) > host.max_draft_tokens,
             "+speculative ({option}) drafts {needs.draft_lengths} tokens per step but speculative.max_draft_tokens="
             "{host.max_draft_tokens}: raise speculative.max_draft_tokens or lower the option's lengths"),
)


@dataclass(frozen=True)
class Conflict:
    """One refused pair of chosen kinds: ``group``'s option beside ``other``'s, when ``when`` holds."""

    name: str
    """Short id (test tables name rules by it)."""
    group: str
    """The kind's config group."""
    other: str
    """The other kind's config group."""
    when: Callable[[Any, Any], bool]
    """On the option's Needs and the other option's: whether the pair is refused."""
    why: str
    """The error, formatted with ``option`` and ``other`` (the two options' targets)."""


#: Every refused pair of kinds, checked by both hosts with the host settings.
CONFLICTS: tuple[Conflict, ...] = (
    # NOTE: SGLang's HiCache backs up the nodes of SGLang's own tail-first tree; the gap
    # cache is a tree of its own with its own host tier (server: cache/gap_cache.py).
    Conflict("tier-beside-gaps", "tier", "cache", lambda needs, other: other.interior,
             "+tier ({option}) runs on SGLang's hierarchical cache, which backs up the nodes of SGLang's own "
             "tree; +cache ({other}) frees history from the front in Switchboard's gap cache, which keeps its "
             "own host tier: use cache.host_tier_tokens with it, or +tier with a tail-first +cache"),
)


def check_host_settings(specs: Mapping[str, PolicySpec], sglang_host_tier: str, sglang_tier_on: bool) -> None:
    """Raise ``ConfigError`` (one line, naming the setting) for the first refused host
    setting (``HOST_RULES``), then the first refused pair of kinds (``CONFLICTS``); ``sglang_host_tier``: how this host switches SGLang's own
    host tier on, ``sglang_tier_on``: whether it is on."""
    for rule in HOST_RULES:
        spec = specs.get(rule.group)
        if spec is None:
            continue
        needs, host = spec.needs_of(), spec.host_settings()
        if rule.when(needs, host, sglang_tier_on):
            raise ConfigError(rule.why.format(option=spec.target, needs=needs, host=host,
                                              sglang_host_tier=sglang_host_tier))
    for pair in CONFLICTS:
        spec, other = specs.get(pair.group), specs.get(pair.other)
        if spec is not None and other is not None and pair.when(spec.needs_of(), other.needs_of()):
            raise ConfigError(pair.why.format(option=spec.target, other=other.target))


def check_model_fit(model: ModelInHost, specs: Mapping[str, PolicySpec]) -> None:
    """Raise ``ConfigError`` (one line, naming the kind) for the first chosen option ``model`` refuses."""
    for rule_group in dict.fromkeys(r.group for r in REFUSALS):
        spec = specs.get(rule_group)
        if spec is not None:
            why = refusal_for(model, spec)
            if why is not None:
                raise ConfigError(why)
