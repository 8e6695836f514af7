"""``python -m bench.advise`` on a user's own trace, and the minimal trace form it reads."""

from __future__ import annotations

import json
import random

import pytest

from bench.advise import STOCK, Bound, choose, main, metric
from bench.config import compose_bench, resolve_bench
from bench.traces import load_trace
from bench.traces.simple import load_simple

H100 = ("accelerator=h100", "model_profile=llama-3.1-8b")


def write_trace(path, n=160, seed=0):
    """Bursty arrivals, long and short prompts sharing a few system prompts: orders differ."""
    rnd = random.Random(seed)
    rows, t = [], 0.0
    for i in range(n):
        t += rnd.expovariate(40.0)
        prompt = rnd.choice([200, 400, 6000, 12000])
        system = rnd.randrange(3)
        blocks = prompt // 512
        rows.append({"arrival_s": round(t, 4), "input_tokens": prompt, "output_tokens": rnd.choice([20, 200]),
                     "session_id": f"s{i % 7}",
                     "prefix_hashes": [f"sys{system}"] + [f"r{i}-{b}" for b in range(1, blocks)]})
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_the_simple_form_reads_jsonl_and_csv_alike(tmp_path):
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text('{"arrival_s": 1.5, "input_tokens": 40, "output_tokens": 3, "prefix_hashes": ["a", "b"]}\n'
                     '\n{"arrival_s": 0.5, "input_tokens": 20, "output_tokens": 1, "session_id": 9,'
                     ' "prefix_hashes": ["a"]}\n')
    csv = tmp_path / "t.csv"
    csv.write_text("arrival_s,input_tokens,output_tokens,session_id,prefix_hashes\n"
                   "1.5,40,3,,a b\n0.5,20,1,9,a\n")
    for path in (jsonl, csv):
        t = load_simple(path, "mine", block_size=16)
        assert [r.arrival_s for r in t.requests] == [0.5, 1.5]  # sorted by arrival
        first, second = t.requests
        assert list(first.block_ids) == [0] and list(second.block_ids) == [0, 1]  # "a" shared: same id
        assert first.session_id == "9" and second.session_id is None
        assert (t.block_size, t.block_id_span) == (16, 2)
        t.validate()


@pytest.mark.parametrize(("line", "block_size", "message"), [
    ('{"arrival_s": 0, "input_tokens": 10}', 16, r"t.jsonl:1: missing 'output_tokens'"),
    ('{"arrival_s": "soon", "input_tokens": 10, "output_tokens": 1}', 16, r":1: arrival_s='soon' is not a number"),
    ('{"arrival_s": 0, "input_tokens": 10, "output_tokens": 0}', 16, r"must be >= 1"),
    ('{"arrival_s": 0, "input_tokens": 10, "output_tokens": 1, "prefix_hashes": [1]}', 0,
     r"set trace.simple.block_size"),
    ('{"arrival_s": 0, "input_tokens": 10, "output_tokens": 1, "prefix_hashes": [1, 2]}', 16,
     r"2 prefix_hashes cover more than the 10-token prompt"),
    ('[1, 2]', 16, r":1: not a JSON object"),
])
def test_a_malformed_row_names_the_file_line_and_field(tmp_path, line, block_size, message):
    path = tmp_path / "t.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(ValueError, match=message):
        load_simple(path, "mine", block_size)


def test_the_simple_form_is_a_bench_trace_option(tmp_path):
    path = write_trace(tmp_path / "mine.jsonl", n=20)
    s = resolve_bench(compose_bench(["trace=simple", f"trace.path={path}", "trace.simple.block_size=512", *H100]))
    trace = load_trace(s.trace, s.data_root)
    assert len(trace.requests) == 20 and trace.block_size == 512


def test_the_choice_meets_the_bounds_then_optimises_and_else_names_the_miss():
    summaries = {"a": {"ttft_s": {"p50": 1.0, "p99": 30.0}}, "b": {"ttft_s": {"p50": 2.0, "p99": 9.0}},
                 "c": {"ttft_s": {"p50": 1.5, "p99": 10.0}}}
    row, why = choose(summaries, [Bound.parse("ttft_s.p99<=10")], metric("ttft_s.p50"))
    assert row == "c" and why.startswith("meets ttft_s.p99 <= 10 and has the best ttft_s.p50 (1.5) of the 2 of 3")
    row, why = choose(summaries, [Bound.parse("ttft_s.p99 <= 5")], metric("ttft_s.p50"))
    assert row == "b" and "misses it by ttft_s.p99 9 (bound 5)" in why
    row, why = choose(summaries, [], metric("ttft_s.p50"))
    assert (row, why) == ("a", "the best ttft_s.p50 (1) of the 3 rows (no --objective bound given)")
    with pytest.raises(ValueError, match="METRIC<=VALUE"):
        Bound.parse("ttft_s.p99 < 5")


def test_advise_replays_every_order_and_prints_the_server_line(tmp_path, capsys):
    path = write_trace(tmp_path / "mine.jsonl")
    out = tmp_path / "advice"
    main(["trace=simple", f"trace.path={path}", "trace.simple.block_size=512", *H100,
          "--objective", "ttft_s.p99<=1000", "--jobs", "1", "--out", str(out)])
    text = capsys.readouterr().out
    assert (out / "advise.md").read_text() == text.rstrip("\n") + "\n" and (out / "advise.png").stat().st_size > 0
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    labels = [line.split("`")[1] for line in rows]
    # NOTE: the no-option row, then every scheduling option this autoregressive model runs
    assert labels[0] == STOCK and "+policy=fairway" in labels and "+policy=lpm" in labels
    assert "`+policy=dwise`" in text.split("Skipped")[1]  # a diffusion-LM order: skipped, with why
    by_label = dict(zip(labels, rows, strict=True))
    assert "| yes |" in by_label["+policy=lpm"].split("`")[2][:8]  # SGLang's own
    assert any(v in by_label["+policy=fairway"] for v in ("dominates", "equals", "frontier", "dominated"))
    # SGLang's default order is fcfs: the two rows are one replay twice, and said to be equal
    assert by_label[STOCK].split("|")[3:5] == by_label["+policy=fcfs"].split("|")[3:5]
    run = text.split("**Run:** `")[1].split("`")[0]
    assert run.startswith("python -m server")
    assert "meets ttft_s.p99 <= 1000" in text


def test_advise_refuses_what_it_cannot_judge(tmp_path):
    path = write_trace(tmp_path / "mine.jsonl", n=10)
    base = ["trace=simple", f"trace.path={path}", "trace.simple.block_size=512", *H100]
    with pytest.raises(SystemExit, match="--kinds 'polcy': not a kind"):
        main([*base, "--kinds", "polcy"])
    with pytest.raises(SystemExit, match="at least two metrics"):
        main([*base, "--metrics", "ttft_s.p50"])
    with pytest.raises(SystemExit, match="--tolerance 1.5"):
        main([*base, "--tolerance", "1.5"])
