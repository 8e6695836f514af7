"""Finished-request feedback and explicit session ends, from SGLang to learning policies.

A chosen policy that implements ``ObservesFinished`` hears about every request
once, when it leaves SGLang: finished (from the output streamer, which every
finished request passes through) or aborted while queued (from
``send_abort_output``). One that implements ``EndsSessions`` hears SGLang's own
``/close_session`` call (``Scheduler.close_session``).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from typing import Any

from sglang.srt.managers.schedule_batch import FINISH_ABORT

from policies.feedback import FinishedView, ObservesFinished, PredictsOutputLength
from server.sglang.scheduling.capture import features_of
from server.sglang.scheduling.dllm_counts import finished_dllm_view
from server.sglang.scheduling.hook_clock import HOOK_CLOCK
from server.sglang.scheduling.state import state_of


def finished_view(req: Any, aborted: bool) -> FinishedView:
    """A ``FinishedView`` of an SGLang ``Req`` leaving the system."""
    return FinishedView(
        rid=req.rid, now=time.perf_counter(),
        num_input_tokens=len(req.origin_input_ids), num_output_tokens=len(req.output_ids),
        num_cached_tokens=int(getattr(req, "cached_tokens", 0) or 0),
        session_id=getattr(req, "session_id", None), aborted=aborted, features=features_of(req),
        dllm=finished_dllm_view(req),
    )


class FinishReporter:
    """Tells the observing policies about each request once; optionally logs it.

    With ``log_path``, every reported request is appended to a JSONL file as the
    policies saw it (features included) together with what a policy's length
    predictor, if it has one, predicted for it *before* learning from it: the
    raw material of LEAP's learning curve and of trace replays.
    """

    def __init__(self, policies: Sequence[Any], log_path: str | None = None) -> None:
        self.observers = [p for p in policies if isinstance(p, ObservesFinished)]
        self.log = open(log_path, "a", buffering=1) if log_path else None

    @property
    def active(self) -> bool:
        return bool(self.observers) or self.log is not None

    def report(self, req: Any, aborted: bool) -> None:
        state = state_of(req)
        if not self.active or state.reported:
            return
        state.reported = True  # NOTE: a request is reported once
        view = finished_view(req, aborted)
        if self.log is not None:
            self._write(view)
        for policy in self.observers:
            policy.observe_finished(view)

    def _write(self, view: FinishedView) -> None:
        record = dataclasses.asdict(view)
        for policy in self.observers:
            if isinstance(policy, PredictsOutputLength) and view.features is not None:
                record["predicted_output_tokens"] = policy.predict_output_tokens(view.features)
        assert self.log is not None  # NOTE: report() writes only with a log
        self.log.write(json.dumps(record) + "\n")

    def report_finished(self, reqs: Sequence[Any]) -> None:
        for req in reqs:
            if req.finished():
                self.report(req, isinstance(req.finished_reason, FINISH_ABORT))


def streamer_class(base: type, reporter: FinishReporter) -> type:
    """SGLang's output streamer, also reporting the requests that finish."""

    class ReportingOutputStreamer(base):
        def stream_output(self, reqs: list[Any], return_logprob: bool, skip_req: Any = None) -> None:
            super().stream_output(reqs, return_logprob, skip_req)
            t = time.perf_counter()
            reporter.report_finished([r for r in reqs if r is not skip_req])
            HOOK_CLOCK.add("finished", time.perf_counter() - t)

    return ReportingOutputStreamer
