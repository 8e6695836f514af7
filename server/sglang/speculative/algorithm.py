"""``SWITCHBOARD_NGRAM``: SGLang's NGRAM with a per-step draft length, as a plugin algorithm.

Registered through SGLang's own extension point
(``SpeculativeAlgorithm.register``, ``speculative/spec_registry.py``) with a
spec class that answers ``is_ngram()``: every NGRAM branch of SGLang's
scheduler, memory reservation and batch preparation runs unchanged, and its
server-args handling is SGLang's own ``_handle_ngram``. Only the worker
differs (``worker.py``).

NOTE: registered in every process that parses or validates SGLang's server
args (the launcher's ``extend_cli``, every SGLang process's ``install``);
registering twice is a no-op.
"""

from __future__ import annotations

from typing import Any

ALGORITHM = "SWITCHBOARD_NGRAM"


def register_algorithm() -> None:
    """Register ``ALGORITHM`` in this process (idempotent; imports SGLang)."""
    from sglang.srt.arg_groups.speculative_hook import _handle_ngram
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.speculative.spec_registry import CustomSpecAlgo, get_spec

    if get_spec(ALGORITHM) is not None:
        return

    class NgramLike(CustomSpecAlgo):  # type: ignore[misc]  # NOTE: SGLang is untyped
        """Answers every question SGLang asks of an algorithm as its NGRAM does,
        but for the worker (``create_worker`` -> ``worker.py``).

        NOTE: ``CustomSpecAlgo`` conforms to the enum's ``is_*``/``supports_*``
        only; SGLang 0.5.23 also calls ``carries_draft_hidden_states``,
        ``need_topk`` and ``get_platform_worker_cls`` on it. Any name it lacks
        is NGRAM's (``__getattr__``); the two where its defaults differ from
        NGRAM's are overridden."""

        def is_ngram(self) -> bool:
            return True

        def has_draft_kv(self) -> bool:
            return False

        def __getattr__(self, name: str) -> Any:
            return getattr(SpeculativeAlgorithm.NGRAM, name)

        def handle_server_args(self, server_args: Any) -> None:
            _handle_ngram(server_args)

    def factory(server_args: Any) -> type:
        from server.sglang.speculative.worker import worker_class

        return worker_class()

    SpeculativeAlgorithm.register(ALGORITHM, supports_overlap=False, spec_class=NgramLike)(factory)
