"""Frontier verdicts: dominance by hand, ties, mixed directions, clear errors."""

from __future__ import annotations

import pytest

from bench.frontier import Metric, dominates, frontier, verdict

P50, P99 = Metric("ttft_s.p50", "TTFT p50"), Metric("ttft_s.p99", "TTFT p99")
GOODPUT = Metric("goodput_rps", "goodput", higher_is_better=True)


def test_dominance_needs_no_worse_everywhere_and_better_somewhere():
    assert dominates((1, 2), (1, 3), (P50, P99))
    assert not dominates((1, 3), (1, 3), (P50, P99))  # equal: neither dominates
    assert not dominates((0, 4), (1, 3), (P50, P99))  # better on one, worse on the other
    # goodput: higher wins
    assert dominates((1, 9.0), (1, 8.0), (P50, GOODPUT))
    assert not dominates((1, 8.0), (1, 9.0), (P50, GOODPUT))


def test_the_frontier_keeps_every_undominated_point_and_ties():
    points = {"a": (1, 9), "b": (2, 5), "c": (3, 6), "d": (4, 4), "e": (2, 5)}
    # c is dominated by b (and e); b and e tie and both stay
    assert frontier(points, (P50, P99)) == ["a", "b", "d", "e"]


def test_verdicts_name_the_builtins_on_either_side():
    builtins = {"fcfs": (3.0, 10.0), "lpm": (2.0, 14.0), "dfs-weight": (2.5, 9.0)}
    v = verdict((2.2, 9.5), builtins, (P50, P99))
    assert v.outcome == "frontier"
    assert dict(v.better_on) == {"TTFT p50": ("lpm",), "TTFT p99": ("dfs-weight",)}
    assert v.text() == "on the frontier (built-ins better on TTFT p50: `lpm`; TTFT p99: `dfs-weight`)"
    dominated = verdict((2.6, 9.5), builtins, (P50, P99))
    assert (dominated.outcome, dominated.by) == ("dominated", ("dfs-weight",))
    assert verdict((1.0, 8.0), builtins, (P50, P99)).text() == "dominates every built-in"
    # NOTE: judged against rows that are not SGLang's built-ins (controls, prior art), the text says so
    assert verdict((1.0, 8.0), builtins, (P50, P99)).text("control") == "dominates every control"
    assert v.text("rival").startswith("on the frontier (rivals better on ")


def test_a_technique_equal_to_a_builtin_ties_rather_than_dominates():
    """Fairway with its cap off is SGLang's shortest-prefill-first: a tie, said as one."""
    v = verdict((2.0, 9.0), {"shortest-prefill-first": (2.0, 9.0), "fcfs": (3.0, 10.0)}, (P50, P99))
    assert (v.outcome, v.by) == ("equals", ("shortest-prefill-first",))
    assert v.text() == "equals `shortest-prefill-first` on every metric, dominates the rest"


def test_metrics_read_summaries_by_path_and_fail_clearly():
    summary = {"ttft_s": {"p50": 1.5, "p99": None}, "goodput_rps": 3}
    assert P50.of(summary) == 1.5 and GOODPUT.of(summary) == 3.0
    with pytest.raises(ValueError, match="ttft_s.p99.*null"):
        P99.of(summary)
    with pytest.raises(KeyError, match="no 'e2e_s'"):
        Metric("e2e_s.mean").of(summary)
    with pytest.raises(ValueError, match="at least one built-in"):
        verdict((1, 1), {}, (P50, P99))


def test_a_tolerance_turns_differences_below_it_into_ties():
    loose = (Metric("ttft_s.p50", tolerance=0.01), Metric("ttft_s.p99", tolerance=0.01))
    assert dominates((1.861, 46.74), (1.862, 46.74), (P50, P99))  # exact: a 0.05% win
    assert not dominates((1.861, 46.74), (1.862, 46.74), loose)
    assert verdict((1.862, 46.74), {"spf": (1.861, 46.74)}, loose).outcome == "equals"
    assert dominates((1.80, 46.74), (1.862, 46.74), loose)  # 3.3%: beyond it
    wide = Metric("goodput_rps", higher_is_better=True, tolerance=0.05)
    assert wide.better(10.6, 10.0) and not wide.better(10.4, 10.0)



def test_verdict_lines_give_one_row_per_scenario_and_the_counts():
    from bench.frontier import verdict_lines

    points = {"a": {"t": (1, 1), "x": (2, 2), "y": (3, 0.5)}, "b": {"t": (3, 3), "x": (2, 2), "y": (3, 0.5)}}
    lines = verdict_lines(points, "t", ("x", "y"), (P50, P99))
    assert lines[2] == "| a | on the frontier (built-ins better on TTFT p99: `y`) |"
    assert lines[3] == "| b | dominated by `x`, `y` |"  # y: equal p50, better p99
    assert lines[-1] == "Over the 2 scenarios: 1 frontier, 1 dominated."
