"""Pure policies on hand-built views (no SGLang, no model)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from policies.admission import AdmissionAction, AdmissionView
from policies.admission.max_queue import MaxQueuePolicy
from policies.cache import BlockView
from policies.cache.lru import LruPolicy
from policies.scheduling import OrderDecision, QueueView, check_permutation
from policies.scheduling.fcfs import FcfsPolicy
from policies.scheduling.hrrn import HrrnPolicy
from policies.scheduling.lof import LofPolicy
from policies.scheduling.lpm import LpmPolicy
from policies.scheduling.shortest_prefill import ShortestPrefillPolicy
from policies.scheduling.shortest_prefill_first import ShortestPrefillFirstPolicy
from policies.views import RequestView

POLICIES_DIR = Path(__file__).resolve().parents[2] / "policies"


def req(rid: str, seq: int, n_in: int, cached: int = 0, **kw) -> RequestView:
    return RequestView(rid=rid, arrival_seq=seq, arrival_time=float(seq), num_input_tokens=n_in,
                       num_cached_tokens=cached, **kw)


def test_shortest_prefill_orders_by_uncached_tokens_then_arrival():
    queue = QueueView((req("a", 0, 300), req("b", 1, 500, cached=450), req("c", 2, 40),
                       req("d", 3, 90, cached=40), req("e", 4, 50, cached=0)))
    # uncached: a=300 b=50 c=40 d=50 e=50 -> c, then b/d/e by arrival, then a
    assert ShortestPrefillPolicy().order(queue).order == ("c", "b", "d", "e", "a")


def test_fcfs_keeps_the_hosts_queue_order():
    # a retracted request ("y", older) re-joined at the back: it stays there, as in SGLang
    queue = QueueView((req("x", 2, 10), req("z", 3, 5), req("y", 0, 999)))
    assert FcfsPolicy().order(queue).order == ("x", "z", "y")


def test_lpm_most_cached_first_and_in_batch_duplicates_last():
    queue = QueueView((req("a", 0, 100, cached=10), req("b", 1, 100, cached=80),
                       req("c", 2, 100, cached=0, in_batch_duplicate=True), req("d", 3, 100, cached=10)))
    assert LpmPolicy().order(queue).order == ("b", "a", "d", "c")


def test_hrrn_ratio_of_waited_tokens_to_uncached_work():
    queue = QueueView(
        (req("old_long", 0, 1000, arrival_processed_tokens=0),       # 2000/1000 = 2
         req("new_short", 1, 100, arrival_processed_tokens=1900),    # 100/100 = 1
         req("mid", 2, 200, arrival_processed_tokens=1000),          # 1000/200 = 5
         req("cached", 3, 50, cached=50, arrival_processed_tokens=1999)),  # no work: first
        processed_tokens=2000)
    assert HrrnPolicy().order(queue).order == ("cached", "mid", "old_long", "new_short")


def test_lof_longest_max_new_tokens_first_stable():
    queue = QueueView((req("a", 0, 1, max_new_tokens=8), req("b", 1, 1, max_new_tokens=64),
                       req("c", 2, 1, max_new_tokens=8)))
    assert LofPolicy().order(queue).order == ("b", "a", "c")


def test_shortest_prefill_first_counts_at_least_one_token_and_defers_duplicates():
    queue = QueueView((req("a", 0, 10, cached=10), req("b", 1, 5, cached=4),
                       req("c", 2, 3, in_batch_duplicate=True)))
    # work: a=max(1,0)=1, b=1 -> arrival order; c deferred
    assert ShortestPrefillFirstPolicy().order(queue).order == ("a", "b", "c")


def test_check_permutation_rejects_dropped_or_invented_requests():
    queue = QueueView((req("a", 0, 1), req("b", 1, 1)))
    check_permutation(queue, OrderDecision(("b", "a")))
    with pytest.raises(ValueError, match="missing"):
        check_permutation(queue, OrderDecision(("a",)))
    with pytest.raises(ValueError, match="unknown"):
        check_permutation(queue, OrderDecision(("a", "b", "zz")))


def test_lru_ranks_least_recently_used_first():
    blocks = [BlockView(block_id=i, num_tokens=4, prefix_len=0, last_access=t, created=c)
              for i, (t, c) in enumerate([(5.0, 1.0), (2.0, 3.0), (2.0, 2.0), (9.0, 0.0)])]
    ranked = sorted(blocks, key=LruPolicy().rank)
    assert [b.block_id for b in ranked] == [2, 1, 0, 3]


def admission_view(waiting: int, deferred: int = 0) -> AdmissionView:
    return AdmissionView(request=req("r", 0, 10), now=0.0, num_waiting=waiting,
                         num_running=1, num_deferred=deferred)


def test_max_queue_admits_up_to_the_limit_then_rejects_with_retry_after():
    policy = MaxQueuePolicy(max_waiting=2, retry_after_s=3.0)
    assert policy.decide(admission_view(0)).action is AdmissionAction.ADMIT
    assert policy.decide(admission_view(1)).action is AdmissionAction.ADMIT
    rejected = policy.decide(admission_view(2))
    assert rejected.action is AdmissionAction.REJECT
    assert rejected.retry_after_s == 3.0 and "max_waiting=2" in rejected.reason
    # deferred requests wait too
    assert policy.decide(admission_view(1, deferred=1)).action is AdmissionAction.REJECT


def test_max_queue_rejects_nonsense_parameters():
    with pytest.raises(ValueError, match="max_waiting"):
        MaxQueuePolicy(max_waiting=-1)


FORBIDDEN_IMPORTS = {"torch", "sglang", "time", "datetime", "random", "os", "server", "bench"}


@pytest.mark.parametrize("path", sorted(POLICIES_DIR.rglob("*.py")), ids=lambda p: str(p.relative_to(POLICIES_DIR)))
def test_policies_are_pure(path: Path):
    """NOTE: policies import nothing that brings clocks, randomness, devices or hosts."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        for name in names:
            assert name.split(".")[0] not in FORBIDDEN_IMPORTS, f"{path.name} imports {name}"
        if isinstance(node, ast.Global):
            pytest.fail(f"{path.name} uses a global statement")


def test_shortest_prompt_ignores_the_cache():
    from policies.scheduling.shortest_prompt import ShortestPromptPolicy

    queue = QueueView((req("a", 0, 300, cached=290), req("b", 1, 100), req("c", 2, 100)))
    assert ShortestPromptPolicy().order(queue).order == ("b", "c", "a")


def test_shortest_output_ranks_by_remaining_declared_tokens():
    from policies.scheduling.shortest_output import ShortestOutputPolicy

    queue = QueueView((req("a", 0, 1, max_new_tokens=100, num_output_tokens=95),
                       req("b", 1, 1, max_new_tokens=10), req("c", 2, 1, max_new_tokens=64)))
    assert ShortestOutputPolicy().order(queue).order == ("a", "b", "c")
