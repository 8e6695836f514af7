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


def _fake_run(monkeypatch, tmp_path, changes, done=None):
    """all.main with git and the table scripts replaced; returns the commands it ran."""
    ran: list[str] = []
    monkeypatch.setattr(rebuild, "dirty", lambda root=REPO_ROOT: list(changes))
    monkeypatch.setattr(rebuild, "code_commit", lambda: "abc1234")
    monkeypatch.setattr(rebuild, "progress_path", lambda commit: tmp_path / f"{commit}.json")
    monkeypatch.setattr(rebuild, "checksums", lambda root: {})
    monkeypatch.setattr(rebuild, "REPO_ROOT", tmp_path)
    (tmp_path / "bench" / "results").mkdir(parents=True)
    monkeypatch.setattr(rebuild.subprocess, "run", lambda argv, **k: ran.append(argv[2]))
    if done is not None:
        (tmp_path / "abc1234.json").write_text(json.dumps({"commit": "abc1234", "done": done}))
    return ran


def test_resume_runs_only_the_unfinished_tables_at_the_same_code_commit(monkeypatch, tmp_path):
    ran = _fake_run(monkeypatch, tmp_path, [" M bench/results/baselines.md"], done={"baselines": 120.0})
    monkeypatch.setattr(sys, "argv", ["all", "--only", "baselines", "penelope", "--resume"])
    rebuild.main()
    assert ran == ["bench.scripts.penelope"]
    assert set(json.loads((tmp_path / "abc1234.json").read_text())["done"]) == {"baselines", "penelope"}
    manifest = (tmp_path / "bench" / "results" / "MANIFEST.md").read_text()
    assert "at code commit abc1234" in manifest and "| baselines | `python -m bench.scripts.baselines` | 2.0 min" in manifest


def test_resume_refuses_code_changes_and_a_missing_record(monkeypatch, tmp_path):
    _fake_run(monkeypatch, tmp_path, [" M policies/cache/lru.py"], done={})
    monkeypatch.setattr(sys, "argv", ["all", "--only", "baselines", "--resume"])
    with pytest.raises(SystemExit, match="dirty tree"):
        rebuild.main()
    (tmp_path / "abc1234.json").unlink()
    monkeypatch.setattr(rebuild, "dirty", lambda root=REPO_ROOT: [])
    with pytest.raises(SystemExit, match="nothing to resume"):
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
