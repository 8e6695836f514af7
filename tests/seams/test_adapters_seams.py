"""The adapters kind's SGLang seams, on real SGLang classes (no model).

* Slot eviction: the pure orders, through ``PolicySlotEviction``, choose
  exactly the adapters SGLang's own ``lru`` and ``fifo`` choose, on random
  batch sequences.
* Launch: ``+adapters`` turns into SGLang's LoRA arguments, validated by
  SGLang's parser; what cannot work is refused naming the field.
* CPU: SGLang's LoRA modules get unpinned memory where CUDA is absent.
"""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from tests.seams import sglang_env  # noqa: F401  (installs the sgl_kernel stub)

# isort: split

from sglang.srt.lora.eviction_policy import get_eviction_policy

from compose.config import ConfigError, compose
from policies.adapters.scute import ScutePolicy
from server.resolve import resolve
from server.sglang.adapters.slot_eviction import PolicySlotEviction
from server.sglang.launch.args import sglang_fields, validate


def replay(policy, seed: int, slots: int = 4, names: int = 9, batches: int = 300) -> list[str | None]:
    """SGLang's memory-pool protocol on ``policy``: each batch marks its
    adapters, then frees a slot for each one not resident (``prepare_lora_batch``)."""
    rng = random.Random(seed)
    resident: list[str | None] = [None]
    victims = []
    for _ in range(batches):
        if isinstance(policy, PolicySlotEviction):
            policy.next_batch()
        batch = set(rng.sample([f"a{i}" for i in range(names)], rng.randint(1, slots - 1)))
        if rng.random() < 0.3:
            batch.add(None)
        for uid in sorted(batch, key=lambda u: (u is not None, u or "")):
            policy.mark_used(uid)
        for uid in sorted(batch, key=lambda u: (u is not None, u or "")):
            if uid in resident:
                continue
            if len(resident) == slots:
                cands = {u for u in resident if u not in batch}
                cands = (cands - {None}) or cands
                victim = policy.select_victim(cands)
                victims.append(victim)
                policy.remove(victim)
                resident.remove(victim)
            resident.append(uid)
    return victims


@pytest.mark.parametrize("order", ["lru", "fifo"])
@pytest.mark.parametrize("seed", range(3))
def test_policy_orders_evict_exactly_as_sglangs_own(order, seed):
    ours = replay(PolicySlotEviction(ScutePolicy(eviction=order)), seed)
    theirs = replay(get_eviction_policy(order), seed)
    assert len(theirs) > 100 and ours == theirs


def test_lfu_differs_from_lru_on_the_same_batches():
    lfu = replay(PolicySlotEviction(ScutePolicy(eviction="lfu")), 0)
    assert lfu != replay(get_eviction_policy("lru"), 0)


def fields(*overrides: str) -> dict:
    return sglang_fields(resolve(compose(["server.device=cpu", *overrides])))


def test_scute_launch_arguments_parse_with_sglangs_parser():
    f = fields("+adapters=scute", "adapters.paths={a: /x/a, b: /x/b}", "adapters.max_per_batch=4")
    assert f["enable_lora"] is True and f["max_loras_per_batch"] == 4
    assert f["lora_paths"] == ["a=/x/a", "b=/x/b"]
    # NOTE: SGLang holds a zero rank-1 LoRA per adapter; the CLI names torch_native
    assert f["max_lora_rank"] == 1 and f["lora_backend"] == "torch_native"
    argv = validate(resolve(compose(["server.device=cpu", "+adapters=scute", "adapters.paths={a: /x/a}"])))
    assert "--enable-lora" in argv and argv[argv.index("--lora-paths") + 1] == "a=/x/a"


def test_lora_launch_arguments_keep_sglangs_rank_and_use_torch_native_on_cpu():
    f = fields("+adapters=lora", "adapters.max_rank=16", "adapters.target_modules=[q_proj,v_proj]")
    assert f["max_lora_rank"] == 16 and f["lora_target_modules"] == ["q_proj", "v_proj"]
    assert f["lora_backend"] == "torch_native" and "lora_paths" not in f
    validate(resolve(compose(["server.device=cpu", "+adapters=lora", "adapters.max_rank=16",
                              "adapters.target_modules=[q_proj,v_proj]"])))


def test_what_cannot_work_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match="adapters.max_rank and adapters.target_modules"):
        fields("+adapters=scute")
    with pytest.raises(ConfigError, match="sglang.tp_size=2 conflicts with"):
        fields("+adapters=scute", "adapters.paths={a: /x}", "sglang.tp_size=2")
    with pytest.raises(ConfigError, match="sglang.lora_backend=triton conflicts"):
        fields("+adapters=scute", "adapters.paths={a: /x}", "sglang.lora_backend=triton")
    with pytest.raises(ConfigError, match="invalid value for 'adapters.max_per_batch'"):
        fields("+adapters=scute", "adapters.max_per_batch=1")


def test_sglang_lora_modules_get_unpinned_memory_without_cuda():
    code = """
from tests.seams import sglang_env
import torch
from sglang.srt.lora import layers
from sglang.srt.lora.backend import torch_backend
from server.sglang.adapters.cpu_pin import allow_unpinned
try:
    torch.zeros(2, pin_memory=True)
    raise SystemExit("pinning works here: nothing to check")
except RuntimeError:
    pass
assert allow_unpinned()
assert layers.torch.tensor([1, 2], dtype=torch.int32, device="cpu", pin_memory=True).tolist() == [1, 2]
assert torch_backend.torch.zeros(3, pin_memory=True).sum() == 0
assert torch.zeros(2).pin_memory().shape == (2,)
try:
    torch.zeros(2, pin_memory=True)  # NOTE: only those modules' factories change
    raise SystemExit("global torch factory changed")
except RuntimeError:
    print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]
