"""The speculative kind's rows of the hook contract (``SpeculativeBinding.symbols``).

A leaf module (no SGLang import): startup checks every row in every SGLang
process (``launch/contract.py``), the kind chosen or not.
"""

from __future__ import annotations

from server.sglang.launch.symbols import HookedSymbol

_SPEC = "sglang.srt.speculative"
#: The torch-native attention method whose verify batches ``verify_attention.py`` answers.
VERIFY_TARGET = "sglang.srt.layers.attention.torch_native_backend.TorchNativeAttnBackend.forward_extend"
_NGRAM = f"{_SPEC}.ngram_worker.NGRAMWorker"

SPECULATIVE_SYMBOLS: tuple[HookedSymbol, ...] = (
    # algorithm.py: the plugin algorithm, dispatched as NGRAM
    HookedSymbol(f"{_SPEC}.spec_info.SpeculativeAlgorithm.register",
                 ("name", "supports_overlap", "validate_server_args", "spec_class")),
    HookedSymbol(f"{_SPEC}.spec_registry.CustomSpecAlgo.is_ngram", ("self",)),
    HookedSymbol(f"{_SPEC}.spec_registry.CustomSpecAlgo.handle_server_args", ("self", "server_args")),
    HookedSymbol(f"{_SPEC}.spec_registry.get_spec", ("name",)),
    HookedSymbol("sglang.srt.arg_groups.speculative_hook._handle_ngram", ("server_args",)),
    # worker.py: the per-step width
    HookedSymbol(f"{_NGRAM}._init_preallocated_tensors", ("self",)),
    HookedSymbol(f"{_NGRAM}._prepare_draft_tokens", ("self", "batch")),
    HookedSymbol(f"{_NGRAM}._prepare_for_speculative_decoding", ("self", "batch")),
    HookedSymbol(f"{_NGRAM}.forward_batch_generation", ("self", "batch", "on_publish", "pp_proxy_tensors")),
    HookedSymbol(f"{_NGRAM}.on_verify_complete_cpu", ("self", "num_correct_drafts_per_req", "batch_size")),
    HookedSymbol("sglang.srt.managers.utils.GenerationBatchResult.speculative_output_stride"),
    # verify_attention.py: the tree-masked verify on the CPU path
    HookedSymbol(VERIFY_TARGET, ("self", "q", "k", "v", "layer", "forward_batch", "save_kv_cache")),
    HookedSymbol("sglang.srt.mem_cache.memory_pool.KVWriteLoc"),
)
