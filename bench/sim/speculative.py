"""``+speculative``: speculative decoding in the simulator (the kind's binding).

The server drafts in SGLang's decode step and verifies the drafts in the same
forward; the simulator mirrors that on its decode-step event
(``events.DraftsDecode``, ``Simulator._run_speculative_decode``):

* before the step, the policy answers the draft length ``k`` for the decode
  batch size (``SpecStepView``; candidates ``0..speculative.max_draft_tokens``);
* the step costs the cost model's ``verify_time`` (every request computes
  ``k + 1`` positions over its context) plus drafting
  (``sim.spec.draft_s_per_step * k`` for the batch, ``draft_s_per_token * k``
  per request);
* each request keeps one token plus the drafts it accepts: a stated process
  (``sim.spec.acceptance``): per request a per-position acceptance ``p``
  drawn once from a Beta around the profile's mean, per step a geometric run
  of accepted positions, cut at ``k``. NOTE: a request's runs come from its
  own seeded stream, one draw per step whatever ``k`` is, so two policies see
  the same traffic (common random numbers);
* the policy observes each step (``SpecOutcome``: the length, accepted per
  request, the step's simulated seconds).
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from bench.schema import SpecAcceptance
from bench.sim.binding import Scope, SimParts
from compose.config import ConfigError
from compose.specs import build_policy
from policies.feedback import FinishedView
from policies.speculative import SpeculationPolicy, SpeculativeHostConfig
from policies.speculative.host import SpeculationHost, seed_from_table

if TYPE_CHECKING:
    from bench.config import BenchSettings
    from bench.schema import SpecSimConfig
    from bench.sim.request import SimRequest
    from compose.specs import PolicySpec

#: Mean per-position acceptance of each stated process (``SpecAcceptance`` says where from).
MEAN_ACCEPTANCE = {
    SpecAcceptance.ngram_cpu_chat: 0.2,
    SpecAcceptance.ngram_repetitive: 0.5,
    SpecAcceptance.eagle_chat: 0.75,
    SpecAcceptance.eagle_code: 0.85,
    SpecAcceptance.agentic_ngram: 0.85,
}
#: Beta concentration of the per-request draw (requests differ around the mean).
CONCENTRATION = 8.0

SPEC_STEPS = "spec_steps"
SPEC_DRAFTED = "spec_drafted_tokens"
SPEC_ACCEPTED = "spec_accepted_tokens"


class AcceptanceProcess:
    """Per request: ``p`` drawn once, then a geometric run of accepted drafts per step."""

    def __init__(self, mean: float, seed: int, longest: int) -> None:
        self.mean, self.seed, self.longest = mean, seed, longest
        self._streams: dict[str, tuple[float, random.Random]] = {}

    def run(self, rid: str) -> int:
        """The drafts ``rid`` would accept this step if ``longest`` were drafted."""
        p, rng = self._stream(rid)
        n = 0
        while n < self.longest and rng.random() < p:
            n += 1
        return n

    def rate(self, rid: str) -> float:
        """``rid``'s per-position acceptance."""
        return self._stream(rid)[0]

    def forget(self, rid: str) -> None:
        """Drop ``rid``'s stream (it finished)."""
        self._streams.pop(rid, None)

    def _stream(self, rid: str) -> tuple[float, random.Random]:
        got = self._streams.get(rid)
        if got is None:
            rng = random.Random(zlib.crc32(rid.encode()) ^ (self.seed * 0x9E3779B1))
            m = self.mean
            p = rng.betavariate(m * CONCENTRATION, (1 - m) * CONCENTRATION) if 0 < m < 1 else m
            got = self._streams[rid] = (p, rng)
        return got


class SpeculationSeam:
    """The decode-step seam: asks the policy, draws acceptance, reports outcomes."""

    def __init__(self, policy: SpeculationPolicy, host: SpeculativeHostConfig, sim: SpecSimConfig) -> None:
        self.host = SpeculationHost(policy, host.candidates)
        self.sim = sim
        self.acceptance = AcceptanceProcess(MEAN_ACCEPTANCE[sim.acceptance], sim.acceptance_seed,
                                            host.max_draft_tokens)
        self._counts = {SPEC_STEPS: 0, SPEC_DRAFTED: 0, SPEC_ACCEPTED: 0}

    def plan_step(self, batch: Sequence[SimRequest]) -> tuple[int, float]:
        k = self.host.ask(len(batch))
        return k, k * (self.sim.draft_s_per_step + self.sim.draft_s_per_token * len(batch))

    def step_verified(self, batch: Sequence[SimRequest], draft: int, step_s: float) -> list[int]:
        runs = [self.acceptance.run(r.rid) for r in batch]
        accepted = [min(a, draft) for a in runs]
        self.host.report(draft, accepted, step_s)
        self._counts[SPEC_STEPS] += 1
        self._counts[SPEC_DRAFTED] += draft * len(batch)
        self._counts[SPEC_ACCEPTED] += sum(accepted)
        return accepted

    def observe_finished(self, view: FinishedView) -> None:
        """A request left: its acceptance stream is dropped (a long trace would keep them all)."""
        self.acceptance.forget(view.rid)

    def counters(self) -> dict[str, int]:
        return dict(self._counts)


class _SpeculativeBinding:
    """``+speculative``: the decode step's drafter."""

    scope = Scope.replica
    counters = (SPEC_STEPS, SPEC_DRAFTED, SPEC_ACCEPTED)

    def attach(self, spec: PolicySpec, settings: BenchSettings, parts: SimParts) -> None:
        host: SpeculativeHostConfig = spec.host_settings()
        policy = build_policy(spec)
        try:
            seed_from_table(policy, host.table_path)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        seam = SpeculationSeam(policy, host, settings.sim.spec)
        parts.seams.append(seam)
        parts.observers.append(seam)
        # NOTE: the server's drafter forces disable_overlap_schedule (server/sglang/speculative/binding.py)
        parts.overlap_off.append(f"+speculative ({spec.target}): the draft length changes between steps")


BINDING = _SpeculativeBinding()
