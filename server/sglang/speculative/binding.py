"""Server binding of the speculative kind (``+speculative``): SGLang's NGRAM path.

Launch: SGLang's NGRAM speculation under Switchboard's plugin algorithm
(``algorithm.py``), drafting chains (breadth 1) of up to
``speculative.max_draft_tokens`` tokens, with overlap scheduling off (the
draft length changes between steps; ``worker.py``). Install: on CPU, the
torch kernels (``kernels.py``), the tree-masked verify (``verify_attention.py``)
and SGLang's native KV move; everywhere, the policy and its host
(``controller.py``), seeded from ``speculative.table_path``.

NOTE: EAGLE/EAGLE3 (a draft model, GPU only: SGLang's torch-native attention
refuses them) are refused here until the GPU path has run on a GPU.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from compose.config import ConfigError
from compose.specs import build_policy
from policies.speculative import SpeculativeHostConfig, load_step_table
from policies.speculative.host import seed_from_table
from server.sglang.launch.binding import ForcedFlag, LaunchFields, SchedulerParts
from server.sglang.speculative.symbols import SPECULATIVE_SYMBOLS

if TYPE_CHECKING:
    from compose.specs import PolicySpec
    from server.resolve import LaunchPlan


class SpeculativeBinding:
    """``+speculative``: NGRAM with a per-step draft length."""

    symbols = SPECULATIVE_SYMBOLS
    """Its rows of the hook contract (SGLang's speculative registry, NGRAM worker, torch-native
    verify); the CPU kernels' importers are checked by ``kernels.install``."""

    def launch(self, spec: PolicySpec, launch: LaunchFields) -> list[ForcedFlag]:
        from server.sglang.speculative.algorithm import ALGORITHM

        host: SpeculativeHostConfig = spec.host_settings()
        if host.algorithm != "NGRAM":
            raise ConfigError(
                f"invalid value for 'speculative.algorithm': {host.algorithm} (a draft model) is not served yet: "
                "SGLang's CPU attention refuses draft models and the GPU path has not run on a GPU; "
                "use speculative.algorithm=NGRAM")
        try:
            load_step_table(host.table_path)  # NOTE: refused here, before SGLang starts
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        return [
            ForcedFlag("speculative_algorithm", ALGORITHM, "NGRAM drafts with a draft length per step", control=False),
            ForcedFlag("speculative_num_draft_tokens", host.max_draft_tokens + 1,
                       "speculative.max_draft_tokens + 1 (the root and the drafts)", control=False),
            # NOTE: chains: the first k+1 nodes of a chain are a chain (worker.truncate_drafts)
            ForcedFlag("speculative_ngram_max_bfs_breadth", 1, "chains of drafts", control=False),
            ForcedFlag("speculative_ngram_min_bfs_breadth", 1, "chains of drafts", control=False),
            ForcedFlag("disable_overlap_schedule", True, "the draft length changes between steps"),
        ]

    def install(self, spec: PolicySpec, plan: LaunchPlan, parts: SchedulerParts) -> None:
        from server.sglang.speculative import algorithm, worker
        from server.sglang.speculative.controller import DraftLengthHost

        if plan.device == "cpu":
            from server.sglang.speculative import kernels, verify_attention

            kernels.install()
            verify_attention.install()
            # NOTE: SGLang's KV move after verify has no CPU kernel; its native path is torch.
            os.environ["SGLANG_NATIVE_MOVE_KV_CACHE"] = "1"
        algorithm.register_algorithm()
        host: SpeculativeHostConfig = spec.host_settings()
        policy = build_policy(spec)
        try:
            seed_from_table(policy, host.table_path)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        worker.HOST = DraftLengthHost(policy, host.candidates, host.step_log)
        parts.policies.append(policy)
        parts.installed.append(f"speculative={spec.target}")

    def extend_cli(self) -> None:
        from server.sglang.speculative.algorithm import register_algorithm

        register_algorithm()


BINDING = SpeculativeBinding()
