"""The HTTP process's input guard: ids outside the vocabulary and bad session params are a ValueError (400)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from server.sglang.launch.input_guard import (
    MAX_PARALLEL_SAMPLES,
    bad_session_params,
    check_fanout,
    check_request,
    out_of_vocabulary,
    too_many_samples,
)
from server.sglang.launch.stub import install_sgl_kernel_stub

install_sgl_kernel_stub()  # NOTE: before the first SGLang import

from sglang.srt.managers.io_struct import GenerateReqInput  # noqa: E402

MANAGER = SimpleNamespace(model_config=SimpleNamespace(vocab_size=100))


def test_ids_outside_the_vocabulary_are_named_with_the_valid_range():
    assert out_of_vocabulary([0, 99, 5], 100) is None and out_of_vocabulary([], 100) is None
    assert out_of_vocabulary(None, 100) is None
    assert out_of_vocabulary([0, -1], 100) == "token id -1 is outside the vocabulary; valid ids are [0, 100)"
    assert out_of_vocabulary([100], 100) == "token id 100 is outside the vocabulary; valid ids are [0, 100)"


@pytest.mark.parametrize("params, problem", [
    ({"a": 1}, "Unexpected keyword argument 'a'"),
    ({"id": 5}, "Expected `str | null`, got `int`"),
    ({"id": "s", "offset": "x"}, "Expected `int | null`, got `str`"),
    ([{"id": "s"}], "session_params must be an object, got list"),
])
def test_session_params_that_sglang_would_crash_on_or_pass_on_unchecked(params, problem):
    assert problem in (bad_session_params(params) or "")


def test_valid_session_params_and_none_pass():
    assert bad_session_params(None) is None and bad_session_params({}) is None
    assert bad_session_params({"id": "s", "rid": "r", "offset": 3, "replace": True}) is None


def test_the_hook_raises_value_error_which_sglang_answers_with_400():
    ok = GenerateReqInput(input_ids=[1, 2], sampling_params={"max_new_tokens": 1})
    check_request(MANAGER, ok, [1, 2])
    with pytest.raises(ValueError, match="token id 100"):
        check_request(MANAGER, ok, [1, 100])
    bad = GenerateReqInput(text="hi", session_params={"offset": "x"})
    with pytest.raises(ValueError, match="invalid session_params"):
        check_request(MANAGER, bad, [1])


def test_n_past_openais_bound_is_refused_before_sglang_expands_the_request():
    assert too_many_samples({"n": MAX_PARALLEL_SAMPLES}) is None and too_many_samples({}) is None
    assert too_many_samples({"n": True}) is None and too_many_samples(None) is None
    assert too_many_samples([]) == "sampling_params is an empty list"
    assert too_many_samples([{"n": 1}, 3]) == "sampling_params must be an object or a list of objects"
    assert too_many_samples([{"n": 2}, {"n": 2 ** 31}]) == f"n={2 ** 31} samples is more than 128 per request"
    huge = GenerateReqInput(text="hi", sampling_params={"n": 2 ** 31, "max_new_tokens": 1})
    with pytest.raises(ValueError, match="more than 128"):
        check_fanout(huge)
    ok = GenerateReqInput(text="hi", sampling_params={"n": 3, "max_new_tokens": 1})
    check_fanout(ok)
    ok.normalize_batch_and_arguments()
    assert ok.batch_size == 1 and len(ok.rid) == 3  # SGLang's own expansion, n = 3
