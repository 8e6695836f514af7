"""The decisions kind's rows of the hook contract (``DecisionsBinding.symbols``).

A leaf module (no SGLang import): startup checks every row in every SGLang
process (``launch/contract.py``), the kind chosen or not.
"""

from __future__ import annotations

from server.sglang.launch.symbols import POLICY, HookedSymbol

_SD = "sglang.srt.entrypoints.openai.serving_decisions"
_SCORE = "sglang.srt.managers.tokenizer_manager_score_mixin"
#: The decision route's scoring step, which ``serving.py`` answers by packing.
SCORE_TARGET = f"{_SD}.OpenAIServingDecisions._score"
#: Where the route renders and encodes one question (``serving.py`` encodes the shared input once).
ENCODE_TARGET = f"{_SD}.OpenAIServingDecisions._encode_question"
#: Where a forward batch is built from the scheduler's batch (``layout.py`` rewrites positions).
INIT_NEW_TARGET = "sglang.srt.model_executor.forward_batch_info.ForwardBatch.init_new"
#: The torch-native extend attention (``attention.py`` masks packed rows).
EXTEND_TARGET = "sglang.srt.layers.attention.torch_native_backend.TorchNativeAttnBackend.forward_extend"
#: LFM2's short conv (``conv.py`` restarts packed rows' questions from the context's end).
CONV_TARGET = "sglang.srt.models.lfm2.Lfm2ShortConv.forward"

DECISIONS_SYMBOLS: tuple[HookedSymbol, ...] = (
    # serving.py: the route, its encoder and SGLang's own score arithmetic
    HookedSymbol(SCORE_TARGET, ("self", "adapted_request", "raw_request", "temperature")),
    HookedSymbol(f"{_SD}.OpenAIServingDecisions"),
    HookedSymbol(f"{_SD}._encode_all", ("encoded",)),
    HookedSymbol(ENCODE_TARGET, ("self", "content", "labels", "chat_template_kwargs", "images", "system")),
    HookedSymbol(f"{_SCORE}.ScoreResult"),
    HookedSymbol(f"{_SCORE}.TokenizerManagerScoreMixin._convert_logprobs_to_scores",
                 ("self", "logprobs", "label_token_ids", "apply_softmax", "temperature")),
    HookedSymbol(f"{_SCORE}.TokenizerManagerScoreMixin._extract_logprobs_for_tokens",
                 ("self", "logprobs_data", "label_token_ids")),
    HookedSymbol("sglang.srt.managers.io_struct.GenerateReqInput"),
    HookedSymbol("sglang.srt.configs.hybrid_arch.mambaish_config", ("model_config",)),
    # layout.py: positions and readouts of packed rows
    HookedSymbol(INIT_NEW_TARGET, ("batch", "model_runner", "capture_hidden_mode",
                                   "return_hidden_states_before_norm", "extend_position_info",
                                   "spec_mrope_positions", "kv_loc_plan", "write_cols")),
    # attention.py: the segment mask
    HookedSymbol(EXTEND_TARGET, ("self", "q", "k", "v", "layer", "forward_batch", "save_kv_cache")),
    HookedSymbol("sglang.srt.mem_cache.memory_pool.KVWriteLoc"),
    # conv.py: packed rows through LFM2's short conv (SGLang's varlen kernel, twice)
    HookedSymbol(CONV_TARGET, ("self", "hidden_states", "forward_batch")),
    HookedSymbol("sglang.srt.layers.attention.mamba.causal_conv1d.causal_conv1d_fn",
                 ("x", "weight", "bias", "query_start_loc", "cache_indices", "has_initial_state", "conv_states",
                  "activation", "pad_slot_id", "kwargs")),
    HookedSymbol("sglang.srt.model_executor.forward_context.get_attn_backend", ()),
    HookedSymbol("sglang.srt.layers.attention.hybrid_linear_attn_backend.ShortConvHybridAttnBackend"
                 ".conv_state_metadata", ("self", "layer_id", "forward_batch")),
    # NOTE: a NamedTuple's signature is its fields: layer_cache, cache_indices, has_initial_state are read
    HookedSymbol("sglang.srt.layers.attention.linear.short_conv_backend.ShortConvMetadata",
                 ("layer_cache", "cache_indices", "query_start_loc", "has_initial_state", "slot_ids_cpu",
                  "has_prefix_cpu")),
    # admission.py: never chunk a packed request; insert only its context
    HookedSymbol(f"{POLICY}.PrefillAdder._select_prefill_admission",
                 ("self", "req", "total_tokens", "host_hit_length", "swa_host_hit_length",
                  "truncation_align_size", "has_chunked_req")),
    HookedSymbol(f"{POLICY}.AddReqResult"),
    HookedSymbol("sglang.srt.mem_cache.base_prefix_cache.BasePrefixCache.checkpoint",
                 ("self", "req", "up_to", "kwargs")),
)
