"""A committed table still says what its own commands give: one row each of
``fairway.md`` and ``leap.md`` is re-run from the command the table prints and
compared cell for cell, one shape of ``speculative_sim.md`` (every row), one
row each of ``histate.md``, ``penelope.md``, ``baselines.md``, ``tiers.md``,
``router.md``, ``basin_surge.md`` and ``leap_predictors.md``, one profile and seed of
``decisions_sim.md`` (every row), one row of ``advise.md`` (its metric
cells) and one reported cell of ``dwise.md`` (at the settings its tuning chose, which
``--check-defaults`` holds equal to the config) from their scripts' own functions. A change to
the simulator or a policy that moves a number fails here until the table is
rebuilt (docs/evaluation.md, rule 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.config import compose_bench, resolve_bench
from bench.report import fmt
from bench.run import run_bench
from bench.traces.paths import default_data_root
from tests.data import needs_data

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
SCENARIO = "azure x0.4 [1800, 2400) s"
WINDOW = "trace.window_start_s=1800 trace.window_end_s=2400"

pytestmark = needs_data(default_data_root() / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv")


def table_rows(text: str, heading: str) -> tuple[list[str], dict[str, list[str]]]:
    """The header and rows (by first cell) of the first table after ``heading``."""
    after = text.split(heading, 1)[1].splitlines()
    start = next(i for i, ln in enumerate(after) if ln.startswith("|"))
    block = []
    for ln in after[start:]:
        if not ln.startswith("|"):
            break
        block.append(ln)
    header = [c.strip() for c in block[0].strip("|").split("|")]
    rows: dict[str, list[str]] = {}
    for ln in block[2:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        if len(cells) != len(header):
            break
        rows[cells[0]] = cells[1:]
    return header[1:], rows


def command(text: str, policy: str) -> list[str]:
    """The overrides of the one printed command of ``SCENARIO`` (steady Azure window) and ``policy``."""
    found = [ln.removeprefix("python -m bench ").split() for ln in text.splitlines()
             if ln.startswith("python -m bench ") and WINDOW in ln and "trace.surges" not in ln]
    # NOTE: one scenario may belong to two families (azure x0.4 and azure ~17 req/s share
    # this window): identical commands give identical rows, so they count once.
    found = list(dict.fromkeys(tuple(ov) for ov in found
                               if "trace=azure_conversation" in ov and f"+policy={policy}" in ov))
    assert len(found) == 1, f"{len(found)} commands for {policy} on {SCENARIO}"
    return list(found[0])


def run(overrides: list[str], tmp_path: Path) -> dict:
    settings = resolve_bench(compose_bench([*overrides, "output.progress=false", "output.plots=false"]))
    return run_bench(settings, tmp_path)["summary"]


@pytest.mark.parametrize("policy", ["fcfs", "fairway"])
def test_fairway_table_row_is_what_its_command_gives(policy, tmp_path):
    text = (RESULTS / "fairway.md").read_text()
    header, rows = table_rows(text, "## TTFT p50 / p90 / p99 (s), evaluation split")
    s = run(command(text, policy), tmp_path)["ttft_s"]
    assert rows[SCENARIO][header.index(policy)] == f"{fmt(s['p50'])} / {fmt(s['p90'])} / {fmt(s['p99'])}"


@pytest.mark.parametrize("label,policy", [("fcfs", "fcfs"), ("LEAP", "leap")])
def test_leap_table_row_is_what_its_command_gives(label, policy, tmp_path):
    text = (RESULTS / "leap.md").read_text()
    header, rows = table_rows(text, "Mean per-token latency (ms):")
    s = run(command(text, policy), tmp_path)
    assert rows[SCENARIO][header.index(label)] == f"{s['per_token_latency_s']['mean'] * 1e3:.1f}"


def test_dwise_cell_is_what_its_script_gives():
    """DWISE's first reported cell (every row) at the configured settings and stock's chosen slots."""
    from bench.scripts import dwise, dwise_report
    from bench.scripts.dwise_setup import BEST_STOCK_SLOTS, CONFIGURED, LOADS, WORKLOADS

    chosen = {"params": CONFIGURED, "stock_slots": BEST_STOCK_SLOTS}
    cell = dwise.cell_of(WORKLOADS[0], LOADS[0], False, chosen)
    line = dwise_report._table([cell])[-1]
    assert line in (RESULTS / "dwise.md").read_text().splitlines(), line


def test_speculative_sim_shape_is_what_its_script_gives(tmp_path):
    """The tuning split's first deployment and profile (every row of its one shape)."""
    from bench.scripts import speculative_sim as spec

    dep, shape = spec.DEPLOYMENTS[0], spec.TUNING_SHAPES[0]
    profile, clients = dep.tuning_profiles[0], spec.SHAPES[shape]
    phases = spec.phase_traces(shape, clients, dep.input_tokens, dep.output_tokens, 0)  # NOTE: the script's --seed 0
    table = spec.offline_table(dep, tmp_path / "table.json")
    runs = {name: spec.run(dep, profile, option, phases) for name, option in spec.policies(dep, table)}
    block = "\n".join(spec._shape_table(shape, clients, runs, dep, [], profile))
    text = (RESULTS / "speculative_sim.md").read_text()
    section = text.split(f"## {dep.name}; acceptance `{profile}`", 1)[1]
    assert block.strip() in section, block


@needs_data(default_data_root() / "kv_cache_tester_cc_traces")
def test_histate_tuning_row_is_what_its_script_gives(tmp_path):
    """HiState at the 600,000-token / 32-state budget on the tuning seed (10 s)."""
    from bench.scripts import histate

    line = histate.tuning_line(1, "histate t=60", histate._run((1, 0, "histate t=60"), tmp_path))
    assert line in (RESULTS / "histate.md").read_text().splitlines(), line


@needs_data(default_data_root() / "kv_cache_tester_cc_traces")
def test_penelope_tuning_row_is_what_its_script_gives(tmp_path):
    """Penelope at the 600,000-token pool on the tuning seed, no host tier, beside lru (20 s)."""
    from bench.scripts import penelope

    label = penelope.weight_label(penelope.configured_weight())
    lru, ours = (penelope._run((600_000, False, 0, row), tmp_path) for row in ("lru", label))
    line = penelope.tuning_line(600_000, False, label, ours, lru["mean"])
    assert line in (RESULTS / "penelope.md").read_text().splitlines(), line


def test_baselines_row_is_what_its_script_gives(tmp_path):
    """``lpm`` on the Azure conversation hour at x0.4 (a few seconds)."""
    from bench.scripts import baselines

    trace, scale = baselines.TRACES[1]
    s = run(baselines.overrides_for(trace, scale, "lpm"), tmp_path)
    line = "| " + " | ".join(baselines.row("lpm", s)) + " |"
    assert line in (RESULTS / "baselines.md").read_text().splitlines(), line


def test_decisions_sim_profile_is_what_its_script_gives():
    """The CPU profile, seed 1: both model settings, every row (a few seconds)."""
    from bench.scripts import decisions_sim as ds
    from bench.sim import CostModel

    profile, seed = ds.PROFILES[-1], ds.SEEDS[-1]
    settings = resolve_bench(compose_bench(list(profile.overrides)))
    cost = CostModel(settings.accelerator, settings.model_profile)
    rows = {setting: ds.setting_rows(profile, cost, settings.sim.max_prefill_tokens, holds, seed)
            for setting, holds in ds.MODELS}
    block = "\n".join(ds.table(profile, seed, rows))
    assert block.strip() in (RESULTS / "decisions_sim.md").read_text(), block


@needs_data(default_data_root() / "kv_cache_tester_cc_traces")
def test_advise_row_is_what_its_command_gives(tmp_path):
    """The sessions example's `+cache=lfu` row: its metric cells (the replay time is the machine's)."""
    from bench.advise import Job, Row, replay
    from bench.scripts.advise_examples import EXAMPLES

    argv = EXAMPLES["sessions"][1]
    base = argv[:argv.index("--kinds")]
    s = replay(Job(tuple(base), Row("+cache=lfu", ("+cache=lfu",), True)), tmp_path)["summary"]
    cells = f"| `+cache=lfu` | yes | {s['ttft_s']['mean']:.4g} | {s['prefix_hit_rate']:.4g} | "
    assert any(line.startswith(cells) for line in (RESULTS / "advise.md").read_text().splitlines()), cells


@needs_data(default_data_root() / "kv_cache_tester_cc_traces")
def test_tiers_tuning_row_is_what_its_script_gives(tmp_path):
    """FlatCake at the lowest load on the tuning seed."""
    from bench.scripts import tiers

    key = (tiers.RATES[0], 0, "flatcake")
    line = tiers.tuning_line(key[0], key[2], tiers.run_one(key, tmp_path))
    assert line in (RESULTS / "tiers.md").read_text().splitlines(), line


@needs_data(default_data_root() / "kv_cache_tester_cc_traces")
def test_router_row_is_what_its_script_gives():
    """The Claude Code section (4 replicas, no moves column): SMG's cache_aware row."""
    from bench.scripts import router

    section = router.SECTIONS[-1]
    result = run_bench(resolve_bench(compose_bench(router.overrides_for(section, "cache_aware"))))
    line = "| " + " | ".join(router.row({"router": "cache_aware", "summary": result["summary"],
                                          "per_replica": result["meta"]["per_replica"], "moves": None})) + " |"
    assert line in (RESULTS / "router.md").read_text().splitlines(), line


@needs_data(default_data_root() / "kv_cache_tester_cc_traces")
def test_basin_surge_row_is_what_its_script_gives(tmp_path):
    """The Claude Code tuning scenario without admission (the row every ratio divides by)."""
    from bench.scripts import basin_surge

    scenario = basin_surge.SCENARIOS[0]
    r = basin_surge.run_one(scenario, None, tmp_path)
    line = basin_surge.tuning_line(r, r)
    assert line in (RESULTS / "basin_surge.md").read_text().splitlines(), line



@pytest.mark.parametrize("label", ["fcfs", "LEAP head, public set", "prompt-length regression, trace's own prompts"])
def test_leap_predictors_row_is_what_its_command_gives(label, tmp_path):
    """One scenario of ``leap_predictors.md``'s simulator section: a built-in, LEAP under a live
    error model, and LEAP's prompt-length regression."""
    text = (RESULTS / "leap_predictors.md").read_text()
    header, rows = table_rows(text, "Mean per-token latency (ms) per scenario:")
    commands = text.split("## Commands (evaluation split)", 1)[1].split(f"# {label}\n", 1)[1].split("\n# ", 1)[0]
    found = {ln for ln in commands.splitlines() if WINDOW in ln and "trace.surges" not in ln
             and "trace=azure_conversation" in ln}
    assert len(found) == 1, found
    s = run(found.pop().removeprefix("python -m bench ").split(), tmp_path)
    assert rows[SCENARIO][header.index(label)] == f"{s['per_token_latency_s']['mean'] * 1e3:.1f}"
