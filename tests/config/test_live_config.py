"""The ``live`` config node: composition, one-line errors, and when shaping applies."""

from __future__ import annotations

import pytest

from bench.config import compose_bench, resolve_bench
from bench.run import prepare_trace
from bench.schema import LiveApi
from bench.sim import CostModel, SimSettings
from bench.traces.paths import default_data_root
from compose.config import ConfigError
from tests.data import needs_data


def test_live_is_off_by_default_and_composes_from_the_command_line():
    s = resolve_bench(compose_bench([]))
    assert not s.is_live and s.live.endpoint is None
    s = resolve_bench(compose_bench(["live.endpoint=http://127.0.0.1:30000", "live.api=generate",
                                     "live.input_scale=0.03125", "+live.extra_body.top_k=1",
                                     "model_profile=smollm2-135m", "accelerator=cpu"]))
    assert s.is_live and s.live.api is LiveApi.generate and s.live.extra_body == {"top_k": 1}


@pytest.mark.parametrize("overrides,message", [
    (["live.endpoint=http://x", "+policy=lpm"], "+policy= chooses simulator policies"),
    (["live.input_scale=0"], "live.input_scale and live.output_scale must be > 0"),
    (["live.max_output_tokens=0"], "live.max_output_tokens must be >= 1"),
    (["model_profile=smollm2-135m", "live.token_id_high=60000"], "inside the vocabulary of smollm2-135m"),
    (["live.token_id_low=50", "live.token_id_high=50"], "must be a non-empty range"),
    (["live.endpont=http://x"], "unknown config key 'live.endpont'"),
    (["live.api=chat"], "invalid value for 'live.api'"),
])
def test_live_mistakes_are_one_line(overrides, message):
    with pytest.raises(ConfigError) as err:
        resolve_bench(compose_bench(overrides))
    assert message in str(err.value) and "\n" not in str(err.value)


@needs_data(default_data_root() / "azure_llm_2023")
def test_a_simulation_is_shaped_only_when_asked():
    def prepared(*overrides):
        s = resolve_bench(compose_bench(["trace=azure_conversation", "trace.window_end_s=30",
                                         "accelerator=cpu", "model_profile=smollm2-135m", *overrides]))
        cost = CostModel(s.accelerator, s.model_profile)
        return prepare_trace(s, SimSettings.resolve(s.sim, s.accelerator, s.model_profile, cost))

    plain, none = prepared()
    assert none is None
    shaped_trace, shaped = prepared("live.input_scale=0.0625", "live.max_output_tokens=16")
    assert shaped is not None and shaped.max_total_tokens == 8191
    assert len(shaped_trace.requests) == len(plain.requests) - shaped.dropped_too_long
    assert all(r.output_tokens <= 16 for r in shaped_trace.requests)
    # a live run is shaped (and checked against the context) even at scale 1
    _, live = prepared("live.endpoint=http://127.0.0.1:1")
    assert live is not None and live.dropped_too_long == sum(
        1 for r in plain.requests if r.input_tokens + r.output_tokens > 8191)


@needs_data(default_data_root() / "mooncake")
def test_a_scale_the_trace_blocks_cannot_take_is_a_config_error():
    s = resolve_bench(compose_bench(["trace.window_end_s=10", "live.input_scale=0.03"]))
    cost = CostModel(s.accelerator, s.model_profile)
    with pytest.raises(ConfigError, match="whole blocks"):
        prepare_trace(s, SimSettings.resolve(s.sim, s.accelerator, s.model_profile, cost))
