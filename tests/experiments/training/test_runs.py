"""A run folder's one record of its arguments (experiments/training/runs.py): its experiment.toml, read back
by --resume, analyze and seed-report through the experiment file's strict loader; older folders' args.json
still read. No RLlib: the folder is made by ``open_run`` as a run makes it."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, fields, replace
from pathlib import Path

import pytest

from experiments.studies.analysis import read_run
from experiments.studies.seed_report import seed_runs
from experiments.training.args import TrainArgs
from experiments.training.config_file import SESSION_FIELDS, ExperimentFileError, load_experiment
from experiments.training.runs import LEGACY_RECORD, RECORD, SEEDS_PARENT, open_run, run_args, saved_args
from tests.commands.test_cli_errors import assert_one_line_error


def new_run(tmp_path: Path, **changes) -> tuple[Path, TrainArgs]:
    args = TrainArgs(out=tmp_path / "runs", iterations=5, seed=3, lr=1e-3, **changes)
    run, recorded, _ = open_run(args)
    return run, recorded


def test_a_run_records_its_arguments_once_and_reads_them_back(tmp_path):
    run, args = new_run(tmp_path, experiment="seats_ppo", learners=("team",), hidden=(8, 4))
    assert sorted(p.name for p in run.iterdir()) == [RECORD]  # no args.json beside it
    saved = saved_args(run)
    assert set(saved) == {f.name for f in fields(TrainArgs)} - set(SESSION_FIELDS)
    assert (saved["experiment"], saved["learners"], saved["hidden"], saved["seed"]) == ("seats_ppo", ("team",), (8, 4), 3)
    assert saved["out"] == tmp_path / "runs" and saved["iterations"] == 5
    # what `train --config <run>/experiment.toml` reruns is what --resume continues
    assert replace(load_experiment(run / RECORD), run_name=args.run_name) == replace(args, zero_bias=args.favour_strength)


def test_resume_keeps_the_recorded_budget_unless_given_a_new_total(tmp_path):
    run, _ = new_run(tmp_path)
    resumed = run_args(TrainArgs(resume=run, lr=0.5))  # a flag of the run, not of the session: the record wins
    assert (resumed.iterations, resumed.minutes, resumed.lr, resumed.seed) == (5, 10.0, 1e-3, 3)
    assert resumed.run_name == run.name and resumed.resume == run
    assert run_args(TrainArgs(resume=run, iterations=8)).iterations == 8
    (run / "state.json").write_text(json.dumps({"iterations": 5}))
    with pytest.raises(ValueError, match="it has trained 5 of its 5 iterations"):
        run_args(TrainArgs(resume=run))


def test_a_record_missing_a_later_flag_resumes_with_the_value_it_trained_with(tmp_path):
    run, _ = new_run(tmp_path)
    text = (run / RECORD).read_text()
    (run / RECORD).write_text("\n".join(line for line in text.splitlines() if not line.startswith("gae_lambda")))
    assert run_args(TrainArgs(resume=run)).gae_lambda == 1.0  # RLlib's value before the flag, not today's 0.9
    assert load_experiment(run / RECORD).gae_lambda == TrainArgs().gae_lambda  # a config file: today's default


@pytest.mark.parametrize(("old", "new", "match"), [
    ("seed = 3", "seed = true", "train.seed: Input should be a valid integer"),
    ("seed = 3", "seed = 3\nbackdoor = 1", "train.backdoor: Extra inputs are not permitted"),
    ("gamma = 0.99", "gamma = 7.0", "--gamma must be in (0, 1]"),
    ("seed = 3", "seed = 3\nquiet = true", "train.quiet: Extra inputs are not permitted"),
    ('scenario = "standard"', 'scenario = "nope"', "scenarios must list exactly"),
])
def test_resume_refuses_a_hand_edited_record_before_writing(capsys, tmp_path, old, new, match):
    run, _ = new_run(tmp_path)
    (tmp_path / "runs" / "latest").unlink()
    (tmp_path / "runs" / "latest").symlink_to("elsewhere")
    text = (run / RECORD).read_text().replace(old, new, 1)
    (run / RECORD).write_text(text)
    line = assert_one_line_error(capsys, "train", "--resume", str(run), match=match)
    assert str(run / RECORD) in line
    assert sorted(p.name for p in run.iterdir()) == [RECORD] and (run / RECORD).read_text() == text
    assert os.readlink(tmp_path / "runs" / "latest") == "elsewhere"


def test_resume_refuses_a_scenario_changed_since_the_run_but_reports_still_read_it(tmp_path):
    run, _ = new_run(tmp_path)
    text = (run / RECORD).read_text()
    digest = text.split("[scenarios]")[1].split('"')[1]
    (run / RECORD).write_text(text.replace(digest, "0" * 12))
    args = run_args(TrainArgs(resume=run))  # the record's own checks pass
    with pytest.raises(ExperimentFileError, match="scenarios.standard: the scenario changed since"):
        open_run(args)
    assert (run / RECORD).read_text() == text.replace(digest, "0" * 12)  # nothing written
    assert saved_args(run)["scenario"] == "standard"  # analyze / seed-report read what the run was


def test_a_folder_from_before_the_record_is_still_read_and_resumed(tmp_path):
    run = tmp_path / "runs" / "old"
    run.mkdir(parents=True)
    old = {**asdict(TrainArgs(out=tmp_path / "runs", seed=4, iterations=3, run_name="old")), "resume": None}
    del old["gae_lambda"]
    (run / LEGACY_RECORD).write_text(json.dumps(old, default=str))
    assert saved_args(run)["seed"] == 4
    resumed = run_args(TrainArgs(resume=run))
    assert (resumed.seed, resumed.iterations, resumed.gae_lambda, resumed.run_name) == (4, 3, 1.0, "old")
    resumed_run, _, _ = open_run(resumed)
    assert saved_args(resumed_run)["seed"] == 4 and (run / RECORD).is_file()  # the record from now on


def test_reports_read_runs_by_their_record(tmp_path):
    run, _ = new_run(tmp_path, experiment="allocator_mixed")
    (run / "history.json").write_text(json.dumps([{"iteration": 5, "scenario": "mixed", "score/standard": 0.5,
                                                    "score/elevated": 0.4, "score/crisis": 0.3}]))
    (seed_run,) = seed_runs(run.parent)
    assert (seed_run.seed, seed_run.args["experiment"]) == (3, "allocator_mixed")
    with pytest.raises(ValueError, match="has no checkpoint/ folder"):  # got past the record
        read_run(run)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=f"no {RECORD}"):
        read_run(empty)


def test_the_parent_of_training_seeds_is_not_a_run(tmp_path):
    parent, _ = new_run(tmp_path)  # a folder holding an experiment.toml ...
    (parent / SEEDS_PARENT).write_text(json.dumps({"train_seeds": [0, 1]}))  # ... as --train-seeds' parent does
    with pytest.raises(ValueError, match="holds the runs of --train-seeds, one folder per seed: resume one of them"):
        run_args(TrainArgs(resume=parent))
    with pytest.raises(ValueError, match=f"no {RECORD}"):
        read_run(parent)
