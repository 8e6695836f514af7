"""``bench.live.chat.HFReference``'s shared memo: one process computes an answer, the others read it."""

from __future__ import annotations

from pathlib import Path

from bench.live.chat import HFReference


def _reference(memo_dir: Path | None, answers: list[str], checkpoint: str = "/models/a") -> HFReference:
    """An ``HFReference`` without a model: its generation returns the next of ``answers``."""
    ref = HFReference.__new__(HFReference)
    ref._answers, ref._memo_dir, ref._memo_scope = {}, memo_dir, f"{checkpoint}|float32"
    ref._generate = lambda messages, max_new_tokens: (answers.pop(0), 7, 3)  # type: ignore[method-assign]
    return ref


def test_a_second_process_reads_the_answer_the_first_computed(tmp_path):
    messages = [{"role": "user", "content": "hi"}]
    first = _reference(tmp_path, ["hello"])
    assert first.greedy(messages, 8) == ("hello", 7, 3)
    second = _reference(tmp_path, [])  # NOTE: generating would fail: nothing left to answer
    assert second.greedy(messages, 8) == ("hello", 7, 3)
    assert not list(tmp_path.glob("*.tmp"))


def test_other_prompts_lengths_and_checkpoints_are_computed_again(tmp_path):
    messages = [{"role": "user", "content": "hi"}]
    _reference(tmp_path, ["hello"]).greedy(messages, 8)
    assert _reference(tmp_path, ["other"]).greedy(messages, 9)[0] == "other"
    assert _reference(tmp_path, ["other"]).greedy([{"role": "user", "content": "ho"}], 8)[0] == "other"
    assert _reference(tmp_path, ["other"], "/models/b").greedy(messages, 8)[0] == "other"
    assert _reference(None, ["mine"]).greedy(messages, 8)[0] == "mine"
