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
#: Where a forward batch is built from the scheduler's batch (``layout.py`` rewrites positions).
INIT_NEW_TARGET = "sglang.srt.model_executor.forward_batch_info.ForwardBatch.init_new"
#: The torch-native extend attention (``attention.py`` masks packed rows).
EXTEND_TARGET = "sglang.srt.layers.attention.torch_native_backend.TorchNativeAttnBackend.forward_extend"

DECISIONS_SYMBOLS: tuple[HookedSymbol, ...] = (
    # serving.py: the route, its encoder and SGLang's own score arithmetic
    HookedSymbol(SCORE_TARGET, ("self", "adapted_request", "raw_request", "temperature")),
    HookedSymbol(f"{_SD}.OpenAIServingDecisions"),
    HookedSymbol(f"{_SD}._encode_all", ("encoded",)),
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
    # admission.py: never chunk a packed request; insert only its context
    HookedSymbol(f"{POLICY}.PrefillAdder._select_prefill_admission",
                 ("self", "req", "total_tokens", "host_hit_length", "swa_host_hit_length",
                  "truncation_align_size", "has_chunked_req")),
    HookedSymbol(f"{POLICY}.AddReqResult"),
    HookedSymbol("sglang.srt.mem_cache.base_prefix_cache.BasePrefixCache.checkpoint",
                 ("self", "req", "up_to", "kwargs")),
)
