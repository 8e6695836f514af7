"""``bench.scripts.decisions_live``'s table: the issue's targets per served model, judged on the cells."""

from __future__ import annotations

from bench.scripts.decisions_live import EVAL, ROWS, report


def _latency(fcfs: float, lpm: float, flide: float) -> dict[str, dict[str, float]]:
    return {name: dict.fromkeys(EVAL, value) for (name, _), value in zip(ROWS, (fcfs, lpm, flide))}


def test_lfm2_is_judged_against_the_better_stock_row():
    text = report(_latency(10.0, 4.9, 1.0), [30, 40], "abc1234", 60.0, "lfm2_tiny")
    assert "--model lfm2_tiny" in text and "model=lfm2_tiny" in text
    # 4.9x the better stock row (lpm): missed, whatever fcfs is
    assert text.count("flide >= 5x faster than the better stock row (4.9x): MISSED") == len(EVAL)
    met = report(_latency(6.0, 5.0, 1.0), [30], "abc1234", 60.0, "lfm2_tiny")
    assert met.count(": met") == len(EVAL) and "MISSED" not in met


def test_smollm2_keeps_its_two_targets():
    text = report(_latency(5.0, 1.4, 1.0), [30], "abc1234", 60.0)
    assert text.count("of fcfs (0.20): met") == len(EVAL)
    assert text.count("of lpm (0.71): MISSED") == len(EVAL)
