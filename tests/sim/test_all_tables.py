"""``python -m bench.scripts.all``: it knows every committed table and refuses a dirty tree."""

from __future__ import annotations

import argparse
import importlib.util
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
    assert f"`python -m bench.scripts.all --only {table.name}` at commit abc1234" in text
    assert f"`{table.command}` | 1.5 min" in text and "| `x.csv` | `00ff` |" in text
