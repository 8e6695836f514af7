"""``python -m server --help`` and ``python -m bench --help`` (the real CLIs, in subprocesses),
the README's options table, and ``compose.progress``."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from functools import cache

import pytest

from compose import progress
from compose.config import CONF_DIR, group_options
from compose.help import options_table
from server.options import table
from tests.conftest import REPO

#: Groups the server reads: every policy kind and the model.
SERVER_GROUPS = ("policy", "cache", "admission", "router", "adapters", "model")
#: Groups only the simulator reads.
SIM_GROUPS = ("trace", "accelerator", "model_profile")
README_TABLE = re.compile(r"<!-- options table: [^\n]*-->\n(.*?)\n<!-- end of options table -->", re.S)


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True, timeout=120)


@cache
def help_page(entry: str) -> str:
    proc = run("-m", entry, "--help")
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    return proc.stdout


def option_rows(page: str, group: str) -> set[str]:
    """The option names listed under ``page``'s ``<group>=`` / ``+<group>=`` heading."""
    head = re.search(rf"^\+?{group}=  ", page, re.M)
    assert head is not None, f"no {group}= heading"
    block = page[head.end():].split("\n\n")[0]
    return {m.group(1) for m in re.finditer(r"^  (\S+) {2,}", block, re.M)}


@pytest.mark.parametrize("group", SERVER_GROUPS)
def test_server_help_lists_every_option_of_the_servers_groups(group):
    options = set(group_options(group))
    assert options, f"conf/{group}/ is empty"
    assert option_rows(help_page("server"), group) == options


def test_server_help_leaves_out_the_simulators_groups_and_the_schema():
    page = help_page("server")
    for group in SIM_GROUPS:
        assert not re.search(rf"^\+?{group}=", page, re.M), group
        assert f"{group}." not in page, group
        for option in group_options(group):
            assert not re.search(rf"^  {re.escape(option)} ", page, re.M), f"{group}={option}"
    assert "_schema" not in page
    assert "powered by Hydra" not in page  # NOTE: Hydra's stock page, replaced by hydra.help


def test_server_help_explains_the_plus_rule_sglang_fields_and_builtins():
    page = help_page("server")
    assert "leading +" in page and "policy=fairway without it fails" in page
    assert "sglang.<field>=value" in page and "python -m sglang.launch_server --help" in page
    lpm = re.search(r"^  lpm .*?(?=^  \S)", page, re.M | re.S)
    assert lpm is not None and "[SGLang's own --schedule-policy lpm]" in " ".join(lpm.group(0).split())
    fairway = re.search(r"^  fairway .*?(?=^  \S)", page, re.M | re.S)
    assert fairway is not None and "SGLang's own" not in fairway.group(0)
    assert "python -m bench --help" in page


@pytest.mark.parametrize("group", (*SIM_GROUPS, "policy", "cache"))
def test_bench_help_lists_the_simulators_groups(group):
    assert option_rows(help_page("bench"), group) == set(group_options(group))


def test_bench_help_leaves_out_the_servers_model_group():
    page = help_page("bench")
    assert not re.search(r"^model=", page, re.M) and "_schema" not in page


def test_help_with_overrides_composes_them():
    ok = run("-m", "server", "--help", "+policy=fairway", "policy.cap_ratio=2")
    assert ok.returncode == 0 and "+policy=" in ok.stdout, ok.stderr
    bad = run("-m", "server", "--help", "+policy=nope")
    assert bad.returncode == 2 and "unknown option 'nope' for +policy=" in bad.stderr, bad.stderr


@pytest.mark.parametrize("entry", ["server", "bench"])
def test_help_into_a_closed_pipe_exits_quietly(entry):
    # NOTE: `true` exits before the page is written (Python starts slower), so the write
    # meets a closed pipe; pipefail makes the status Python's.
    proc = subprocess.run(["bash", "-c", f"set -o pipefail; {sys.executable} -m {entry} --help | true"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


@pytest.mark.parametrize("entry", ["server", "bench"])
def test_help_imports_neither_sglang_nor_torch(entry):
    proc = run("-X", "importtime", "-m", entry, "--help")
    assert proc.returncode == 0, proc.stderr
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "compose.catalog" in imported  # NOTE: the import log is read at all
    heavy = {m for m in imported if m.split(".")[0] in {"sglang", "torch"}}
    assert not heavy, sorted(heavy)[:5]


def test_readme_options_table_is_the_generated_one():
    found = README_TABLE.search((REPO / "README.md").read_text())
    assert found is not None, "README.md lacks the options table markers"
    assert found.group(1) == table(), "run: python -m server.options"


def test_generated_table_describes_each_option_from_its_class():
    table = options_table("config")
    assert "| | `lpm` | Most cached tokens first" in table
    assert "`queue_threshold`" in table and "`cache.host_tier_tokens`" in table
    assert "`_target_`" not in table
    for option in group_options("model"):
        assert f"| | `{option}` |" in table
    assert (CONF_DIR / "model" / "smollm2.yaml").exists() and "*default*" in table


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_plain_lines_first_step_one_per_interval_and_the_last():
    out, clock = io.StringIO(), Clock()
    with progress.Progress(10, "sweep", unit="run", stream=out, interval_s=30.0, clock=clock) as bar:
        assert not bar.is_bar
        for i in range(10):
            clock.t = 10.0 * (i + 1)  # NOTE: one step every 10 s: at most every third step prints
            bar.update(status=f"run {i}")
    lines = out.getvalue().splitlines()
    assert lines[0] == "[switchboard] sweep: 1/10 runs (10%), 10 s, ~90 s left: run 0"
    assert [line.split(": ")[1].split(" ")[0] for line in lines] == ["1/10", "4/10", "7/10", "10/10"]
    assert lines[-1] == "[switchboard] sweep: 10/10 runs (100%), 100 s: run 9"


def test_plain_close_prints_where_the_work_stopped():
    out, clock = io.StringIO(), Clock()
    with progress.Progress(5, "rebuild", stream=out, clock=clock) as bar:
        bar.update()
        clock.t = 1.0
        bar.update()
    assert out.getvalue().splitlines() == ["[switchboard] rebuild: 1/5 steps (20%), 0 s, ~0 s left",
                                           "[switchboard] rebuild: 2/5 steps (40%), 1 s, ~2 s left"]


def test_track_yields_every_item_and_counts_them():
    out = io.StringIO()
    assert list(progress.track(["a", "b", "c"], "t", stream=out, interval_s=1e9, label=str)) == ["a", "b", "c"]
    assert out.getvalue().splitlines() == ["[switchboard] t: 1/3 steps (33%), 0 s, ~0 s left: a",
                                           "[switchboard] t: 3/3 steps (100%), 0 s: c"]


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_tqdm_bar(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    out = FakeTty()
    with progress.Progress(3, "convert", stream=out) as bar:
        assert bar.is_bar and type(bar._bar).__module__.startswith("tqdm")
        bar.update(status="step one")
        bar.update(2)
    text = out.getvalue()
    assert "convert" in text and "3/3" in text and "[switchboard]" not in text
    assert not progress.Progress(3, "x", stream=FakeTty(), bar=False).is_bar
    monkeypatch.setenv("TERM", "dumb")
    assert not progress.Progress(3, "x", stream=FakeTty()).is_bar
