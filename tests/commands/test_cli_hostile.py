"""The command line and the files it reads against hostile input (issue 20, findings 6-10):
no file lost, no traceback, every number bounded before work, one exit code per meaning."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

import numpy as np
import pytest

from commons_arena import ScenarioError
from commons_arena.batched.tick import repair_purchases_rows
from commons_arena.enums import ALLOCATOR
from commons_arena.scenario import scenario_from_dict
from experiments.evaluation.roster import checkpoint_hash
from policies.checkpoint_format import CheckpointError
from policies.learned import LearnedPolicy
from tests.commands.test_cli_errors import assert_one_line_error, run_cli
from tests.conftest import TINY

GOLDEN = Path(__file__).parents[1] / "golden" / "standard.jsonl"


# ------------------------------------------------------------------ 6. files lost
def test_replay_never_writes_over_its_input_by_any_name(capsys, tmp_path):
    recording = tmp_path / "rec.jsonl"
    recording.write_bytes(GOLDEN.read_bytes())
    os.link(recording, tmp_path / "r.html")  # a hard link: another name, the same file
    (tmp_path / "s.html").symlink_to(recording)
    for target in ("r.html", "s.html"):
        assert_one_line_error(capsys, "replay", str(recording), "-o", str(tmp_path / target), "--force",
                              match="is also the input")
    assert recording.read_bytes() == GOLDEN.read_bytes()


def test_tournament_does_not_rewrite_a_results_folder_of_another_database(capsys, tmp_path):
    out, other = tmp_path / "results", tmp_path / "other"
    out.mkdir(), other.mkdir()
    (out / "scores.csv").write_text("earlier results\n")
    with sqlite3.connect(other / "results.sqlite") as db:  # another tournament's database, resumed
        db.execute("create table earlier (x)")
    assert_one_line_error(capsys, "tournament", "--seeds", "1", "--scenarios", "standard", "--workers", "1",
                          "--out", str(out), "--db", str(other / "results.sqlite"), match="pass --force")
    assert (out / "scores.csv").read_text() == "earlier results\n"


@pytest.mark.parametrize("argv", [
    ["play", "--quiet", "--record", "{tmp}/missing/rec.jsonl"],
    ["tournament", "--seeds", "1", "--workers", "1", "--out", "{tmp}/out", "--db", "{tmp}/missing/r.sqlite"],
])
def test_output_files_are_never_given_missing_folders(capsys, tmp_path, argv):
    assert_one_line_error(capsys, *[a.format(tmp=tmp_path) for a in argv], match="does not exist")
    assert not (tmp_path / "missing").exists()


def test_play_does_not_record_over_its_scenario_file(capsys, tmp_path):
    scenario = tmp_path / "s.toml"
    from tests.conftest import toml_dumps

    scenario.write_text(toml_dumps(TINY))
    before = scenario.read_bytes()
    assert_one_line_error(capsys, "play", "--quiet", "--scenario", str(scenario), "--record", str(scenario),
                          "--force", match="is also the input")
    assert scenario.read_bytes() == before


# ------------------------------------------------------------------ 7. numbers bounded before work
@pytest.mark.parametrize(("argv", "match"), [
    (["evaluate", "--seeds", "300000000"], "--seeds must be a finite number in [1, 100000]"),
    (["evaluate", "--first-seed", str(2**63 - 1), "--seeds", "2"], "--first-seed"),
    (["play", "--seed", str(10**30)], "--seed must be a finite number"),
    (["analyze", "runs/x", "--seeds", "300000000"], "--seeds"),
    (["serve", "--idle-seconds", "nan"], "--idle-seconds must be a finite number"),
    (["serve", "--idle-seconds", "inf"], "--idle-seconds"),
    (["serve", "--max-body-bytes", str(2**40)], "--max-body-bytes"),
    (["tournament", "--ray-min-seconds", "nan"], "--ray-min-seconds must be a finite number"),
    (["tournament", "--workers", "100000"], "--workers"),
    (["replay", str(GOLDEN), "--episode", "-1"], "--episode"),
])
def test_numbers_are_finite_and_bounded_before_any_work(capsys, argv, match):
    started = time.perf_counter()
    assert_one_line_error(capsys, *argv, match=match)
    assert time.perf_counter() - started < 10  # no 4 GB list first


# ------------------------------------------------------------------ 8. one line, not a traceback
def test_a_chain_of_the_most_jobs_loads_and_a_long_cycle_is_one_error():
    data = json.loads(json.dumps(TINY))
    data["max_ticks"] = 1000
    base = {"gpus": 1, "work": 1.0, "arrival": 0, "deadline": 1000, "value": 1.0}
    chain = [{**base, "id": f"j{i}", "depends_on": [f"j{i + 1}"] if i < 999 else []} for i in range(1000)]
    data["teams"][0]["jobs"] = chain
    assert len(scenario_from_dict(data).teams[0].jobs) == 1000
    chain[-1]["depends_on"] = ["j0"]
    with pytest.raises(ScenarioError, match="dependency cycle j0 -> j1"):
        scenario_from_dict(data)


def test_tournament_db_that_is_not_a_database(capsys, tmp_path):
    db = tmp_path / "notes.sqlite"
    db.write_text("my notes, not a database\n")
    assert_one_line_error(capsys, "tournament", "--seeds", "1", "--workers", "1", "--out", str(tmp_path / "out"),
                          "--db", str(db), match="not a results database")
    assert db.read_text() == "my notes, not a database\n"


def _golden_with(tmp_path, change) -> Path:
    lines = GOLDEN.read_text().splitlines()
    for i, line in enumerate(lines):
        data = json.loads(line)
        if data.get("type") == "tick" or "actions" in data:
            change(data)
            lines[i] = json.dumps(data)
            break
    path = tmp_path / "changed.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_verify_exit_codes_mean_one_thing_each(capsys, tmp_path):
    assert run_cli(capsys, "verify", str(GOLDEN))[0] == 0
    huge = _golden_with(tmp_path, lambda d: d["actions"]["allocator"]["buy"].__setitem__(0, 10**30))
    assert_one_line_error(capsys, "verify", str(huge), match="not integers")  # cannot check: 2, not 1
    wrong = _golden_with(tmp_path, lambda d: d["actions"]["allocator"]["buy"].__setitem__(0, 1 - d["actions"][
        "allocator"]["buy"][0]))
    code, out, _ = run_cli(capsys, "verify", str(wrong))
    assert code == 1 and out.startswith("DIFFERS")


@pytest.mark.slow
@pytest.mark.rllib  # saves RLlib modules
@pytest.mark.parametrize(("change", "message"), [
    (lambda m: m.__setitem__("action_codec", {"name": "relative", "params": {"x": 1}}), "action_codec.params"),
    (lambda m: m["observation_scale"].__setitem__(0, 5e-324), "observation_scale.0"),
    (lambda m: m["observation_scale"].__setitem__(0, 1e308), "observation_scale.0"),
])
def test_sidecar_numbers_are_bounded(tmp_path, change, message):
    from tests.policies.test_checkpoint_format import (  # imports torch and RLlib: only where used
        edit_sidecar,
        save_agent,
    )

    checkpoint = save_agent(tmp_path / "ckpt", "standard", ALLOCATOR, codec="relative")
    edit_sidecar(checkpoint, change)
    with pytest.raises(CheckpointError, match=message):
        LearnedPolicy.load(checkpoint, "standard", ALLOCATOR)


def _train_run(tmp_path: Path, args_json: str) -> Path:
    run = tmp_path / "runs" / "hand"
    run.mkdir(parents=True)
    (run / "args.json").write_text(args_json)
    (tmp_path / "runs" / "latest").symlink_to("elsewhere")
    return run


@pytest.mark.parametrize(("args_json", "match"), [
    ("[]", "a JSON list, not an object"),
    ('{"experiment": "allocator_ppo", "hidden": 5}', "hidden must be a list"),
    ('{"experiment": "allocator_ppo", "lr": "fast"}', "lr must be a float"),
    ('{"experiment": "allocator_ppo", "gamma": 7}', "--gamma must be in (0, 1]"),
    ('{"experiment": "allocator_ppo", "backdoor": 1}', "unknown key(s) ['backdoor']"),
])
def test_train_resume_refuses_a_bad_args_json_before_writing(capsys, tmp_path, args_json, match):
    run = _train_run(tmp_path, args_json)
    assert_one_line_error(capsys, "train", "--resume", str(run), match=match)
    assert sorted(p.name for p in run.iterdir()) == ["args.json"] and (run / "args.json").read_text() == args_json
    assert os.readlink(tmp_path / "runs" / "latest") == "elsewhere"


def test_train_resume_checks_a_full_legacy_record_scenario(capsys, tmp_path):
    from dataclasses import asdict

    from experiments.training.args import TrainArgs

    args_json = json.dumps({**asdict(TrainArgs()), "scenario": "nope"}, default=str)
    run = _train_run(tmp_path, args_json)
    assert_one_line_error(capsys, "train", "--resume", str(run), match="no scenario named 'nope'")
    assert sorted(p.name for p in run.iterdir()) == ["args.json"] and (run / "args.json").read_text() == args_json
    assert os.readlink(tmp_path / "runs" / "latest") == "elsewhere"


# ------------------------------------------------------------------ 10. slow
def repair_purchases(buys, offer, price, budget):
    """The core's purchase repair of one arena: (bought, cost, offer cut, budget cut)."""
    cut = repair_purchases_rows(np.array([buys], dtype=np.int64), np.array([offer], dtype=np.int64),
                                np.asarray(price, dtype=np.float64)[None], np.array([budget]))
    return cut.bought[0], float(cut.cost[0]), int(cut.offer_cut[0]), int(cut.budget_cut[0])


def test_budget_repair_costs_the_same_at_any_number_of_units():
    prices = np.array([3.0, 7.5, 1.25, 9.0, 2.0, 4.0])
    repair_purchases([1] * 6, [1] * 6, prices, budget=1.0)  # warm
    started = time.thread_time()  # CPU time: the machine's other load does not count
    bought, cost, _, cut = repair_purchases([100_000] * 6, [100_000] * 6, prices, budget=1234.5)
    assert time.thread_time() - started < 0.02  # unit by unit, this took ~0.2 s
    assert cost <= 1234.5 + 1e-9 and cost > 1234.5 - prices.max() and cut == 600_000 - int(bought.sum())
    # below the bulk threshold, the unit-by-unit rule as before (the golden trajectories hold it too)
    rng = np.random.default_rng(0)
    for _ in range(200):
        buys, price = rng.integers(0, 30, 3).tolist(), rng.choice([0.0, 0.5, 1.0, 2.5], 3)
        budget = float(rng.uniform(0, 40))
        got = repair_purchases(buys, buys, price, budget)
        fixed, left = list(buys), float(np.array(buys) @ price)
        for tier in sorted(range(3), key=lambda i: (price[i], i), reverse=True):
            while fixed[tier] > 0 and left > budget + 1e-9:
                fixed[tier] -= 1
                left -= price[tier]
        assert got[0].tolist() == fixed


@pytest.mark.slow
@pytest.mark.rllib
def test_checkpoint_identity_reads_only_the_sidecar(tmp_path):
    from tests.policies.test_checkpoint_format import (  # imports torch and RLlib: only where used
        edit_sidecar,
        save_agent,
    )

    checkpoint = save_agent(tmp_path / "ckpt", "standard", ALLOCATOR, codec="relative")
    first = checkpoint_hash(checkpoint)
    with open(checkpoint / "huge.bin", "wb") as fh:  # 64 GiB, sparse: hashing it would take minutes
        fh.truncate(64 * 2**30)
    started = time.perf_counter()
    assert checkpoint_hash(checkpoint) == first
    assert time.perf_counter() - started < 1
    edit_sidecar(checkpoint, lambda m: m.__setitem__("scenario", "renamed"))
    assert checkpoint_hash(checkpoint) != first


# ------------------------------------------------------------------ round three (issue 33)
def snapshot(root: Path) -> dict[str, object]:
    """Every path under ``root``: a file's bytes, a symlink's target, a folder (nothing is followed)."""
    out: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        out[rel] = ("link", os.readlink(path)) if path.is_symlink() else ("dir",) if path.is_dir() \
            else ("file", path.read_bytes()) if path.is_file() else ("special",)  # a FIFO is never opened
    return out


@pytest.fixture
def place(tmp_path):
    """A working folder with a runs/ parent whose `latest` points somewhere, and a FIFO."""
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "latest").symlink_to("elsewhere")
    os.mkfifo(tmp_path / "fifo")
    return tmp_path


def _experiment(place: Path, line: str) -> Path:
    path = place / "exp.toml"
    path.write_text(f"[train]\n{line}\n[scenarios]\nstandard = \"2cb03cb275ff\"\n")
    return path


BIG = str(10**30)


@pytest.mark.parametrize(("argv", "match"), [
    (["train", "--seed", BIG], "--seed must be at most"),
    (["train", "--eval-seeds", str(10**12)], "--eval-seeds must be at most"),
    (["train", "--eval-first-seed", BIG], "--eval-first-seed must be at most"),
    (["train", "--hidden", "65536", "65536", "65536", "65536"], "--hidden needs 1 to 8 layer sizes"),
    (["train", "--num-env-runners", str(10**6)], "--num-env-runners must be at most"),
    (["train", "--torch-threads", str(10**9)], "--torch-threads must be at most"),
    (["train", "--selection-refine", "-1"], "--selection-refine must be >= 0"),
    (["train", "--lr", "1e300"], "--lr must be in [0, 10]"),  # issue 52: reached torch after Ray
    (["train", "--zero-bias", "1e300"], "--zero-bias must be in [0, 100]"),
    (["train", "--best-code-bias", "1e300"], "--best-code-bias must be in [0, 100]"),
    (["train", "--entropy-coeff", "1e300"], "--entropy-coeff must be in [0, 100]"),
    (["train", "--selection-refine", "3990"], "--selection-seeds + --selection-refine must be at most 4000"),
    (["train", "--train-seeds", "1", "2", "--compare-seeds", str(10**12)], "--compare-seeds must be"),
    (["train", "--train-seeds", "1", BIG], "--train-seeds must be distinct seeds in"),
    (["train", "--config", "{tmp}/exp.toml", "--config", "{tmp}/exp.toml"], "--config is given 2 times"),
    (["train", "--config", "/dev/zero"], "a character device, not a regular file"),
    (["train", "--config", "{tmp}/fifo"], "a FIFO, not a regular file"),
    (["train", "--config", "{tmp}/runs"], "a folder, not a regular file"),
    (["exploit", "--allocators", "proportional", "nope", "--out", "{tmp}/runs/exploit"], "unknown policy 'nope'"),
    (["exploit", "--allocators", "edf", "--first-seed", BIG, "--out", "{tmp}/runs/exploit"], "--first-seed"),
    (["verify", "{tmp}/fifo"], "a FIFO, not a regular file"),
    (["verify", "/dev/zero"], "a character device"),
    (["tournament", "{tmp}/roster.toml", "--out", "{tmp}/runs/t"], "seeds must be at most 2**63 - 1"),
    (["tournament", "{tmp}/fifo", "--out", "{tmp}/runs/t"], "a FIFO, not a regular file"),
    (["arms-race", "--first-seed", BIG, "--out", "{tmp}/runs/ar"], "--first-seed"),
    (["evaluate", "--seeds", str(10**12), "--out", "{tmp}/runs/e"], "--seeds must be"),
    (["play", "--scenario", "{tmp}/fifo", "--quiet"], "a FIFO, not a regular file"),
    (["play", "--population", "{tmp}/fifo", "--quiet"], "a FIFO, not a regular file"),
    (["replay", "{tmp}/fifo", "-o", "{tmp}/r.html"], "a FIFO, not a regular file"),
    (["analyze", "{tmp}/runs", "--seeds", str(10**12)], "--seeds must be"),
])
def test_a_bad_value_changes_nothing_and_starts_no_work(capsys, place, argv, match):
    """Every command checks before it writes or trains: the file system and `latest` stay as they were."""
    _experiment(place, "seed = 0")
    (place / "roster.toml").write_text(f'scenarios = ["standard"]\nentrants = ["edf"]\nseeds = [{2**63}]\n')
    before = snapshot(place)
    argv = [a.format(tmp=place) for a in argv]
    if argv[0] == "train":
        argv += ["--out", str(place / "runs")]
    assert_one_line_error(capsys, *argv, match=match)
    assert snapshot(place) == before


@pytest.mark.parametrize(("line", "match"), [
    ('iterations = "2"', "train.iterations: Input should be a valid integer (got '2')"),
    ("seed = true", "train.seed: Input should be a valid integer (got True)"),
    ("seed = 2.0", "train.seed: Input should be a valid integer (got 2.0)"),
    ("num_env_runners = 1e6", "train.num_env_runners: Input should be a valid integer"),
    ("torch_threads = 1000000000", "--torch-threads must be at most 256"),
    ("quiet = 1", "Extra inputs are not permitted"),
    ("learners = [1]", "train.learners.0: Input should be a valid string"),
    ("a = " + "[" * 1200 + "]" * 1200, "nests deeper than 32 levels"),
])
def test_experiment_files_are_strict(capsys, place, line, match):
    path = _experiment(place, line)
    before = snapshot(place)
    assert_one_line_error(capsys, "train", "--config", str(path), "--out", str(place / "runs"), match=match)
    assert snapshot(place) == before


@pytest.mark.parametrize(("args_json", "match"), [
    ('{"experiment": "../../etc"}', "--experiment must be one of"),
    ('{"experiment": "allocator_ppo", "algo": "evil"}', "--algo must be one of"),
    ('{"experiment": "allocator_ppo", "seed": 1000000000000000000000000000000}', "--seed must be at most"),
    ('{"experiment": "allocator_ppo", "hidden": [65536, 65536, 65536, 65536]}', "--hidden needs"),
    ("[" * 5000, "nests deeper than 32 levels"),
])
def test_train_resume_revalidates_the_saved_arguments(capsys, tmp_path, args_json, match):
    run = _train_run(tmp_path, args_json)
    assert_one_line_error(capsys, "train", "--resume", str(run), match=match)
    assert sorted(p.name for p in run.iterdir()) == ["args.json"] and (run / "args.json").read_text() == args_json
    assert os.readlink(tmp_path / "runs" / "latest") == "elsewhere"


@pytest.mark.parametrize(("name", "content", "match"), [
    ("state.json", "[1]", "must hold a JSON object"),
    ("state.json", '{"iterations": "2"}', "not the state of"),
    ("state.json", '{"iterations": -5}', "iterations: Input should be greater than or equal to 0"),
    ("state.json", '{"stage": 99}', "stage 99 is not one of this run's 1 stage"),
    ("state.json", '{"iterations": 1, "seconds": 1e30}', "seconds: Input should be less than or equal"),
    ("state.json", '{"iterations": 1, "history": [{"iteration": 7, "scenario": "standard", "score": 0.1}]}',
     "end at most at iterations"),
    ("state.json", '{"iterations": 1, "extra": 1}', "Extra inputs are not permitted"),
    ("observation_scale.json", '{"allocator": ["x"]}', "allocator's scale must be"),
    ("references.json", "[]", "references.json: not the references of this run's held-out scenarios"),
    ("league.json", '{"iteration": "1"}\n', "not a league log row"),
])
def test_train_resume_checks_the_run_folder_before_writing(capsys, tmp_path, name, content, match):
    from dataclasses import asdict

    from experiments.training.args import TrainArgs

    run = _train_run(tmp_path, json.dumps(asdict(TrainArgs()), default=str))
    (run / name).write_text(content)
    before = snapshot(tmp_path)
    assert_one_line_error(capsys, "train", "--resume", str(run), match=match)
    assert snapshot(tmp_path) == before


def test_train_resume_refuses_a_legacy_record_lacking_arguments(capsys, tmp_path):
    """A legacy args.json without, say, ``hidden`` would resume with today's default and fail on the checkpoint
    after rewriting experiment.toml: refused first, nothing written, ``latest`` unmoved."""
    from dataclasses import asdict

    from experiments.training.args import TrainArgs

    saved = asdict(TrainArgs())
    del saved["hidden"]
    run = _train_run(tmp_path, json.dumps(saved, default=str))
    before = snapshot(tmp_path)
    assert_one_line_error(capsys, "train", "--resume", str(run), match="args.json lacks ['hidden']")
    assert snapshot(tmp_path) == before and os.readlink(tmp_path / "runs" / "latest") == "elsewhere"


def test_resume_keeps_the_runs_recorded_budget(tmp_path):
    """A run killed in iteration 2 of --iterations 2 resumes to 2 (not the 10-minute default); one that
    trained its budget is refused; a budget given now is the run's new total."""
    from dataclasses import asdict

    from experiments.training.args import TrainArgs
    from experiments.training.runs import run_args

    run = _train_run(tmp_path, json.dumps(asdict(TrainArgs(iterations=2, minutes=3.0)), default=str))
    resumed = run_args(TrainArgs(resume=run))
    assert (resumed.iterations, resumed.minutes) == (2, 3.0)
    assert run_args(TrainArgs(resume=run, iterations=5)).iterations == 5
    (run / "state.json").write_text(json.dumps({"iterations": 2, "env_steps": 100, "seconds": 5.0}))
    with pytest.raises(ValueError, match="it has trained 2 of its 2 iterations"):
        run_args(TrainArgs(resume=run))
    assert run_args(TrainArgs(resume=run, iterations=3)).iterations == 3


# ------------------------------------------------------------------ aggregate and analyze
def _seed_run(parent: Path, seed: int, **history_row) -> Path:
    from dataclasses import asdict

    from experiments.training.args import TrainArgs

    folder = parent / f"s{seed}"
    folder.mkdir(parents=True)
    (folder / "args.json").write_text(json.dumps(asdict(TrainArgs(experiment="seats_ppo", seed=seed)), default=str))
    row = {"iteration": 5, "env_steps": 100, "scenario": "standard", "minutes": 1.0, "score": 0.1 * seed,
           **history_row}
    (folder / "history.json").write_text(json.dumps([row]))
    return folder


@pytest.mark.parametrize(("damage", "match"), [
    (lambda p: None, "no finished run folders"),
    (lambda p: (_seed_run(p, 1) / "history.json").write_text("[]"), "no finished run folders"),
    (lambda p: (_seed_run(p, 1) / "history.json").write_text("{}"), "not a run's history"),
    (lambda p: (_seed_run(p, 1) / "history.json").write_text('[{"iteration": 1}]'), "row 0: scenario: Field required"),
    (lambda p: _seed_run(p, 1, iteration="5"), "row 0: iteration: Input should be a valid integer"),
    (lambda p: _seed_run(p, 1, score=None), "held-out score"),
    (lambda p: _seed_run(p, 1, **{"score/x": "high"}), "score/x must be a number"),
    (lambda p: _seed_run(p, 1, scenario=5), "row 0: scenario: Input should be a valid string"),
    (lambda p: (_seed_run(p, 1) / "args.json").write_text("[1]"), "a JSON list, not an object"),
    (lambda p: (_seed_run(p, 1) / "args.json").write_text('{"experiment": "x", "seed": "1"}'), "seed must be a int"),
    (lambda p: (_seed_run(p, 1) / "final_scores.json").write_text('{"standard": 1}'), "a number \"score\""),
    (lambda p: (_seed_run(p, 1) / "history.json").write_text("[" * 3000), "nests deeper than 32 levels"),
    (lambda p: (_seed_run(p, 1), _seed_run(p / "x", 1), os.rename(p / "x" / "s1", p / "s1b")), "the same seed"),
    (lambda p: (_seed_run(p, 1), _seed_run(p, 2, scenario="crisis")), "judged on different scenarios"),
])
def test_seed_report_reports_every_bad_run_folder_in_one_line(capsys, tmp_path, damage, match):
    parent = tmp_path / "seeds"
    parent.mkdir()
    damage(parent)
    before = snapshot(tmp_path)
    assert_one_line_error(capsys, "seed-report", str(parent), "--compare-seeds", "0", match=match)
    assert snapshot(tmp_path) == before


def test_seed_report_never_writes_through_a_symlink_nor_replaces_without_force(capsys, tmp_path):
    parent = tmp_path / "seeds"
    _seed_run(parent, 1), _seed_run(parent, 2)
    outside = tmp_path / "outside.md"
    outside.write_text("keep me")
    (parent / "aggregate.md").symlink_to(outside)
    for force in ([], ["--force"]):
        assert_one_line_error(capsys, "seed-report", str(parent), "--compare-seeds", "0", *force, match="is a symlink")
    assert outside.read_text() == "keep me"
    (parent / "aggregate.md").unlink()
    (parent / "aggregate.json").write_text("earlier")
    assert_one_line_error(capsys, "seed-report", str(parent), "--compare-seeds", "0", match="pass --force")
    assert (parent / "aggregate.json").read_text() == "earlier"
    assert_one_line_error(capsys, "seed-report", str(tmp_path / "missing"), match="is not a folder")


def test_analyze_never_writes_through_a_symlinked_output(capsys, tmp_path):
    run = _seed_run(tmp_path / "runs", 1).parent / "s1"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "analysis.md").write_text("keep me")
    (run / "analysis").symlink_to(outside)
    before = snapshot(tmp_path)
    for force in ([], ["--force"]):
        assert_one_line_error(capsys, "analyze", str(run), *force, match="is a symlink")
    (run / "analysis").unlink()
    (run / "analysis").mkdir()
    (run / "analysis" / "analysis.md").symlink_to(outside / "analysis.md")
    assert_one_line_error(capsys, "analyze", str(run), "--force", match="is a symlink")
    (run / "analysis" / "analysis.md").unlink()
    (run / "analysis").rmdir()
    (run / "analysis").symlink_to(outside)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(("history", "match"), [
    ('[{"iteration": 1, "score": 0.1}]', "row 0: scenario: Field required"),
    ('[{"iteration": 2, "scenario": "standard", "score": 1}, {"iteration": 1, "scenario": "standard", "score": 1}]',
     "iterations must rise"),
    ('[{"iteration": 1, "scenario": "standard", "score": 1, "returns": {"search": "x"}}]', "returns.search"),
    ('"odd"', "not a run's history"),
])
def test_analyze_reports_odd_run_folders_in_one_line(capsys, tmp_path, history, match):
    run = _seed_run(tmp_path / "runs", 1)
    (run / "history.json").write_text(history)
    assert_one_line_error(capsys, "analyze", str(run), match=match)
    assert not (run / "analysis").exists()


def test_seed_report_of_a_folder_without_runs_answers_in_one_line(capsys, tmp_path):
    before = snapshot(tmp_path)
    assert_one_line_error(capsys, "seed-report", str(tmp_path), match=f"no finished run folders in {tmp_path}")
    assert snapshot(tmp_path) == before


# ------------------------------------------------------------------ verify, rosters, checkpoints
def _golden_mutated(mutate) -> list[dict]:
    records = [json.loads(line) for line in GOLDEN.read_text().splitlines()]
    mutate(records)
    return records


def _first_tick(records):
    return next(r for r in records if r["type"] == "tick")


@pytest.mark.parametrize(("mutate", "match"), [
    (lambda r: _first_tick(r)["actions"]["allocator"].__setitem__("buy", [1.5, 0, 0]), "buy must be 3 integer(s)"),
    (lambda r: _first_tick(r)["actions"]["allocator"].__setitem__("buy", ["1", 0, 0]), "buy must be 3 integer(s)"),
    (lambda r: _first_tick(r)["actions"]["allocator"].__setitem__("buy", [True, 0, 0]), "buy must be 3 integer(s)"),
    (lambda r: _first_tick(r)["actions"]["allocator"].__setitem__("buy", [0, 0]), "buy must be 3 integer(s)"),
    (lambda r: _first_tick(r)["actions"].pop("broker"), "recorded actions name agents"),
    (lambda r: _first_tick(r)["actions"].__setitem__("ghost", {}), "recorded actions name agents"),
    (lambda r: _first_tick(r)["actions"]["allocator"].__setitem__("extra", 1), "has parts"),
    (lambda r: r[0].__setitem__("format_version", 9), "format_version 9"),
    (lambda r: r[0].__setitem__("format_version", 1.0), "format_version 1.0"),  # was DIFFERS (exit 1)
    (lambda r: r[0].__setitem__("format_version", True), "format_version True"),
    (lambda r: r[0].__setitem__("seed", 1.5), "the seed must be an integer"),
    (lambda r: r.pop(), "ends before its summary line: the file was cut"),  # issue 52: was "DIFFERS" (exit 1)
    (lambda r: r.__delitem__(slice(5, None)), "ends before its summary line: the file was cut"),
])
def test_verify_calls_a_malformed_recording_bad_input_not_a_difference(capsys, tmp_path, mutate, match):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in _golden_mutated(mutate)) + "\n")
    assert_one_line_error(capsys, "verify", str(path), match=match)  # exit 2: cannot be checked


def test_roster_seeds_and_anchors_are_checked_before_play():
    from experiments.evaluation.roster import RosterError, roster_from_dict

    base = {"scenarios": ["standard"], "entrants": ["edf"], "seeds": [1]}
    for seeds in ([2**63], {"first": 2**63 - 1, "count": 2}):
        with pytest.raises(RosterError, match="seeds"):
            roster_from_dict({**base, "seeds": seeds})
    with pytest.raises(ValueError, match="low and high are the same policy"):
        roster_from_dict({**base, "anchors": {"low": "edf", "high": "edf"}})
    roster_from_dict({**base, "seeds": [2**63 - 1]})


@pytest.mark.parametrize(("params", "match"), [
    ({"level": 1.5}, "must be an integer"), ({"level": True}, "must be a finite number"),
    ({"margin": True}, "must be a finite number"),
])
def test_policy_parameters_have_their_types(params, match):
    from policies.registry import make_policy

    with pytest.raises(ValueError, match=match):
        make_policy("fixed_price", "standard", "broker", **params)
    with pytest.raises(ValueError, match="must be true or false"):
        make_policy("best_fit", "standard", "allocator", defer=1)


@pytest.mark.parametrize("sidecar", ["[1, 2]", '{"a":' * 3000 + "1" + "}" * 3000,
                                     '{"agent": 5, "scenario": "standard", "scenario_hash": "x", '
                                     '"observation_shape": [1], "action_nvec": [1], "observation_scale": [1]}',
                                     '{"agent": "../../x", "scenario": "standard", "scenario_hash": "x", '
                                     '"observation_shape": [1], "action_nvec": [1], "observation_scale": [1]}'])
def test_convert_checkpoint_refuses_a_bad_sidecar_in_one_line(capsys, tmp_path, sidecar):
    (tmp_path / "arena_policy.json").write_text(sidecar)
    assert_one_line_error(capsys, "convert-checkpoint", str(tmp_path), "--i-trust-this-checkpoint",
                          match="arena_policy.json")


# ------------------------------------------------------------------ the checkpoint cache
@pytest.fixture
def cache(tmp_path, monkeypatch):
    from policies import shipping

    monkeypatch.setenv("COMMONS_ARENA_CHECKPOINT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(shipping, "_INSTALLED", {})
    return tmp_path / "cache"


def test_pack_takes_regular_files_inside_the_checkpoint_only(tmp_path, monkeypatch):
    from policies import shipping

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "arena_policy.json").write_text("{}")
    (tmp_path / "secret").write_text("outside")
    (ckpt / "arena_policy.safetensors").symlink_to(tmp_path / "secret")
    with pytest.raises(shipping.ShippingError, match="not a regular file"):
        shipping.pack(str(ckpt))
    (ckpt / "arena_policy.safetensors").unlink()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "arena_policy.json").write_text("outside")
    (ckpt / "policies").mkdir()
    (ckpt / "policies" / "member").symlink_to(tmp_path / "elsewhere")  # a symlinked folder is not entered
    assert [rel for rel, _ in shipping.pack(str(ckpt)).files] == ["arena_policy.json"]
    monkeypatch.setattr(shipping, "MAX_FILE_BYTES", 10)
    (ckpt / "arena_policy.json").write_text("{" + " " * 20 + "}")
    with pytest.raises(shipping.ShippingError, match="size limit"):
        shipping.pack(str(ckpt))


def test_the_cache_is_rehashed_and_a_refused_unpack_leaves_nothing(tmp_path, cache):
    from policies import shipping

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "arena_policy.json").write_text('{"real": true}')
    packed = shipping.pack(str(ckpt))
    planted = cache / packed.sha256
    planted.mkdir(parents=True)
    (planted / "arena_policy.json").write_text('{"planted": true}')
    where = shipping.unpack(packed)
    assert where == planted and (where / "arena_policy.json").read_text() == '{"real": true}'
    (tmp_path / "decoy").mkdir()
    (tmp_path / "decoy" / "arena_policy.json").write_text('{"real": true}')
    import shutil

    shutil.rmtree(planted)
    planted.symlink_to(tmp_path / "decoy")  # the right bytes, but through a symlink
    assert not shipping.unpack(packed).is_symlink()
    assert sorted(p.name for p in cache.iterdir()) == [packed.sha256]  # no staging or set-aside folder left
    bad = shipping.PackedCheckpoint("x", (("../evil/arena_policy.json", b"{}"),), shipping.digest(
        [("../evil/arena_policy.json", b"{}")]))
    with pytest.raises(shipping.ShippingError, match="leaves the checkpoint"):
        shipping.unpack(bad)
    assert sorted(p.name for p in cache.iterdir()) == [packed.sha256] and not (tmp_path / "evil").exists()


@pytest.mark.slow
@pytest.mark.rllib  # saves an RLlib module
def test_analyze_reads_a_mixed_run_on_its_hardest_tier(tmp_path):
    """The main job's run (allocator_mixed) records its rows as scenario "mixed": analyze used to look for a
    scenario named 'mixed'; it analyses the mix on its hardest tier."""
    from dataclasses import asdict

    from experiments.studies.analysis import read_run
    from experiments.training.args import TrainArgs
    from tests.policies.test_checkpoint_format import save_agent  # imports torch and RLlib: only where used

    run = tmp_path / "run"
    save_agent(run / "checkpoint", "standard", ALLOCATOR)
    (run / "args.json").write_text(json.dumps(asdict(TrainArgs(experiment="allocator_mixed")), default=str))
    (run / "history.json").write_text(json.dumps([{"iteration": 5, "env_steps": 10, "scenario": "mixed",
                                                   "score": 0.5, "score/standard": 0.4, "score/crisis": 0.6}]))
    assert read_run(run).scenario == "crisis"


@pytest.mark.parametrize(("entry", "match"), [
    ('broker = { policy = "fixed_price", level = 999 }', "cannot play scenario 'standard': level must be in [0, 10]"),
    ('broker = { policy = "fixed_price", nonsense = 1 }', "nonsense"),
])
def test_serve_refuses_at_start_a_population_it_cannot_play(capsys, tmp_path, entry, match):
    """Issue 44: a population whose policy refuses its parameters started a server whose every reset failed."""
    population = tmp_path / "population.toml"
    population.write_text(f"[roles]\n{entry}\n")
    assert_one_line_error(capsys, "serve", "--population", str(population), "--port", "0", match=match)


# ------------------------------------------------------------------ round five (issue 52)
@pytest.mark.parametrize("dangling", [True, False])
def test_train_refuses_a_link_at_its_run_folder_before_writing(capsys, place, dangling):
    """A link at the run folder's name (dangling or not) would carry the whole run and `latest` to its target."""
    target = place / "elsewhere-run"
    if not dangling:
        target.mkdir()
    (place / "runs" / "mine").symlink_to(target)
    before = snapshot(place)
    assert_one_line_error(capsys, "train", "--out", str(place / "runs"), "--run-name", "mine", "--iterations", "1",
                          match="is a symlink")
    assert snapshot(place) == before and not (target.exists() and any(target.iterdir()))


def test_exploit_refuses_a_link_at_a_cell_seat_folder_before_training(capsys, tmp_path):
    out = tmp_path / "exploit"
    (out / "standard-edf-search").mkdir(parents=True)
    (out / "standard-edf-search" / "search").symlink_to(tmp_path / "outside")
    before = snapshot(tmp_path)
    assert_one_line_error(capsys, "exploit", "--allocators", "edf", "--scenarios", "standard", "--seats", "search",
                          "--seeds", "2", "--discount-seeds", "0", "--out", str(out), "--force", match="is a symlink")
    assert snapshot(tmp_path) == before and not (tmp_path / "outside").exists()


def _run_with_checkpoint(tmp_path: Path, recorded: bool) -> Path:
    from dataclasses import asdict

    from commons_arena.inputs import tree_sha256
    from experiments.training.args import TrainArgs

    run = _train_run(tmp_path, json.dumps(asdict(TrainArgs(iterations=5)), default=str))
    (run / "checkpoint" / "learner_group").mkdir(parents=True)
    (run / "checkpoint" / "algorithm_state.pkl").write_bytes(b"the run's own pickle")
    (run / "checkpoint" / "learner_group" / "state.pkl").write_bytes(b"another")
    state = {"iterations": 1, "checkpoint_sha256": tree_sha256(run / "checkpoint") if recorded else ""}
    (run / "state.json").write_text(json.dumps(state))
    return run


@pytest.mark.parametrize(("recorded", "plant", "match"), [
    (False, None, "recorded no sha256 of its checkpoint"),
    (True, lambda c: (c / "learner_group" / "state.pkl").write_bytes(b"cos\nsystem\n..."), "its files differ"),
    (True, lambda c: (c / "env_runner.pkl").write_bytes(b"planted"), "its files differ"),
    (True, lambda c: (c / "module.pkl").symlink_to(c / "algorithm_state.pkl"), "a link or special file"),
])
def test_train_resume_refuses_pickles_the_run_did_not_write(capsys, tmp_path, recorded, plant, match):
    """RLlib's restore unpickles the checkpoint: only files hashing as the run recorded, or --trust-checkpoint."""
    from experiments.training.args import TrainArgs
    from experiments.training.runs import run_args

    run = _run_with_checkpoint(tmp_path, recorded)
    if plant is not None:
        plant(run / "checkpoint")
    before = snapshot(tmp_path)
    assert_one_line_error(capsys, "train", "--resume", str(run), match=match)
    assert snapshot(tmp_path) == before
    assert run_args(TrainArgs(resume=run, trust_checkpoint=True)).iterations == 5  # the user's consent


def test_train_resume_takes_the_checkpoint_it_recorded(tmp_path):
    from experiments.training.args import TrainArgs
    from experiments.training.runs import run_args

    assert run_args(TrainArgs(resume=_run_with_checkpoint(tmp_path, True))).iterations == 5


def _scale(size: int, value: float = 1.0) -> list[float]:
    return [value] * size


def _references(seeds: int, value: float = 1.0, scenario: str = "standard") -> str:
    from experiments.evaluation.evaluate import BASELINE_ALLOCATORS

    return json.dumps({scenario: {name: [value] * seeds for name in ("random", "oracle", *BASELINE_ALLOCATORS)}})




@pytest.mark.parametrize(("name", "content", "match"), [
    ("observation_scale.json", lambda n, s: json.dumps({"allocator": _scale(n - 1)}), "allocator's scale must be"),
    ("observation_scale.json", lambda n, s: json.dumps({"allocator": _scale(n, 1e300)}), "allocator's scale must be"),
    ("observation_scale.json", lambda n, s: json.dumps({"search": _scale(n)}), "the run's learning seats are"),
    ("observation_scale.json", lambda n, s: '{"allocator": [NaN]}', "NaN is not a JSON number"),
    ("references.json", lambda n, s: _references(s, scenario="crisis"), "held-out scenarios ['standard']"),
    ("references.json", lambda n, s: _references(s - 1), "must be %s returns"),
    ("references.json", lambda n, s: _references(s, 1e300), "magnitude at most"),
    ("references.json", lambda n, s: _references(s).replace("1.0", "NaN", 1), "NaN is not a JSON number"),
    ("state.json", lambda n, s: '{"iterations": 1, "best_score": 1e300}', "best_score must be a score"),
    ("state.json", lambda n, s: '{"iterations": 1, "best_score": NaN}', "best_score must be a score"),
])
def test_train_resume_checks_what_it_reads_against_the_run(capsys, tmp_path, name, content, match):
    """Scales, references and the best score are checked against the run's seats, shapes, scenarios and seeds
    before the record is rewritten, `latest` moves or Ray starts (they trained, then failed, or stored NaN)."""
    from dataclasses import asdict

    import commons_arena
    from experiments.training.args import TrainArgs

    args = TrainArgs(iterations=5)
    run = _train_run(tmp_path, json.dumps(asdict(args), default=str))
    size = commons_arena.parallel_env("standard").observation_space(ALLOCATOR).shape[0]
    (run / name).write_text(content(size, args.eval_seeds))
    before = snapshot(tmp_path)
    assert_one_line_error(capsys, "train", "--resume", str(run), match=match.replace("%s", str(args.eval_seeds)))
    assert snapshot(tmp_path) == before


def test_train_resume_refuses_a_linked_state_and_a_checkpoint_of_another_network(capsys, tmp_path):
    import shutil

    from commons_arena.inputs import tree_sha256

    run = _run_with_checkpoint(tmp_path, recorded=True)
    (run / "elsewhere.json").write_text((run / "state.json").read_text())
    (run / "state.json").unlink()
    (run / "state.json").symlink_to(run / "elsewhere.json")
    assert_one_line_error(capsys, "train", "--resume", str(run), match="state.json: a symlink")
    (run / "state.json").unlink()
    shutil.rmtree(run / "checkpoint")
    shutil.copytree(Path(__file__).parents[2] / "checkpoints" / "universal", run / "checkpoint")
    (run / "state.json").write_text(json.dumps({"iterations": 1, "checkpoint_sha256": tree_sha256(run / "checkpoint")}))
    before = snapshot(tmp_path)
    assert_one_line_error(capsys, "train", "--resume", str(run), match="its checkpoint: its network is 'cells'")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(("argv", "match"), [
    (["--experiment", "league"], "league members switch per episode"),
    (["--experiment", "allocator_curriculum"], "a curriculum switches every env's scenario"),
    (["--use-lstm"], "use_lstm"),
    (["--no-scripted-in-env"], "the background plays as RLlib modules"),
])
def test_train_refuses_what_the_batched_sampler_cannot_play_before_any_work(capsys, place, argv, match):
    """Refused by the arguments' checks: before the run folder, `latest`, the references and Ray (LSTM crashed)."""
    before = snapshot(place)
    assert_one_line_error(capsys, "train", "--sampler", "batched", *argv, "--out", str(place / "runs"),
                          match=match)
    assert snapshot(place) == before


@pytest.mark.parametrize(("argv", "inside"), [
    (["evaluate", "--seeds", "2", "--out", "{out}", "--force"], "evaluation.md"),
    (["scenarios", "check", "standard", "--seeds", "1", "--out", "{out}", "--force"], "timing.md"),
    (["benchmark", "planner", "--suite", "tiers", "--seeds", "1", "--out", "{out}", "--force"], "tiers/planner/x.md"),
    (["tournament", "--seeds", "1", "--workers", "1", "--out", "{out}", "--force"], "tables/scores.md"),
    (["frontier", "--scenarios", "standard", "--allocators", "drf", "edf", "--seeds", "2", "--out", "{out}",
      "--force"], "cells/a.json"),
    (["psro", "--out", "{out}", "--force"], "psro.md"),
    (["distil", "--out", "{out}", "--force"], "distil.json"),
])
def test_every_command_refuses_a_link_among_its_outputs_before_it_plays(capsys, tmp_path, argv, inside):
    """A link in an output folder was refused by the one writer only when it got there: after the work, with a
    half-written folder left. It is refused with the other checks, before anything is played or written."""
    out = tmp_path / "out"
    (out / inside).parent.mkdir(parents=True, exist_ok=True)
    (out / inside).symlink_to(tmp_path / "elsewhere")
    before = snapshot(tmp_path)
    started = time.perf_counter()
    assert_one_line_error(capsys, *[a.format(out=out) for a in argv], match="is a symlink")
    assert snapshot(tmp_path) == before and time.perf_counter() - started < 20


def test_distil_checks_its_scenarios_before_its_output(capsys, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("a user's file")
    assert_one_line_error(capsys, "distil", "--scenarios", "nope", "--out", str(tmp_path / "out"),
                          match="no scenario named 'nope'")


def test_scenarios_generate_force_removes_only_what_its_index_lists(capsys, tmp_path):
    """Issue 52: a user's file named like a generated scenario was deleted by `--force`."""
    out = tmp_path / "gen"
    code, _, err = run_cli(capsys, "scenarios", "generate", "broad", "--count", "2", "--seed", "3", "--out", str(out))
    assert code == 0, err
    first = json.loads((out / "index.json").read_text())
    mine = out / "00007_0123456789ab.toml"  # named like one, listed by no index
    mine.write_text("# my own scenario notes\n")
    code, _, err = run_cli(capsys, "scenarios", "generate", "broad", "--count", "1", "--seed", "4", "--out", str(out),
                           "--force")
    assert code == 0, err
    assert mine.read_text() == "# my own scenario notes\n"
    assert not any((out / row["file"]).exists() for row in first)  # the earlier run's own files went
    assert len(json.loads((out / "index.json").read_text())) == 1


@pytest.mark.parametrize(("rows", "final", "match"), [
    ({"score": 1e400}, None, "score: must be a score of magnitude at most"),
    ({"score": None, "score/standard": 1e300}, None, "must be a score of magnitude at most"),
    ({}, '{"standard": {"score": 1e400}}', "a number \"score\" of magnitude at most"),
    ({"iteration": 4}, None, "share no evaluated iteration"),
])
def test_seed_report_refuses_unbounded_scores_and_writes_no_half_report(capsys, tmp_path, rows, final, match):
    """Issue 52: a forged score, a row without minutes (a KeyError), a single-tier mix (a TypeError) or seeds that
    share no iteration were tracebacks, some after part of the report was written."""
    parent = tmp_path / "seeds"
    parent.mkdir()
    _seed_run(parent, 1, **rows)
    _seed_run(parent, 2, **({"score": None, "score/standard": 0.5} if "score/standard" in rows else {}))
    if final is not None:
        (parent / "s1" / "final_scores.json").write_text(final)
    assert_one_line_error(capsys, "seed-report", str(parent), "--compare-seeds", "0", match=match)
    assert sorted(p.name for p in parent.iterdir()) == ["s1", "s2"]


def test_seed_report_reads_rows_without_minutes_and_single_tier_mixes(capsys, tmp_path):
    parent = tmp_path / "seeds"
    parent.mkdir()
    for seed in (1, 2):
        folder = _seed_run(parent, seed, score=None, **{"score/standard": 0.1 * seed})
        row = json.loads((folder / "history.json").read_text())[0]
        del row["minutes"]
        (folder / "history.json").write_text(json.dumps([row]))
    code, out, err = run_cli(capsys, "seed-report", str(parent), "--compare-seeds", "0")
    assert code == 0, err
    assert {"aggregate.md", "aggregate.json", "learning_curves.png"} <= {p.name for p in parent.iterdir()}


@pytest.mark.parametrize(("argv", "match"), [
    (["evaluate", "--seeds", "1", "--out", "{fifo}"], "{fifo} is a FIFO; give a folder for the output"),
    (["scenarios", "generate", "broad", "--count", "1", "--seed", "1", "--out", "{fifo}"], "is a FIFO; give a folder"),
    (["tournament", "--seeds", "1", "--workers", "1", "--out", "{tmp}/t", "--db", "{fifo}"],
     "--db {fifo} is a FIFO, not a results database file"),
    (["replay", str(GOLDEN), "-o", "{fifo}", "--force"], "{fifo} exists and is a FIFO, not a regular file"),
])
def test_a_fifo_output_is_named_a_fifo(capsys, place, argv, match):
    """Issue 52 (section 14): a FIFO given as an output was called "a file" or "not a file"."""
    fifo = str(place / "fifo")
    before = snapshot(place)
    assert_one_line_error(capsys, *[a.format(fifo=fifo, tmp=place) for a in argv], match=match.format(fifo=fifo))
    assert snapshot(place) == before


def test_a_damaged_results_database_is_named_in_its_error(capsys, tmp_path):
    """Issue 52 (section 14): SQLite's "file is not a database" named no file."""
    db = tmp_path / "results.sqlite"
    db.write_bytes(b"SQLite format 3\x00" + b"damaged" * 20)
    before = db.read_bytes()
    assert_one_line_error(capsys, "tournament", "--seeds", "1", "--workers", "1", "--out", str(tmp_path / "out"),
                          "--db", str(db), match=f"results store {db}: file is not a database")
    assert db.read_bytes() == before


def test_train_resume_refuses_a_seat_checkpoint_that_does_not_fit_the_seat(capsys, tmp_path):
    import shutil
    from dataclasses import asdict

    from commons_arena.inputs import tree_sha256
    from experiments.training.args import TrainArgs

    run = _train_run(tmp_path, json.dumps(asdict(TrainArgs(experiment="seats_ppo", learners=("search",))), default=str))
    shutil.copytree(Path(__file__).parents[2] / "checkpoints" / "universal", run / "checkpoint" / "policies" / "search")
    (run / "state.json").write_text(json.dumps({"iterations": 1, "checkpoint_sha256": tree_sha256(run / "checkpoint")}))
    before = snapshot(tmp_path)
    assert_one_line_error(capsys, "train", "--resume", str(run), match="is a universal allocator; 'search'")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(("plant", "match"), [
    (lambda out, tmp: (tmp / "elsewhere").mkdir() or out.rmdir() or out.symlink_to(tmp / "elsewhere"), "runs/out is a symlink"),
    (lambda out, tmp: (out / ".references").symlink_to(tmp / "elsewhere"), ".references is a symlink"),
    (lambda out, tmp: (out / ".references").write_text("x"), ".references is not a folder"),
    (lambda out, tmp: (out / ".references").mkdir() or os.mkfifo(out / ".references" / "a.json"), "is a special file"),
    (lambda out, tmp: (out / ".references").mkdir() or (out / ".references" / "a.json").symlink_to(tmp / "x.json"),
     "a.json is a symlink"),
])
def test_train_refuses_a_linked_out_or_reference_cache_before_the_run_folder(tmp_path, plant, match):
    """`train --out` through a link (every other command refuses it) and a planted `<out>/.references` (read and
    written by every run there) were refused by the one writer only after the run folder and `latest` were made."""
    from experiments.training.args import TrainArgs
    from experiments.training.runs import run_args

    out = tmp_path / "runs" / "out"
    out.mkdir(parents=True)
    plant(out, tmp_path)
    before = snapshot(tmp_path)
    with pytest.raises(ValueError, match=match):
        run_args(TrainArgs(out=out, run_name="r"))
    assert snapshot(tmp_path) == before


def test_a_resumed_run_writes_beside_its_folder_whatever_its_record_says(tmp_path):
    """A record's `out` (edited, or the run folder moved) sent the reference cache a resume writes elsewhere."""
    from dataclasses import asdict

    from experiments.training.args import TrainArgs
    from experiments.training.runs import run_args

    run = _train_run(tmp_path, json.dumps(asdict(TrainArgs(iterations=5, out=tmp_path / "outside")), default=str))
    assert run_args(TrainArgs(resume=run)).out == run.parent.resolve()


@pytest.mark.parametrize("state", ['{"iterations": 1, "best_score": "1"}', '{"iterations": 1, "seconds": "5"}'])
def test_train_resume_reads_a_state_number_only_as_a_number(capsys, tmp_path, state):
    from dataclasses import asdict

    from experiments.training.args import TrainArgs

    run = _train_run(tmp_path, json.dumps(asdict(TrainArgs(iterations=5)), default=str))
    (run / "state.json").write_text(state)
    before = snapshot(tmp_path)
    assert_one_line_error(capsys, "train", "--resume", str(run), match="Input should be a valid number")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("name", ["observation_scale.json", "references.json"])
@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_train_resume_refuses_a_special_record_before_writing(capsys, tmp_path, name, kind):
    """A FIFO or folder where a record stands read as 'none saved': the record was rewritten and `latest` moved
    before the writer refused it."""
    from dataclasses import asdict

    from experiments.training.args import TrainArgs

    run = _train_run(tmp_path, json.dumps(asdict(TrainArgs(iterations=5)), default=str))
    os.mkfifo(run / name) if kind == "fifo" else (run / name).mkdir()
    before = snapshot(tmp_path)
    assert_one_line_error(capsys, "train", "--resume", str(run), match=f"{name}: a {'FIFO' if kind == 'fifo' else 'folder'}")
    assert snapshot(tmp_path) == before


def test_train_resume_refuses_a_checkpoint_without_the_files_the_run_writes_with_it(tmp_path):
    """Every checkpoint a run saves holds its data-only sidecar: without it nothing checks the record against the
    networks, and a changed `hidden` or `history` failed only after Ray."""
    from experiments.training.args import TrainArgs
    from experiments.training.runs import run_args
    from experiments.training.setup import resolve

    run = _run_with_checkpoint(tmp_path, recorded=True)
    with pytest.raises(ValueError, match="its checkpoint has no arena_policy.json"):
        resolve(run_args(TrainArgs(resume=run)))


@pytest.mark.slow
@pytest.mark.rllib  # the cells network's layer check builds its module's sizes
def test_a_resumed_checkpoint_of_other_layers_is_named_as_the_resume(tmp_path):
    import shutil
    from dataclasses import asdict

    from commons_arena.inputs import tree_sha256
    from experiments.training.args import TrainArgs
    from experiments.training.runs import run_args
    from experiments.training.setup import resolve

    run = _train_run(tmp_path, json.dumps(asdict(TrainArgs(iterations=5, network="cells")), default=str))
    shutil.copytree(Path(__file__).parents[2] / "checkpoints" / "universal", run / "checkpoint")
    (run / "state.json").write_text(json.dumps({"iterations": 1, "checkpoint_sha256": tree_sha256(run / "checkpoint")}))
    with pytest.raises(ValueError, match=r"^--resume .*: its checkpoint: its network's layers"):  # it said --init-from
        resolve(run_args(TrainArgs(resume=run)))
