"""The benchmark (experiments/evaluation/benchmark.py), its suites (suite.py), the suite statistics
(statistics.py: stratified bootstrap, probability of improvement) and `scenarios check`."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from experiments.evaluation.benchmark import SELECTION_RANGE, benchmark_seeds, run_benchmark
from experiments.evaluation.results import QUIET
from experiments.evaluation.suite import SuiteError, list_suites, load_suite, suite_from_dict
from experiments.seeds import SEED_RANGES
from experiments.statistics import (
    aggregate_iqm,
    probability_of_improvement,
    stratified_bootstrap_ci,
)
from tests.commands.test_cli_errors import run_cli
from tests.conftest import TINY, toml_dumps

# --------------------------------------------------------------------------- statistics


def test_iqm_of_known_values_trims_a_quarter_at_each_end():
    assert aggregate_iqm(np.arange(1.0, 9.0)) == pytest.approx(4.5)  # mean of 3, 4, 5, 6
    assert aggregate_iqm(np.array([0.0, 1.0, 1.0, 100.0])) == pytest.approx(1.0)  # the outlier is trimmed


def test_the_bootstrap_is_stratified_every_task_keeps_its_weight():
    """Two tasks with constant runs: a stratified resample always holds four 0s and four 1s, so the
    interval of the mean is the point; an unstratified bootstrap over the eight values would spread."""
    point, low, high = stratified_bootstrap_ci([[0.0] * 4, [1.0] * 4], "mean")
    assert (point, low, high) == (0.5, 0.5, 0.5)
    point, low, high = stratified_bootstrap_ci([[0.0, 1.0, 2.0, 3.0], [10.0] * 4], "iqm")
    assert point == pytest.approx(aggregate_iqm(np.array([0.0, 1.0, 2.0, 3.0] + [10.0] * 4)))
    assert low < point < high or low <= point <= high


def test_bootstrap_interval_covers_a_known_mean_and_narrows_with_more_runs():
    rng = np.random.default_rng(3)
    few = [rng.normal(0.5, 0.2, 5) for _ in range(10)]
    many = [rng.normal(0.5, 0.2, 80) for _ in range(10)]
    _, low_few, high_few = stratified_bootstrap_ci(few, "mean")
    point, low_many, high_many = stratified_bootstrap_ci(many, "mean")
    assert low_many < 0.5 < high_many and low_many <= point <= high_many
    assert high_many - low_many < (high_few - low_few) / 2


def test_probability_of_improvement_counts_pairs_and_averages_tasks():
    # task 1: x=[1, 2] vs y=[2, 3]: pairs (1,2) (1,3) (2,2) (2,3) -> 0 + 0 + 1/2 + 0 = 1/8
    # task 2: x beats every y -> 1
    point, low, high = probability_of_improvement([[1.0, 2.0], [5.0, 6.0]], [[2.0, 3.0], [0.0, 1.0]])
    assert point == pytest.approx((1 / 8 + 1) / 2)
    assert 0.0 <= low <= point <= high <= 1.0
    same = [[0.1, 0.4, 0.9]]
    assert probability_of_improvement(same, same)[0] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="same tasks"):
        probability_of_improvement([[1.0]], [[1.0], [2.0]])


def test_a_task_without_a_finite_score_is_left_out():
    point, _, _ = stratified_bootstrap_ci([[float("nan")] * 3, [0.25, 0.25]], "mean")
    assert point == 0.25


# --------------------------------------------------------------------------- suites


@pytest.fixture
def tiny_file(tmp_path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(toml_dumps(TINY))
    return path


def suite_data(scenario: Path, **extra: Any) -> dict[str, Any]:
    return {"name": "tiny-suite", "evaluation": [{"scenario": str(scenario)},
                                                 {"scenario": str(scenario), "background": "bluffers"}],
            "backgrounds": {"default": {}, "bluffers": {"roles": {"team": "greedy_bluffer"}}}, **extra}


def test_shipped_suites_load():
    assert {"tiers", "team-search", "broker"} <= set(list_suites())
    tiers = load_suite("tiers")
    assert tiers.role == "allocator" and tiers.reference == "planner"
    assert {e.config.name for e in tiers.evaluations} == {"standard", "elevated", "crisis"}
    assert load_suite("team-search").role == "team" and load_suite("broker").role == "broker"


def test_heldout_suite_is_the_heldout_split_with_held_out_co_players():
    from commons_arena.family import heldout_hashes, load_split

    suite = load_suite("heldout-allocator")
    split = load_split("broad-heldout")
    default = [e for e in suite.evaluations if e.background_name == "default"]
    assert [e.config.content_hash for e in default] == [c.content_hash for c in split]
    assert {e.config.content_hash for e in suite.evaluations} <= set(heldout_hashes())
    others = [e for e in suite.evaluations if e.background_name != "default"]
    assert others and all(e.background.roles["team"].policy == "greedy_bluffer" for e in others)


def test_the_validation_suite_is_the_set_training_holds_out_of_broad_train():
    from commons_arena.family import heldout_hashes, hold_out, load_split

    suite = load_suite(Path(__file__).parents[3] / "docs/examples/validation-allocator.toml")
    _, validation = hold_out(tuple(load_split("broad-train")), 16)
    for background in ("default", "bluffers"):
        chosen = [e.config.content_hash for e in suite.evaluations if e.background_name == background]
        assert chosen == [c.content_hash for c in validation]
    assert not {e.config.canonical_game_hash for e in suite.evaluations} & set(heldout_hashes())


def test_a_policy_with_parameters_is_an_inline_table_on_the_command_line():
    from policies.population import Entry, PopulationError

    entry = Entry.parse('{policy = "planner", margin = 0.25}', "POLICY")
    assert entry == Entry("planner", {"margin": 0.25})
    assert Entry.parse("planner", "POLICY") == Entry("planner")
    with pytest.raises(PopulationError, match=r"POLICY: '\{policy = ' is not an inline TOML table like"):
        Entry.parse("{policy = ", "POLICY")


def test_broker_suite_tries_every_markup_code(tiny_file):
    from experiments.evaluation.benchmark import code_players
    from policies.registry import make_policy

    suite = suite_from_dict(suite_data(tiny_file, seat="broker"), source="tiny-broker")
    players = code_players(suite, suite.evaluations[0])
    assert len(players) == 300 and len({p.name for p in players}) == 300
    config = suite.evaluations[0].config
    for player in players[::37]:  # each name builds a policy for the broker seat
        assert player.name.startswith("fixed:markup:")
        make_policy(player.entry.policy, config, "broker")


@pytest.mark.parametrize("change, match", [
    (lambda d: d.pop("evaluation"), "evaluation: Field required"),
    (lambda d: d.update(evaluation=[]), "evaluation"),
    (lambda d: d.update(colour="blue"), "colour"),
    (lambda d: d["evaluation"].append({"scenario": "standard", "split": "broad-heldout"}), "exactly one of"),
    (lambda d: d["evaluation"].append({"scenario": "standard", "take": 3}), "take"),
    (lambda d: d["evaluation"].append({"scenario": "standard", "validation": 3}), "apply to a split only"),
    (lambda d: d["evaluation"].append({"split": "broad-train", "take": 2, "validation": 3}), "take or validation"),
    (lambda d: d["evaluation"].append({"split": "broad-heldout", "validation": 3}), "is held out"),
    (lambda d: d["evaluation"].append({"scenario": "standard", "background": "nobody"}),
     "background 'nobody' is not defined"),
    (lambda d: d["evaluation"].append({"scenario": "no_such_scenario"}), "evaluation[2]"),
    (lambda d: d["evaluation"].append({"scenario": "standard", "seat": "broker"}), "broker role"),
    (lambda d: d["evaluation"].append(dict(d["evaluation"][0])), "listed twice"),
    (lambda d: d.update(reference="truthful"), "reference"),
    (lambda d: d.update(seat="team:nobody"), "no team 'nobody'"),
    (lambda d: d["backgrounds"].update(odd={"roles": {"team": "edf"}}), "backgrounds.odd"),
    (lambda d: d.update(selection_seeds=0), "selection_seeds"),
])
def test_suite_errors_name_the_entry(tiny_file, change, match):
    data = suite_data(tiny_file)
    change(data)
    with pytest.raises(SuiteError, match=r"^suite ") as err:
        suite_from_dict(data, source="s.toml")
    assert match in str(err.value)


def test_unknown_suite_and_file(tmp_path):
    with pytest.raises(SuiteError, match="unknown suite 'nope'; shipped suites: .*tiers"):
        load_suite("nope")
    with pytest.raises(SuiteError, match="suite file not found"):
        load_suite(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("name = [")
    with pytest.raises(SuiteError, match="not valid TOML"):
        load_suite(bad)


# --------------------------------------------------------------------------- the benchmark, end to end


def store_returns(db: Path, seat: str, scenario: str, background: str, player: str, seeds: list[int]) -> list[float]:
    """Focal returns read straight from the SQLite rows (not through the store's code)."""
    with sqlite3.connect(db) as conn:
        rows = dict(conn.execute("SELECT seed, focal_return FROM episodes WHERE seat=? AND scenario=? AND background=? "
                                 "AND player=?", (seat, scenario, background, player)).fetchall())
    return [rows[s] for s in seeds]


def test_benchmark_scores_are_normalised_from_the_stored_rows_and_a_rerun_plays_nothing(tmp_path, tiny_file):
    suite = suite_from_dict(suite_data(tiny_file), source="tiny-suite")
    seeds = benchmark_seeds(3)
    result = run_benchmark(suite, "edf", seeds, tmp_path / "out", options=QUIET)
    db = tmp_path / "out" / "results.sqlite"
    # every player on every seed: edf, planner (the reference), random and oracle (the anchors)
    assert result.play.played == 2 * 4 * 3
    for row in result.scores:
        got = {p: store_returns(db, "allocator", "tiny", row["background"], p, seeds)
               for p in ("edf", "random", "oracle", "planner")}
        low, high = np.mean(got["random"]), np.mean(got["oracle"])
        assert row["score"] == pytest.approx((np.mean(got["edf"]) - low) / (high - low))
        assert row["reference_score"] == pytest.approx((np.mean(got["planner"]) - low) / (high - low))
        assert row["return"] == pytest.approx(np.mean(got["edf"]))
    summary = {r["policy"]: r for r in result.summary}
    assert summary["planner"]["p_improve"] == pytest.approx(0.5)
    assert summary["planner"]["p_low"] == summary["planner"]["p_high"] == "-"  # against itself: no interval
    assert summary["edf"]["p_low"] <= summary["edf"]["p_improve"] <= summary["edf"]["p_high"]
    assert summary["edf"]["mean"] == pytest.approx(np.mean([r["score"] for r in result.scores]))
    assert (tmp_path / "out" / "tiny-suite" / "edf" / "summary.md").is_file()
    # resumable: the same benchmark again plays nothing; another policy plays only its own episodes
    again = run_benchmark(suite, "edf", seeds, tmp_path / "out", options=QUIET)
    assert again.play.played == 0 and again.scores == result.scores
    other = run_benchmark(suite, "fifo", seeds, tmp_path / "out", options=QUIET)
    assert other.play.played == 2 * 3  # the references (random, oracle, planner) are cached
    reference = run_benchmark(suite, "planner", seeds, tmp_path / "out2", db=db, options=QUIET)
    assert reference.play.played == 0 and len(reference.summary) == 1
    assert reference.summary[0]["evaluation_scenarios"] == 2 and reference.summary[0]["p_improve"] == 0.5
    assert reference.summary[0]["iqm"] == pytest.approx(summary["planner"]["iqm"])


def test_team_seat_is_scored_against_the_best_fixed_code_chosen_on_selection_seeds(tmp_path, tiny_file):
    data = suite_data(tiny_file, seat="team:search", selection_seeds=2)
    data["evaluation"] = data["evaluation"][:1]
    suite = suite_from_dict(data, source="tiny-team")
    seeds = benchmark_seeds(2)
    result = run_benchmark(suite, "greedy_bluffer", seeds, tmp_path / "out", options=QUIET)
    db = tmp_path / "out" / "results.sqlite"
    with sqlite3.connect(db) as conn:
        codes = conn.execute("SELECT player, AVG(focal_return) FROM episodes WHERE seat='team:search' AND seed IN "
                             f"({', '.join(map(str, SEED_RANGES[SELECTION_RANGE].seeds(2)))}) AND player LIKE 'fixed:bluff:%' "
                             "GROUP BY player").fetchall()
    assert len(codes) == 48  # every factor x stance rule of the bluff codec
    best = max(v for _, v in codes)
    row = result.scores[0]
    assert dict(codes)[row["high"]] == pytest.approx(best)
    high = store_returns(db, "team:search", "tiny", "default", row["high"], seeds)
    low = store_returns(db, "team:search", "tiny", "default", "random", seeds)
    mine = store_returns(db, "team:search", "tiny", "default", "greedy_bluffer", seeds)
    span = np.mean(high) - np.mean(low)
    expected = (np.mean(mine) - np.mean(low)) / span if abs(span) > 1e-9 else float("nan")
    assert row["score"] == pytest.approx(expected, nan_ok=True)


# --------------------------------------------------------------------------- command line


@pytest.mark.parametrize("argv, match", [
    (["benchmark", "nonsense", "--suite", "tiers"], "unknown policy 'nonsense'"),
    (["benchmark", "truthful", "--suite", "tiers"], "plays the team role"),
    (["benchmark", "edf", "--suite", "no-such-suite"], "unknown suite"),
    (["benchmark", "edf", "--suite", "tiers", "--seeds", "0"], "--seeds must be"),
    (["benchmark", "edf", "--suite", "tiers", "--workers", "0"], "--workers must be"),
    (["scenarios", "check", "no_such_file.toml"], "scenario file not found"),
    (["scenarios", "check", "standard", "--seeds", "0"], "--seeds must be"),
])
def test_cli_errors_are_one_line(capsys, tmp_path, monkeypatch, argv, match):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, *argv)
    assert code == 2, err
    assert err.strip().count("\n") == 0 and err.startswith("commons-arena: error: ") and match in err, err
    assert not (tmp_path / "results").exists()  # refused before any work


def test_cli_benchmark_writes_once_then_needs_force_and_resumes(capsys, tmp_path, tiny_file):
    suite = tmp_path / "suite.toml"
    suite.write_text(toml_dumps({"name": "cli", "evaluation": [{"scenario": str(tiny_file)}]}))
    argv = ["benchmark", "edf", "--suite", str(suite), "--seeds", "2", "--out", str(tmp_path / "b"), "--workers", "1",
            "--no-progress"]
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    assert "benchmark: played 8 episodes" in out and "| edf | cli |" in out
    code, _, err = run_cli(capsys, *argv)
    assert code == 2 and "already holds files; pass --force" in err
    code, out, err = run_cli(capsys, *argv, "--force")
    assert code == 0 and "all 8 episodes already stored" in out, out + err
    db = tmp_path / "b" / "results.sqlite"
    not_sqlite = tmp_path / "other.sqlite"
    not_sqlite.write_text("hello")
    code, _, err = run_cli(capsys, *argv, "--db", str(not_sqlite), "--force")
    assert code == 2 and "not a results database" in err
    assert db.is_file()


def test_scenarios_check_reports_scores_bluffing_and_cost(capsys, tiny_file):
    code, out, err = run_cli(capsys, "scenarios", "check", str(tiny_file), "--seeds", "2")
    assert code == 0, err
    assert out.startswith("valid: tiny (hash ")
    for needle in ("| oracle | ", "| random | ", "| planner | ", "| edf | ", "misreport gain", "| proportional | search |",
                   "| planner | robotics |", "ms_per_episode", "| oracle | 2 |"):
        assert needle in out, needle


def test_scenarios_check_refuses_a_bad_file_with_the_scenario_error(capsys, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(toml_dumps({**TINY, "max_tickz": 3}))
    code, out, err = run_cli(capsys, "scenarios", "check", str(bad))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "max_tickz" in err, err
    code, out, _ = run_cli(capsys, "scenarios")  # the listing is still the default
    assert code == 0 and "standard" in out


def test_a_training_run_on_a_scenario_file_is_named_by_its_stem():
    """`train --scenario own.toml` writes <out>/allocator_ppo-own-s0, not a folder per path part."""
    from experiments.training.args import TrainArgs

    assert TrainArgs(scenario="docs/examples/own_cluster.toml").name == "allocator_ppo-own_cluster-s0"
    assert TrainArgs(scenario="crisis").name == "allocator_ppo-crisis-s0"


@pytest.mark.parametrize("name", ["..", ".", "x" * 300])
def test_a_suite_name_never_leaves_the_output_folder(tmp_path, name):
    """Issue 44: a suite named ``..`` wrote its report to ``OUT/../``."""
    from types import SimpleNamespace

    from commons_arena.files import OutputError
    from experiments.evaluation.benchmark import report_folder

    with pytest.raises(OutputError):
        report_folder(tmp_path, SimpleNamespace(name=name), "planner")  # type: ignore[arg-type]
    assert report_folder(tmp_path, SimpleNamespace(name="tiers"), "learned:runs/x") == tmp_path / "tiers" / "learned_runs_x"  # type: ignore[arg-type]
