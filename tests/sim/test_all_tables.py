"""``python -m bench.scripts.all``: it knows every committed table and refuses a dirty tree."""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from bench.scripts import all as rebuild
from bench.traces.paths import REPO_ROOT

RESULTS = REPO_ROOT / "bench" / "results"


def test_every_committed_result_has_a_producing_table_and_script():
    produced = {o for t in rebuild.TABLES for o in t.outputs}
    committed = {p.name for p in RESULTS.iterdir() if p.is_file() and p.name != "MANIFEST.md"}
    assert committed <= produced, f"no command rebuilds {sorted(committed - produced)}"
    for table in rebuild.TABLES:
        spec = importlib.util.find_spec(table.args[0])  # NOTE: found, not imported (some pull in SGLang)
        assert spec is not None and "def main()" in Path(spec.origin).read_text(), table.name


def test_refuses_a_dirty_tree_before_running_anything(monkeypatch):
    ran = []
    monkeypatch.setattr(rebuild, "dirty", lambda root=REPO_ROOT: ["?? stray.py"])
    monkeypatch.setattr(rebuild.subprocess, "run", lambda *a, **k: ran.append(a))
    monkeypatch.setattr(sys, "argv", ["all", "--only", "baselines"])
    with pytest.raises(SystemExit, match="dirty tree"):
        rebuild.main()
    assert ran == []


def test_quick_skips_live_tables_and_the_manifest_names_each_command():
    quick = rebuild.select(None, quick=True)
    assert quick and not any(t.live for t in quick)
    assert {t.name for t in rebuild.select(None, quick=False)} == {t.name for t in rebuild.TABLES}
    table = rebuild.TABLES[0]
    text = rebuild.render("abc1234", [(table, 90.0)], {"x.csv": "00ff"},
                          argparse.Namespace(quick=False, only=[table.name]))
    assert f"`python -m bench.scripts.all --only {table.name}` at code commit abc1234" in text
    assert f"`{table.command}` | 1.5 min" in text and "| `x.csv` | `00ff` |" in text


def _fake_run(monkeypatch, tmp_path, changes, done=None, commit="abc1234"):
    """all.main with git and the table scripts replaced; returns the commands it ran. ``done``: the
    tables a committed manifest records as finished by a rebuild at ``commit``."""
    ran: list[str] = []
    monkeypatch.setattr(rebuild, "dirty", lambda root=REPO_ROOT: list(changes))
    monkeypatch.setattr(rebuild, "code_commit", lambda: "abc1234")
    monkeypatch.setattr(rebuild, "checksums", lambda root: {})
    monkeypatch.setattr(rebuild, "REPO_ROOT", tmp_path)
    results = tmp_path / "bench" / "results"
    results.mkdir(parents=True)
    monkeypatch.setattr(rebuild.subprocess, "run", lambda argv, **k: ran.append(argv[2]))
    if done is not None:
        runs = [(t, done[t.name]) for t in rebuild.TABLES if t.name in done]
        (results / "MANIFEST.md").write_text(rebuild.manifest(results, rebuild.render(
            commit, runs, {}, argparse.Namespace(quick=False, only=None), ["more"])))
    return ran


def test_resume_runs_only_the_unfinished_tables_at_the_same_code_commit(monkeypatch, tmp_path):
    ran = _fake_run(monkeypatch, tmp_path, [" M bench/results/baselines.md"], done={"baselines": 120.0})
    monkeypatch.setattr(sys, "argv", ["all", "--only", "baselines", "penelope", "--resume"])
    rebuild.main()
    assert ran == ["bench.scripts.penelope"]
    manifest = (tmp_path / "bench" / "results" / "MANIFEST.md").read_text()
    assert rebuild.recorded(manifest, "abc1234") == {"baselines": 120.0, "penelope": pytest.approx(0, abs=6)}
    assert "at code commit abc1234" in manifest and "| baselines | `python -m bench.scripts.baselines` | 2.0 min" in manifest
    assert "still to run" not in manifest


def test_every_finished_table_is_recorded_in_the_manifest_before_the_next_starts(monkeypatch, tmp_path):
    """NOTE: the committed manifest is the record a resume on a new machine reads."""
    _fake_run(monkeypatch, tmp_path, [])
    results = tmp_path / "bench" / "results"
    seen: list[dict[str, float] | None] = []

    def run(argv, **kwargs):
        text = (results / "MANIFEST.md").read_text() if (results / "MANIFEST.md").exists() else ""
        seen.append(rebuild.recorded(text, "abc1234"))

    monkeypatch.setattr(rebuild.subprocess, "run", run)
    monkeypatch.setattr(sys, "argv", ["all", "--only", "baselines", "fairway", "penelope"])
    rebuild.main()
    assert [None if s is None else sorted(s) for s in seen] == [None, ["baselines"], ["baselines", "fairway"]]


def test_resume_runs_a_heads_producer_again_on_a_machine_without_its_heads(monkeypatch, tmp_path):
    done = {"leap_curve": 60.0, "leap": 60.0, "leap_predictors": 60.0}
    ran = _fake_run(monkeypatch, tmp_path, [], done=done)
    monkeypatch.setattr(sys, "argv", ["all", "--resume"])
    monkeypatch.setattr(rebuild, "TABLES", tuple(t for t in rebuild.TABLES if t.name.startswith("leap")))
    for head in rebuild.TABLES[2].scratch:  # NOTE: leap_predictors's heads are here, leap_curve's are not
        (tmp_path / head).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / head).write_bytes(b"npz")
    rebuild.main()
    # leap_curve runs again for leap_live's head, and so does what read leap_curve.json
    assert ran == ["bench.scripts.leap_curve", "bench.scripts.leap_sim", "bench.scripts.leap_predictors",
                   "bench.scripts.leap_live", "bench.scripts.leap_live"]


def test_resume_refuses_code_changes_and_a_record_at_another_commit(monkeypatch, tmp_path):
    _fake_run(monkeypatch, tmp_path, [" M policies/cache/lru.py"], done={"baselines": 60.0}, commit="fff0000")
    monkeypatch.setattr(sys, "argv", ["all", "--only", "baselines", "--resume"])
    with pytest.raises(SystemExit, match="dirty tree"):
        rebuild.main()
    monkeypatch.setattr(rebuild, "dirty", lambda root=REPO_ROOT: [])
    with pytest.raises(SystemExit, match="nothing to resume at code commit abc1234"):
        rebuild.main()


def test_a_fresh_run_refuses_changed_tables(monkeypatch, tmp_path):
    ran = _fake_run(monkeypatch, tmp_path, [" M bench/results/baselines.md"])
    monkeypatch.setattr(sys, "argv", ["all", "--only", "baselines"])
    with pytest.raises(SystemExit, match="dirty tree"):
        rebuild.main()
    assert ran == []


def test_the_manifest_indexes_every_committed_result_at_the_commit_its_file_names():
    text = (RESULTS / rebuild.MANIFEST).read_text()
    assert text.startswith(rebuild.index(RESULTS)), "MANIFEST.md is stale: python -m bench.scripts.all --manifest"
    listed = set(re.findall(r"\| `([^`|]+)` \| (?:[0-9a-f]{7,40}|not stamped) \|", text))
    committed = {p.name for p in RESULTS.iterdir() if p.is_file() and p.name != rebuild.MANIFEST}
    assert listed == committed
    assert "not stamped" not in text and rebuild.LAST_RUN in text


def test_the_index_reads_each_files_stamp_and_keeps_the_last_rebuild(tmp_path, monkeypatch):
    table = rebuild.Table("t", ("bench.scripts.t",), ("t.md", "t.png"))
    other = rebuild.Table("j", ("bench.scripts.j",), ("j.json",))
    monkeypatch.setattr(rebuild, "TABLES", (table, other))
    (tmp_path / "t.md").write_text("# T\n\nProduced by `python -m bench.scripts.t` at commit abc1234 (1 min).\n")
    (tmp_path / "t.png").write_bytes(b"png")
    (tmp_path / "j.json").write_text(json.dumps({"commit": "def5678", "rows": []}))
    (tmp_path / "MANIFEST.md").write_text("# old index\n\n## The last rebuild\n\nat code commit 0000000\n")
    text = rebuild.manifest(tmp_path)
    assert "| t | `python -m bench.scripts.t` | `t.md` | abc1234 |" in text
    assert "| t | `python -m bench.scripts.t` | `t.png` | abc1234 |" in text  # a figure: its table's
    assert "| j | `python -m bench.scripts.j` | `j.json` | def5678 |" in text
    assert text.endswith("## The last rebuild\n\nat code commit 0000000\n") and "# old index" not in text
    assert rebuild.manifest(tmp_path, "## The last rebuild\n\nnew run\n").endswith("new run\n")


def test_a_missing_head_reruns_its_producer_and_its_readers_only(tmp_path):
    from bench.scripts.rebuild_record import redo

    tables = [t for t in rebuild.TABLES if t.name.startswith("leap")]
    done = {t.name: 60.0 for t in tables[:4]}
    assert redo(tables, done, ["leap_live_public"], tmp_path).tables == {"leap_predictors"}
    for t in tables:
        for s in t.scratch:
            (tmp_path / s).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / s).write_bytes(b"npz")
    assert redo(tables, done, ["leap_live_public"], tmp_path).tables == set()
    (tmp_path / "results/leap/head.npz").unlink()
    assert redo(tables, {"leap_curve": 1.0, "leap": 1.0}, ["leap_live"], tmp_path).tables == {"leap_curve", "leap"}


def test_each_table_runs_after_what_it_reads_and_its_heads_have_a_writer():
    order = [t.name for t in rebuild.TABLES]
    writer = {path: t.name for t in rebuild.TABLES for path in t.scratch}
    for table in rebuild.TABLES:
        assert all(order.index(p) < order.index(table.name) for p in table.after), table.name
        assert all(writer.get(path) in table.after for path in table.needs), table.name
    # the scripts read and write the paths the tables declare
    assert 'default=Path("results/leap")' in (REPO_ROOT / "bench/scripts/leap_curve.py").read_text()
    assert '"results/leap/head.npz"' in (REPO_ROOT / "bench/scripts/leap_live.py").read_text()
