"""Sending one token-id prompt with SGLang's own benchmark client, and scoring it.

The request functions of ``sglang.benchmark.serving`` (``bench_serving``) do the
HTTP, the streaming and the timing (TTFT from the POST, one inter-token gap per
streamed token); this module only picks one, feeds it, and turns its
``RequestFuncOutput`` into the ``RequestRecord`` the metrics score:

==================== ================================ ==============================
``live.api``          function                         cached tokens per request
==================== ================================ ==============================
``completions``       ``async_request_openai_completions``  not reported (None): its
                                                       parser cannot take SGLang's
                                                       usage chunk (``choices: []``)
``generate``          ``async_request_sglang_generate``     ``meta_info.cached_tokens``
==================== ================================ ==============================

Both send ``ignore_eos`` and temperature 0, so every request generates exactly
its ``max_tokens``, and by default ``skip_special_tokens: false``, so a special
token streams as text too (bench_serving times only chunks with text). A token
the server holds back (an incomplete UTF-8 sequence) still streams with the
next one: ``completions`` then merges the two gaps, ``generate`` splits them
evenly by its token count. ``sglang.benchmark.serving`` is imported on first
use (it pulls in SGLang's runtime; no GPU and no ``sgl_kernel`` are needed).
"""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypedDict

import numpy as np

from bench.metrics import RequestRecord
from bench.schema import LiveApi, LiveConfig
from bench.traces.trace import TraceRequest

#: HTTP reason phrase of an admission rejection (our server's ``+admission=``: 429).
REJECTED_REASON = "Too Many Requests"


def bench_serving() -> Any:
    """``sglang.benchmark.serving``, with the module-global ``args`` its request
    functions read set once (the CLI normally sets it from its own flags)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SGLang's import-time notes about CUDA-only kernels
        # NOTE: the one SGLang import of bench/ outside the seam benchmarks: a live
        # replay measures with SGLang's own benchmark client, so its TTFT/ITL are
        # timed exactly as `python -m sglang.bench_serving` times them.
        import sglang.benchmark.serving as bs
    # NOTE: every attribute the two request functions read, with the CLI's
    # defaults except: streaming on, EOS ignored, greedy, cached tokens reported.
    bs.set_global_args(argparse.Namespace(
        disable_stream=False, disable_ignore_eos=False, temperature=0.0, top_p=1.0,
        return_logprob=False, top_logprobs_num=0, logprob_start_len=-1, token_ids_logprob=None,
        return_routed_experts=False, cache_report=True, header=None,
    ))
    return bs


@dataclass(frozen=True)
class Endpoint:
    """Where and how requests are sent (the ``live`` config's request fields)."""

    base_url: str
    api: LiveApi = LiveApi.completions
    model: str = "default"
    keep_special_tokens: bool = True
    extra_body: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, live: LiveConfig) -> Endpoint:
        assert live.endpoint is not None
        return cls(live.endpoint.rstrip("/"), LiveApi(live.api), live.model,
                   live.keep_special_tokens, dict(live.extra_body))

    @property
    def url(self) -> str:
        return self.base_url + ("/generate" if self.api is LiveApi.generate else "/v1/completions")

    @property
    def reports_cached_tokens(self) -> bool:
        return self.api is LiveApi.generate

    def extra_request_body(self, output_len: int) -> dict[str, Any]:
        """Fields added to bench_serving's own payload."""
        extra = dict(self.extra_body)
        if self.keep_special_tokens:
            extra["skip_special_tokens"] = False
        if self.api is LiveApi.completions:
            return extra
        # NOTE: replaces bench_serving's sampling_params (a later key of its payload
        # dict), so the fields it sets itself are repeated here.
        return {"sampling_params": {"temperature": 0.0, "max_new_tokens": output_len,
                                    "ignore_eos": True, **extra}}


class RequestOutput(Protocol):
    """What bench/ reads of bench_serving's ``RequestFuncOutput`` (a dataclass of
    SGLang's, whose names mypy sees as ``Any``); read only."""

    @property
    def success(self) -> bool: ...
    @property
    def error(self) -> str: ...
    @property
    def start_time(self) -> float:
        """When the request was sent (``perf_counter``)."""
    @property
    def ttft(self) -> float: ...
    @property
    def itl(self) -> Sequence[float]:
        """Gaps between streamed tokens after the first."""
    @property
    def output_len(self) -> int: ...
    @property
    def cached_tokens(self) -> int: ...


class Client:
    """Sends one prompt through bench_serving's request function for the endpoint."""

    def __init__(self, endpoint: Endpoint, module: Any | None = None) -> None:
        self.endpoint = endpoint
        bs = module if module is not None else bench_serving()
        self._input = bs.RequestFuncInput
        self._send = (bs.async_request_sglang_generate if endpoint.api is LiveApi.generate
                      else bs.async_request_openai_completions)

    async def send(self, prompt: list[int], output_len: int) -> RequestOutput:
        """Stream one request; bench_serving's ``RequestFuncOutput`` (never raises
        for HTTP or server errors: ``success`` is False and ``error`` says why)."""
        ep = self.endpoint
        request = self._input(
            prompt=prompt, api_url=ep.url, prompt_len=len(prompt), output_len=output_len,
            model=ep.model, lora_name="", image_data=None,
            extra_request_body=ep.extra_request_body(output_len))
        # NOTE: bench_serving's request functions return its RequestFuncOutput (Any
        # here: SGLang has no type hints), which has every field RequestOutput reads.
        out: RequestOutput = await self._send(request)
        return out


def last_line(error: str) -> str:
    """The last line of bench_serving's error text (a traceback's exception line)."""
    lines = (error or "").strip().splitlines()
    return lines[-1] if lines else "no error text"


class _Common(TypedDict):
    """The ``RequestRecord`` fields ``to_record`` sets alike in both its outcomes."""

    rid: str
    arrival_s: float
    input_tokens: int
    session_id: str | None


def to_record(r: TraceRequest, out: RequestOutput, t0: float, done_s: float,
              cached_reported: bool) -> RequestRecord:
    """The ``RequestRecord`` of ``r`` from bench_serving's output. Times are
    relative to ``t0``, the replay's origin on bench_serving's clock
    (``perf_counter``); ``done_s`` is when the client had the answer."""
    arrival = out.start_time - t0
    common = _Common(rid=r.rid, arrival_s=arrival, input_tokens=r.input_tokens,
                  session_id=r.session_id)
    if not out.success or out.ttft <= 0.0:
        error = (out.error or "no token text was streamed").strip()
        status = "rejected" if error.startswith(REJECTED_REASON) else "aborted"
        return RequestRecord(status=status, output_tokens=0, finish_s=done_s,
                             reason=last_line(error)[:200], **common)
    first = arrival + out.ttft
    # NOTE: one gap per streamed token after the first; a chunk carrying several
    # tokens (generate) is already split evenly by bench_serving.
    times = first + np.concatenate(([0.0], np.cumsum(out.itl)))
    cached = int(out.cached_tokens) if cached_reported else None
    return RequestRecord(
        status="finished", output_tokens=int(out.output_len), cached_tokens=cached,
        prefill_tokens=r.input_tokens - cached if cached is not None else 0,
        first_token_s=first, finish_s=float(times[-1]), token_times=times, **common)


def failed_record(r: TraceRequest, sent_s: float, done_s: float, why: str) -> RequestRecord:
    """A request that never produced a bench_serving output (client timeout, bug)."""
    return RequestRecord(rid=r.rid, arrival_s=sent_s, status="aborted", input_tokens=r.input_tokens,
                         output_tokens=0, finish_s=done_s, session_id=r.session_id, reason=why[:200])
