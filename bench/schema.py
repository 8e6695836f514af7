"""Typed schema of the bench config (Hydra structured configs).

``conf/bench.yaml`` places these nodes with ``_schema/bench_<name>@<key>``
defaults entries before the chosen group options, so a misspelled key or a
wrong type under ``trace.``, ``accelerator.``, ``model_profile.``, ``sim.``,
``live.``, ``metrics.`` or ``output.`` fails at composition naming the field. Policy kinds
(``+policy=``, ``+cache=``, ``+admission=``) are typed by their classes'
signatures, exactly as for the server (``compose/specs.py``).

NOTE (size): this module stays whole at ~430 lines on purpose. It holds only
declarative dataclasses, every field with its docstring, and it is the one page
a user reads for every ``python -m bench`` option; split by group, it would
scatter that reference without separating any logic.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


class TraceFormat(enum.Enum):
    """Which loader reads ``trace.path``."""

    mooncake = "mooncake"
    azure = "azure"
    claude_code = "claude_code"
    servegen = "servegen"
    simple = "simple"


class SessionSplit(enum.Enum):
    """Which of a session trace's sessions a run replays (``bench/traces/claude_code.py``)."""

    all = "all"
    """Every session."""
    tuning = "tuning"
    """The half a default may be chosen on (by a hash of each session's file name)."""
    evaluation = "evaluation"
    """The other half: sessions no default was chosen on."""


class TouchMode(enum.Enum):
    """Whether waiting requests refresh their cached prefixes' recency."""

    auto = "auto"
    """As the server: every pass under cache-aware policies, every 32nd pass
    (first 128 waiting) under native fcfs/lof where the eviction order asks
    (``EvictionNeeds.refresh_waiting``: LRU, Penelope, HiState)."""
    off = "off"
    """Never (only admission and insertion refresh recency)."""


class RoutingKey(enum.Enum):
    """What a simulated client sends as SMG's ``x-smg-routing-key`` header."""

    none = "none"
    """No header."""
    session = "session"
    """The request's session id (its own id when the trace has no sessions)."""


@dataclass
class SurgeConfig:
    """Multiply the arrival rate of new requests/sessions during a window."""

    start_s: float = MISSING
    """Window start, in (scaled) trace seconds."""
    end_s: float = MISSING
    """Window end (exclusive)."""
    factor: float = MISSING
    """Rate multiplier k (k > 1 adds copies, k < 1 thins)."""


@dataclass
class ClaudeCodeConfig:
    """Options of the kv-cache-tester Claude Code loader (``format: claude_code``)."""

    session_rate: float = 0.05
    """New sessions per second (seeded Poisson starts; turns are closed-loop)."""
    max_sessions: int | None = None
    """Replay only the first N sessions (file-name order); null = all."""
    include_subagents: bool = True
    """Replay sub-agent requests (they share the session's cache namespace)."""
    split: SessionSplit = SessionSplit.all
    """Which sessions: ``all``, or the ``tuning`` / ``evaluation`` half (disjoint,
    fixed by a hash of each session's file name, so a table judged on
    ``evaluation`` replays sessions no default saw); ``max_sessions`` counts
    within the half."""


@dataclass
class MooncakeConfig:
    """Options of the Mooncake loader (``format: mooncake``)."""

    sessions: bool = False
    """Derive conversations from shared hash-id prefixes and replay later turns
    closed-loop (bench/traces/mooncake.py); false = every request open-loop."""


@dataclass
class SimpleTraceConfig:
    """Options of a user's own trace (``format: simple``, bench/traces/simple.py)."""

    block_size: int = 0
    """Prompt tokens each ``prefix_hashes`` id covers; required when the rows carry them."""


@dataclass
class ServeGenConfig:
    """Options of the ServeGen synthesizer (``format: servegen``)."""

    category: str = "language"
    """ServeGen category folder (language, reason, multimodal)."""
    model: str = "m-small"
    """Model folder inside the category (needs dataset files: m-small, deepseek-r1)."""
    clients: list[int] | None = None
    """Client (chunk) ids to include; null = every client with a dataset."""
    start_s: float = 0.0
    """Offset into ServeGen's time series (s; 86400 per day)."""
    duration_s: float = 3600.0
    """Seconds of traffic to synthesize."""
    rate_scale: float = 1.0
    """Multiply every client's per-window rate (all 38 m-small clients
    together send ~300 req/s)."""


@dataclass
class TraceConfig:
    """The workload to replay and its transforms."""

    name: str = MISSING
    """Name used in results."""
    format: TraceFormat = MISSING
    """Loader for ``path``."""
    path: str = MISSING
    """File or folder, absolute or relative to the data root."""
    window_start_s: float = 0.0
    """Keep requests/sessions starting at or after this loader time (s)."""
    window_end_s: float | None = None
    """... and before this one; null = to the end."""
    time_scale: float = 1.0
    """Multiply arrival and think times (0.5 doubles the request rate)."""
    surges: list[SurgeConfig] = field(default_factory=list)
    """Rate surges, applied after windowing and scaling."""
    seed: int = 0
    """Seed of every random choice the loader and transforms make."""
    claude_code: ClaudeCodeConfig = field(default_factory=ClaudeCodeConfig)
    """Only for ``format: claude_code``."""
    mooncake: MooncakeConfig = field(default_factory=MooncakeConfig)
    """Only for ``format: mooncake``."""
    servegen: ServeGenConfig = field(default_factory=ServeGenConfig)
    """Only for ``format: servegen``."""
    simple: SimpleTraceConfig = field(default_factory=SimpleTraceConfig)
    """Only for ``format: simple`` (a user's own JSONL/CSV: arrival_s, input_tokens,
    output_tokens, optional session_id and prefix_hashes)."""


@dataclass
class AcceleratorConfig:
    """One accelerator and the serving precision its numbers refer to."""

    name: str = MISSING
    """Name used in results."""
    peak_tflops: float = MISSING
    """Dense peak TFLOP/s at ``dtype_bytes`` precision."""
    memory_bandwidth_gbs: float = MISSING
    """Peak memory bandwidth, GB/s (1e9 bytes)."""
    memory_gib: float = MISSING
    """Device memory, GiB."""
    dtype_bytes: int = 2
    """Bytes per weight and per KV element (2: bf16, 4: float32)."""
    prefill_mfu: float = 0.5
    """Share of peak FLOP/s a prefill batch reaches."""
    decode_mfu: float = 0.3
    """Share of peak FLOP/s a compute-bound decode step reaches."""
    bandwidth_efficiency: float = 0.8
    """Share of peak bandwidth weight/KV streaming reaches."""
    iteration_overhead_s: float = 0.003
    """Fixed time per forward iteration (scheduling, launch, sampling)."""
    request_overhead_s: float = 0.0
    """Time per request in a forward iteration (per-sequence work the FLOP and
    byte counts miss: SGLang's torch-native attention loops over requests on CPU)."""
    decode_request_overhead_s: float = 0.0
    """Time per request in a decode iteration on top of ``request_overhead_s``
    (per-sequence work of a decode step under serving load that isolated probe
    requests do not show). Fitted from SGLang's own decode-step counters on a
    loaded calibration window (``calibrate_cpu --loaded``); 0 on GPU profiles."""
    gemm_min_tokens: int = 0
    """With ``gemm_overhead_s``: iterations over at least this many new tokens
    pay that time once; 0 = off (see ``gemm_overhead_s``)."""
    gemm_overhead_s: float = 0.0
    """Extra time of an iteration whose linear layers run as matrix-matrix
    products: a CPU BLAS packs the weights for them (one more pass over the
    weights), while fewer tokens take the matrix-vector path."""
    overlap_compute_memory: bool = True
    """True: compute and memory traffic overlap, an iteration takes the larger
    of the two (the roofline). False: they add (one CPU core packs and streams
    the weights, then computes)."""
    kv_bandwidth_efficiency: float | None = None
    """Share of peak bandwidth KV-cache traffic reaches; null = ``bandwidth_efficiency``
    (on CPU the per-request gather and GQA copies make it far lower)."""
    synchronous_forward: bool = False
    """The forward pass runs on the scheduler's own thread (CPU). SGLang's
    overlap loop processes an iteration's results after launching the next
    iteration, so clients see an iteration's tokens when the next one ends
    (when one follows at once). Applied to simulated token times while the
    overlap scheduler runs (not under an option that turns it off)."""
    no_overlap_slowdown: float = 1.0
    """Iteration time with SGLang's overlap scheduler off over with it on: what an
    option that forces ``disable_overlap_schedule`` pays every iteration (1.0:
    the overlap hides nothing here). GPU profiles take SGLang's published gain of
    its overlap ("zero-overhead") scheduler, 1.1x throughput (SGLang v0.4 release
    notes, lmsys.org 2024-12-04): not measured here. CPU: 1.0, the forward pass
    runs on the scheduler's thread, so no device time hides the CPU work; there
    the overlap only delays when clients see tokens (``synchronous_forward``)."""
    mem_fraction_static: float = 0.85
    """SGLang's share of memory for weights + KV pool (the rest: activations)."""
    chunked_prefill_size: int = 8192
    """SGLang's default ``--chunked-prefill-size`` on this device."""
    max_total_tokens: int | None = None
    """Fixed KV pool size when the deployment sets ``--max-total-tokens``."""
    max_running_requests: int | None = None
    """Request slots of this device's server when its deployment fixes them
    (``--max-running-requests``; the CPU server's ``server.cpu_sglang``); null =
    SGLang's rule from the pool size. ``sim.max_running_requests`` wins."""
    overlap_schedule: bool = True
    """Whether this device's server runs SGLang's overlap scheduler unless an
    option turns it off. False: it is off by default (the CPU server,
    ``server.cpu_sglang.disable_overlap_schedule``); the fitted constants then
    already include what the overlap would hide, an option that forces it off
    pays nothing more, and no token is delayed (``synchronous_forward`` unused)."""


@dataclass
class ModelProfileConfig:
    """Published architecture numbers of one model."""

    name: str = MISSING
    """Name used in results."""
    hf_id: str = ""
    """Hugging Face id the numbers come from."""
    num_layers: int = MISSING
    hidden_size: int = MISSING
    num_attention_heads: int = MISSING
    num_kv_heads: int = MISSING
    head_dim: int = MISSING
    intermediate_size: int = MISSING
    vocab_size: int = MISSING
    tie_word_embeddings: bool = False
    context_length: int = MISSING
    """Maximum context (``max_position_embeddings``)."""
    num_params: float = MISSING
    """Published parameter count (checked against the architecture, 2%)."""


class DllmRounds(enum.Enum):
    """Rounds a diffusion LM's generation block takes (``bench/sim/dllm/blocks.py``)."""

    tiny_live = "tiny_live"
    """Measured on the random tiny SDAR: a block with ``k`` masks takes ``k + 1``."""
    confidence = "confidence"
    """Assumed: each mask clears the threshold with probability ``sim.dllm.confidence`` per step."""
    table = "table"
    """Assumed: weights of 2..``block_size + 1`` rounds per block (``sim.dllm.rounds_table``)."""


#: ``cpu_tiny``'s round time, ``base + block x blocks``: the tiny random SDAR's CPU server (fp32,
#: one thread) on a quiet machine, timed by ``bench.scripts.dwise_live``'s probe (bursts of 1..4
#: equal requests of known round count): 13.1 ms + 3.3 ms per block (1 / 4 blocks: 15-17 / 24-27 ms
#: over three runs). docs/dwise-notes.md §3.2's first probe, on a busy machine, gave ~30 ms per block.
CPU_TINY_BASE_S = 0.013
CPU_TINY_BLOCK_S = 0.0033


class DllmRoundCost(enum.Enum):
    """Seconds per dLLM round (``bench/sim/dllm/cost.py``)."""

    cpu_tiny = "cpu_tiny"
    """``round_base_s + round_block_s x blocks`` (defaults measured on the CPU tiny model)."""
    roofline = "roofline"
    """Assumed GPU: ``accelerator`` x ``model_profile``'s roofline over the round's blocks."""


class SpecAcceptance(enum.Enum):
    """Stated acceptance processes of speculative decoding (``bench/sim/speculative.py``).

    Each request draws its per-position acceptance ``p`` once (a Beta around
    the profile's mean); each step, the drafts it would accept are a
    geometric run (position ``i`` accepted with ``p`` given ``1..i-1`` were)."""

    ngram_cpu_chat = "ngram_cpu_chat"
    """SGLang's NGRAM on chat prompts, measured live on the CPU server
    (accept length 1.10-1.39: ``p`` about 0.2)."""
    ngram_repetitive = "ngram_repetitive"
    """NGRAM on repetitive text (a counting prompt measured 1.94: ``p`` about 0.5)."""
    eagle_chat = "eagle_chat"
    """An EAGLE-3-class draft model on chat (published accept lengths 3-4 at
    6-8 drafts: ``p`` about 0.75)."""
    eagle_code = "eagle_code"
    """An EAGLE-3-class draft model on code and math, where drafts are accepted
    more often than on chat (a stated rate, ``p`` about 0.85; not measured here)."""
    agentic_ngram = "agentic_ngram"
    """Suffix/n-gram drafting on agentic code editing (SuffixDecoding's
    reported rates: ``p`` about 0.85)."""


@dataclass
class SpecSimConfig:
    """Speculative decoding in the simulator, with ``+speculative=<option>``."""

    acceptance: SpecAcceptance = SpecAcceptance.ngram_cpu_chat
    """The acceptance process of the traffic (see ``SpecAcceptance``)."""
    acceptance_seed: int = 0
    """Seed of the per-request acceptance draws."""
    draft_s_per_step: float = 0.0
    """Drafting seconds per drafted position for the whole batch (a draft
    model's forward; 0 for NGRAM, which looks up its tables on the CPU)."""
    draft_s_per_token: float = 0.0
    """Drafting seconds per drafted token of each request (NGRAM's lookup)."""


@dataclass
class DllmSimConfig:
    """Simulate a diffusion LM's block rounds instead of an autoregressive model
    (``bench/sim/dllm``; SGLang 0.5.23's dLLM path, FDFO). Slots of SGLang's own
    scheduling: ``sim.max_running_requests`` (null = 1, SGLang's dLLM default);
    ``+policy=dwise`` brings its own slots and round capacity."""

    enabled: bool = False
    """Run the dLLM simulator (only ``+policy=dwise``, ``+policy=fcfs`` or none)."""
    block_size: int = 4
    """Positions per block (SGLang hard-codes 4 for SDAR)."""
    rounds_per_block: DllmRounds = DllmRounds.tiny_live
    """How many rounds each generation block takes (see ``DllmRounds``)."""
    confidence: float = 0.5
    """``confidence`` only: chance a mask clears the threshold at a step (0: one mask
    per step, like ``tiny_live``; 1: 2 rounds per block, like ``threshold: 0``)."""
    rounds_table: list[float] = field(default_factory=list)
    """``table`` only: weights of 2, 3, ..., ``block_size + 1`` rounds for a full block."""
    round_cost: DllmRoundCost = DllmRoundCost.cpu_tiny
    """How long a round takes (see ``DllmRoundCost``)."""
    round_base_s: float = CPU_TINY_BASE_S
    """``cpu_tiny``: fixed seconds per round (measured, ``CPU_TINY_BASE_S``)."""
    round_block_s: float = CPU_TINY_BLOCK_S
    """``cpu_tiny``: seconds per block in the round (measured, ``CPU_TINY_BLOCK_S``)."""
    max_new_tokens: int | None = None
    """Every request's ``max_new_tokens`` (longer trace outputs are cut to it; shorter
    ones stop at their length, as at EOS); null = each request's own output length."""
    seed: int = 0
    """Seed of the per-request rounds (the same request draws the same under every policy)."""
    oracle: bool = False
    """BENCH-ONLY: with ``+policy=dwise``, order by the hidden true remaining rounds
    instead of DWISE's estimates (``bench/sim/dllm/oracle.py``)."""


@dataclass
class HybridSimConfig:
    """Simulate a hybrid model (attention beside recurrent layers) whose cached prefix resumes
    only from a recurrent-state snapshot (``bench/sim/hybrid.py``; SGLang 0.5.23's unified radix
    cache: KV and states in separate device pools). The prefill cost and the KV pool stay the
    model profile's and ``sim.max_total_tokens``."""

    enabled: bool = False
    """Simulate the hybrid model's cache (``+cache=histate`` needs it)."""
    state_mb: float = 50.0
    """One snapshot, every recurrent layer (MB; ~51 for Qwen3.5-4B, sglang#39851)."""
    kv_fraction: float = 0.25
    """Share of the model profile's layers that keep KV (attention layers): scales the KV bytes
    per token an eviction order sees."""
    device_states: int = 64
    """State slots on the device for the cache (SGLang's ``--max-mamba-cache-size`` less the
    running requests' own)."""
    snapshot_every_tokens: int = 0
    """0: snapshots at chunk and prompt ends (SGLang's ``no_buffer``, the CPU's); N: also every
    N tokens of a prompt (``extra_buffer``'s ``--mamba-track-interval``; a multiple of the trace's
    block size)."""
    max_states_per_path: int = -1
    """SGLang's ``--mamba-max-states-per-path``: a new state drops the oldest on its path past
    this many (-1: no cap)."""
    host_states: int = 0
    """State slots of SGLang's host pool (HiCache; 0: none): a device state that goes is copied
    there if a slot is free (least recently used host state dropped first), read back at
    ``sim.host_bandwidth_gbs``."""
    marconi: bool = False
    """Model Marconi (MLSys'25) in place of SGLang's state admission and eviction: states
    kept only at prompt ends and at branch points a prefill passes again; the device state
    evicted first is the lowest in min-max normalised recency + ``marconi_alpha`` x normalised
    FLOP efficiency (recompute saved per byte, its tokens). KV stays least recently used."""
    marconi_alpha: float = 1.0
    """Marconi's weight of FLOP efficiency against recency."""
    ssd_read_gbs: float = 3.0
    """Read bandwidth of the snapshot store (``cache.snapshot_gb``, an order that ranks
    snapshots): a snapshot read back is charged ``state_mb`` at this rate before its pass."""


@dataclass
class SimConfig:
    """SGLang scheduler settings the simulator mirrors (defaults: SGLang's)."""

    max_total_tokens: int | None = None
    """KV pool size in tokens; null = from accelerator memory and the model."""
    chunked_prefill_size: int | None = None
    """Chunk budget per prefill pass; null = the accelerator's default, <= 0 = off."""
    max_prefill_tokens: int = 16384
    """Prefill tokens per pass (SGLang ``--max-prefill-tokens``)."""
    max_running_requests: int | None = None
    """Request slots; null = SGLang's rule from the pool size and context length."""
    prefill_max_requests: int | None = None
    """Most requests per prefill batch (SGLang ``--prefill-max-requests``)."""
    ignore_eos: bool = True
    """Requests always generate their full ``output_tokens`` (as replayed)."""
    schedule_conservativeness: float = 1.0
    init_new_token_ratio: float = 0.7
    """SGLang's SGLANG_INIT_NEW_TOKEN_RATIO."""
    min_new_token_ratio_factor: float = 0.14
    new_token_ratio_decay_steps: int = 600
    retract_decode_steps: int = 20
    """SGLang's SGLANG_RETRACT_DECODE_STEPS."""
    clip_max_new_tokens: int = 4096
    """SGLang's SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION."""
    in_batch_prefix_threshold: int = 32
    """SGLang's in-batch prefix check/deprioritize threshold (tokens)."""
    native_queue_limit: bool = True
    """Mirror native lpm/hrrn keeping the queue order while > 128 wait."""
    touch_waiting_prefixes: TouchMode = TouchMode.auto
    """Whether waiting requests keep their cached prefixes recent (see TouchMode)."""
    send_interval_s: float = 0.0002
    """The least time between two open-loop requests reaching the server: each
    arrives at ``max(its trace time, the previous one's + send_interval_s)``
    (``bench.sim.arrivals.paced``). A trace's timestamps have a resolution
    (Mooncake's: 1 ms, so bursts share one) and a client sends one request after
    another: an idle scheduler then wakes on a burst's first request and
    prefills it alone. 0.2 ms: the live client's median spacing within a burst
    (SGLang's bench_serving request function against the CPU server), measured
    on a window no other table replays (``bench/results/send_spacing.md``).
    0 = the trace's times as they are (a burst arrives at once)."""
    idle_poll_s: float = 0.05
    """While idle with only deferred requests, re-run admission this often."""
    drain_timeout_s: float = 600.0
    """With only deferred requests left and no arrival to come, give up on them
    this long after the last arrival or forward pass (they end ``unserved``)."""
    length_signal_log_std: float | None = None
    """Give each request a one-number feature, ``log(1+output) + N(mean, std)``,
    standing in for LEAP's hidden state (bench/sim/signal.py); null = no features.
    Use the live head's measured ``log_error_std`` with ``policy.feature_dim=1``."""
    length_signal_log_mean: float = 0.0
    """Bias of the length signal (the live head's ``log_error_mean``)."""
    length_signal_seed: int = 0
    """Seed of the per-request noise."""
    host_bandwidth_gbs: float = 50.0
    """Host-to-device copy bandwidth (GB/s) a host-tier restore runs at, serial
    with the prefill pass that needs it (about PCIe 5.0 x16 with pinned
    memory); the tier's size is ``cache.host_tier_tokens`` (Switchboard's, in
    the gap cache) or ``sim.hicache_tokens`` (SGLang's own)."""
    hicache_tokens: int = 0
    """SGLang's own host tier (HiCache: ``sglang.enable_hierarchical_cache`` on the
    server), modelled: tokens of host memory keeping what a tail-first cache
    evicts, restored instead of recomputed; 0 = none. NOTE: refused with a
    cache that holds gaps, as the server refuses HiCache beside the gap cache."""
    disable_overlap_schedule: bool = False
    """Run the simulated server without SGLang's overlap scheduler, as the user's
    ``sglang.disable_overlap_schedule=true`` runs the live one: charged like an option
    that forces it (``overlap.overlap_charged``). The control row of an option that
    forces the flag: stock under the same flags."""
    ssd_read_gbs: float = 7.0
    """With ``+tier`` and an SSD level: its read bandwidth (GB/s; about a PCIe 4.0
    NVMe drive). Reads and writes queue on one device (``bench/sim/tiers.py``)."""
    ssd_write_gbs: float = 5.0
    """The SSD level's write bandwidth (GB/s): backups and demotions, in the background."""
    ssd_read_latency_s: float = 1e-4
    """Fixed cost of each read request to the SSD (one per stored page, or one per
    segment with an option that stores sessions contiguously)."""
    ssd_page_tokens: int = 64
    """Tokens per stored page without segments, one read each (SGLang's storage
    keeps one object per KV page; 64: a common page size with storage)."""
    adapters_count: int = 0
    """With ``+adapters``: adapters the requests use (``bench/sim/adapters.py``:
    drawn per session, or per request, by a stable hash); 0 = every request
    uses the base model."""
    adapters_zipf_s: float = 1.0
    """Popularity skew of the adapters (weight of rank ``k``: ``1/(k+1)^s``)."""
    adapters_base_share: float = 0.0
    """Share of sessions (or requests) that use the base model."""
    adapters_seed: int = 0
    """Seed of the adapter assignment."""
    adapter_load_s: float = 0.002
    """Time to load one adapter into a batch slot, serial with the forward pass
    that needs it (a rank-16 all-linear adapter of a 7B model is ~40 MB: about
    1 ms over PCIe 5.0; the default leaves room for the copy's setup)."""
    replicas: int = 1
    """SGLang servers behind SMG, the gateway, which routes each arriving
    request with ``+router=<option>`` (``bench/sim/cluster.py``); each replica
    has every setting above. 1 without ``+router``: one server, no gateway."""
    routing_key: RoutingKey = RoutingKey.none
    """What clients send as ``x-smg-routing-key`` (``consistent_hashing`` and
    ``prefix_hash`` route on it): nothing, or the session id."""
    router_seed: int = 0
    """Seed of the gateway's random draws (ties, misses, ``random``)."""
    dllm: DllmSimConfig = field(default_factory=DllmSimConfig)
    """A diffusion LM's block rounds instead (``sim.dllm.enabled=true``)."""
    hybrid: HybridSimConfig = field(default_factory=HybridSimConfig)
    """A hybrid model's recurrent-state snapshots (``sim.hybrid.enabled=true``)."""
    spec: SpecSimConfig = field(default_factory=SpecSimConfig)
    """Speculative decoding's acceptance and drafting cost (with ``+speculative``)."""


class LiveApi(enum.Enum):
    """Which endpoint a live replay sends its token-id prompts to."""

    completions = "completions"
    """OpenAI ``/v1/completions`` (any OpenAI-compatible server); no per-request
    cached-token counts."""
    generate = "generate"
    """SGLang's native ``/generate`` (``input_ids``); reports each request's
    cached prompt tokens."""


@dataclass
class LiveConfig:
    """Live replay against a real server, and the request shape it needs.

    The length fields shape the trace for a small model in *both* modes, so a
    simulated run with the same ``live.*`` lengths replays exactly the requests
    a live run sends. With ``endpoint`` null and every length field at its
    default, the trace is replayed unchanged, as before.
    """

    endpoint: str | None = None
    """Base URL of the server (``http://127.0.0.1:30000``); null = simulate."""
    api: LiveApi = LiveApi.completions
    """Endpoint kind (see ``LiveApi``)."""
    model: str = "default"
    """Model name sent with completions requests."""
    input_scale: float = 1.0
    """Multiply prompt lengths, and the trace's block size with them (Mooncake's
    512-token blocks become 16-token blocks at 0.03125); block size times the
    scale must be a whole number."""
    output_scale: float = 1.0
    """Multiply output lengths."""
    max_input_tokens: int | None = None
    """Cut longer (scaled) prompts to this many tokens, keeping their leading blocks."""
    max_output_tokens: int | None = None
    """Cap (scaled) output lengths."""
    token_id_low: int = 17
    """Lowest prompt token id (SmolLM2's special tokens are ids 0-16)."""
    token_id_high: int | None = None
    """One past the highest prompt token id; null = ``model_profile.vocab_size``
    (set it below special tokens at the top of a vocabulary: 128000 for Llama 3)."""
    seed: int = 0
    """Seed of the synthesized prompt tokens."""
    keep_special_tokens: bool = True
    """Send ``skip_special_tokens: false`` (SGLang and vLLM read it) so every
    generated token streams as text and is timed; false for a strict OpenAI server."""
    extra_body: dict[str, Any] = field(default_factory=dict)
    """Extra sampling fields: request-body fields for ``completions``,
    ``sampling_params`` for ``generate``."""
    warmup_requests: int = 2
    """Short unrecorded requests sent first (the first forward passes are slow)."""
    flush_cache: bool = True
    """Flush the server's prefix cache after warm-up (SGLang ``/flush_cache``;
    a warning where the server has none)."""
    request_timeout_s: float = 1800.0
    """A request still unanswered after this long counts as ``aborted``."""
    loads_interval_s: float = 1.0
    """Poll SGLang's ``/v1/loads`` this often for the queue timeline; 0 = off."""


@dataclass
class MetricsConfig:
    """SLOs and time windows of the reported metrics."""

    ttft_slo_s: float = 2.0
    """A request meets its SLO with TTFT at most this..."""
    tpot_slo_s: float = 0.1
    """... and time per output token at most this."""
    window_s: float = 60.0
    """Width of the time windows metrics are also reported per."""
    timeline_dt_s: float = 1.0
    """Queue length and KV use are sampled this often."""


@dataclass
class OutputConfig:
    """What a run writes into its results folder."""

    plots: bool = True
    """PNG plots (TTFT CDF, metrics over time windows)."""
    requests_csv: bool = True
    """Per-request records as CSV."""
    progress: bool = True
    """A progress bar on stderr while replaying."""


def register_bench_schemas() -> None:
    """Store the schema nodes in Hydra's ConfigStore (idempotent)."""
    cs = ConfigStore.instance()
    cs.store(group="_schema", name="bench_trace", node=TraceConfig)
    cs.store(group="_schema", name="bench_accelerator", node=AcceleratorConfig)
    cs.store(group="_schema", name="bench_model_profile", node=ModelProfileConfig)
    cs.store(group="_schema", name="bench_sim", node=SimConfig)
    cs.store(group="_schema", name="bench_live", node=LiveConfig)
    cs.store(group="_schema", name="bench_metrics", node=MetricsConfig)
    cs.store(group="_schema", name="bench_output", node=OutputConfig)
