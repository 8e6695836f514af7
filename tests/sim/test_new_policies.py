"""The policies the bench adds: ``dfs-weight`` scheduling and ``lfu`` eviction."""

from __future__ import annotations

from compose.config import compose
from compose.specs import build_policy, specs_from_config
from policies.cache import BlockView, EvictionPolicy
from policies.cache.lfu import LfuPolicy
from policies.scheduling import QueueView, SchedulingPolicy
from policies.scheduling.dfs_weight import DfsWeightPolicy
from policies.views import RequestView


def view(rid: str, seq: int, path=()) -> RequestView:
    return RequestView(rid=rid, arrival_seq=seq, arrival_time=float(seq), num_input_tokens=100,
                       prefix_path=tuple(path))


def test_dfs_weight_heaviest_subtree_first_and_children_before_their_parent():
    queue = QueueView((view("d", 0), view("a", 1, (1, 2)), view("c", 2, (1, 3)), view("e", 3, (4,)),
                       view("b", 4, (1, 2)), view("f", 5, (1,))))
    # node 1 holds 4 requests (a, b under 1/2; c under 1/3; f at 1), node 4 one, root d.
    assert DfsWeightPolicy().order(queue).order == ("a", "b", "c", "f", "e", "d")


def test_dfs_weight_ties_follow_the_hosts_child_order_not_the_queue():
    queue = QueueView((view("g", 0, (6,)), view("h", 1, (5,)), view("i", 2, (6, 1)), view("j", 3, (5, 2))))
    assert DfsWeightPolicy().order(queue).order == ("j", "h", "i", "g")


def test_dfs_weight_without_tree_information_keeps_the_queue_order():
    queue = QueueView(tuple(view(r, i) for i, r in enumerate("zyx")))
    assert DfsWeightPolicy().order(queue).order == ("z", "y", "x")


def test_lfu_ranks_by_hits_then_recency():
    p = LfuPolicy()
    block = lambda hits, last: BlockView(block_id=0, num_tokens=1, prefix_len=0, last_access=last,  # noqa: E731
                                         created=0.0, hit_count=hits)
    ranks = sorted([(p.rank(block(3, 1.0)), "hot"), (p.rank(block(1, 9.0)), "cold-recent"),
                    (p.rank(block(1, 2.0)), "cold-old")])
    assert [name for _, name in ranks] == ["cold-old", "cold-recent", "hot"]


def test_new_options_compose_and_build_through_the_server_config():
    cfg = compose(["+policy=dfs-weight", "+cache=lfu"])
    specs = specs_from_config(cfg)
    assert isinstance(build_policy(specs["policy"]), SchedulingPolicy)
    assert isinstance(build_policy(specs["cache"]), EvictionPolicy)
    assert build_policy(specs["policy"]).needs.sglang_native == "dfs-weight"
