"""Experiment files (``commons-arena train --config FILE.toml``): validated, complete, rerunnable,
and two runs of the same file and seed give identical weights."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from dataclasses import fields, replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import commons_arena
from commands import cli
from experiments.hash_seed import TRAINING_HASH_SEED, needs_pinning
from experiments.training.args import TrainArgs
from experiments.training.config_file import (
    SESSION_FIELDS,
    ExperimentFileError,
    args_from_dict,
    experiment_text,
    load_experiment,
)

CONFIGS = Path(__file__).resolve().parents[3] / "experiments" / "configs"
SHIPPED = sorted(p for p in CONFIGS.glob("*.toml") if "train" in tomllib.loads(p.read_text()))  # psro.toml: a study's
TINY = dict(iterations=2, eval_every=2, eval_seeds=2, train_batch_size=128, minibatch_size=64, num_epochs=2,
            num_envs_per_env_runner=4, hidden=(16, 16), quiet=True)


UNSET_PATHS = {"background", "mix_background", "mixture", "init_from"}  # optional paths: a file leaves them out when unset

def as_data(args: TrainArgs) -> dict:
    return tomllib.loads(experiment_text(args))


def test_a_file_holds_every_field_and_reads_back_as_the_same_arguments():
    args = TrainArgs(experiment="allocator_mixed", lr=1e-3, hidden=(32, 8), iterations=7, vf_clip=float("inf"))
    data = as_data(args)
    assert set(data["train"]) == {f.name for f in fields(TrainArgs)} - set(SESSION_FIELDS) - UNSET_PATHS
    assert data["scenarios"] == {n: commons_arena.load_scenario(n).content_hash for n in ("standard", "elevated", "crisis")}
    assert args_from_dict(data) == replace(args, zero_bias=args.favour_strength)  # the default, pinned


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_shipped_files_load_and_hold_every_hyperparameter(path, monkeypatch):
    monkeypatch.chdir(CONFIGS.parents[1])  # their paths are relative to the repository root
    args = load_experiment(path)
    written = set(tomllib.loads(path.read_text())["train"])
    missing = {f.name for f in fields(TrainArgs)} - set(SESSION_FIELDS) - written - UNSET_PATHS
    assert not missing, f"{path.name} lacks {sorted(missing)}: add them (a default that changes must not change a rerun)"
    assert args.iterations is not None  # the budget is iterations; minutes only caps it


def test_shipped_folder_has_the_main_job_and_the_experiments():
    assert {"main", "selfplay", "league", "best_response", "curriculum"} <= {p.stem for p in SHIPPED}


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["train"].update(lrr=0.1), r"train\.lrr: Extra inputs are not permitted"),
    (lambda d: d.update(extra={}), r"extra: Extra inputs are not permitted"),
    (lambda d: d["train"].update(lr="fast"), r"train\.lr: "),
    (lambda d: d["train"].update(experiment="nope"), r"train\.experiment: "),
    (lambda d: d["train"].update(minibatch_size=4096), r"train: --minibatch-size must be between"),
    (lambda d: d["train"].update(resume="runs/x"), r"train\.resume: Extra inputs are not permitted"),
    (lambda d: d.pop("scenarios"), r"scenarios: Field required"),
    (lambda d: d["scenarios"].pop("crisis"), r"scenarios must list exactly .*standard, elevated, crisis"),
])
def test_bad_files_are_refused_naming_the_key(edit, message):
    data = as_data(TrainArgs(experiment="allocator_mixed"))
    edit(data)
    with pytest.raises(ExperimentFileError, match=message):
        args_from_dict(data, "x.toml")


def test_a_changed_scenario_is_refused_naming_both_hashes():
    data = as_data(TrainArgs())
    now = data["scenarios"]["standard"]
    data["scenarios"]["standard"] = "0123456789ab"
    with pytest.raises(ExperimentFileError, match=f"scenarios.standard: .*file: 0123456789ab, now: {now}"):
        args_from_dict(data)


@pytest.mark.parametrize("field", ["background", "mix_background"])
def test_a_changed_background_is_refused(tmp_path, field):
    roster = tmp_path / "bg.toml"
    roster.write_text('[agents]\nsearch = "truthful"\n')
    data = as_data(TrainArgs(experiment="allocator_ppo", **{field: roster}))
    assert getattr(args_from_dict(data), field) == roster
    roster.write_text('[agents]\nsearch = "greedy_bluffer"\n')
    with pytest.raises(ExperimentFileError, match=rf"^invalid experiment file .*: {field}.sha256: .*changed since"):
        args_from_dict(data)


def test_cli_flags_override_the_file(tmp_path, monkeypatch):
    path = tmp_path / "e.toml"
    path.write_text(experiment_text(TrainArgs(experiment="allocator_mixed", lr=1e-3, num_epochs=3, iterations=9)))
    seen: list[TrainArgs] = []
    # the command imports the training module only to call it: a stand-in keeps RLlib out of this test
    monkeypatch.setitem(sys.modules, "experiments.training.train",
                        SimpleNamespace(train=lambda args, setup: seen.append(args)))
    cli.main(["train", "--config", str(path), "--num-epochs", "5", "--iterations", "2"])
    assert seen == [TrainArgs(experiment="allocator_mixed", lr=1e-3, num_epochs=5, iterations=2, zero_bias=3.0)]


def test_cli_refuses_a_bad_file_in_one_line(tmp_path, capsys, monkeypatch):
    path = tmp_path / "e.toml"
    path.write_text(experiment_text(TrainArgs()).replace("[train]", "[train]\ngama = 0.9"))
    with pytest.raises(SystemExit) as exit_:
        cli.main(["train", "--config", str(path)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "train.gama: Extra inputs are not permitted" in err


def _weights(checkpoint: Path) -> dict[str, dict[str, np.ndarray]]:
    from safetensors.numpy import load_file

    return {p.parent.name: load_file(p) for p in sorted(checkpoint.glob("**/arena_policy.safetensors"))}


MIX_ROSTER = 'name = "bluffing search"\n\n[agents]\nsearch = { policy = "truthful", bluff = 3.0 }\n'


@pytest.mark.slow
@pytest.mark.rllib
@pytest.mark.ray
@pytest.mark.parametrize(
    "experiment, runners, mix, sampler",
    [# the main job's sampler (experiments/configs/main.toml: the batched core, in the driver)
     ("allocator_mixed", 0, False, "batched"), ("selfplay", 0, False, "stock"),
     # five modules of unequal rows through the lean path's learner (experiments/training/lean.py)
     ("selfplay", 0, False, "lean"),
     # two remote env runners with half the episodes against another background (--mix-background)
     ("allocator_mixed", 2, True, "stock")],
)
def test_same_file_and_seed_give_identical_weights_in_fresh_processes(ray_session, tmp_path, experiment, runners, mix,
                                                                      sampler):
    """Two runs of one experiment file (the main job's experiment, sampled in the driver by the
    batched core or by two remote env runners side by side with a background mix; self-play, five
    RLlib modules drawing from one torch generator in RLlib's set order of agents), each in its
    own Python process started with another string-hash seed, give the same weights bit for bit
    (training pins the hash seed: experiments/hash_seed.py; the start weights reach
    every remote runner before it samples: experiments/training/weight_sync.py); another seed does not."""
    import ray

    path = tmp_path / "tiny.toml"
    extra = {}
    if mix:
        (tmp_path / "mix.toml").write_text(MIX_ROSTER)
        extra = {"mix_background": tmp_path / "mix.toml", "mix_share": 0.5}
    path.write_text(experiment_text(TrainArgs(experiment=experiment, out=tmp_path,
                                              **{**TINY, "num_env_runners": runners, "sampler": sampler, **extra})))
    root = str(Path(__file__).resolve().parents[3])
    env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address,
           "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}

    def run(name: str, hash_seed: str, *flags: str) -> dict[str, dict[str, np.ndarray]]:
        done = subprocess.run([sys.executable, "-m", "commands", "train", "--config", str(path), "--run-name", name,
                               *flags], env={**env, "PYTHONHASHSEED": hash_seed}, capture_output=True, text=True,
                              timeout=900)
        assert done.returncode == 0, done.stderr[-2000:]
        return _weights(tmp_path / name / "checkpoint")

    first, second = run("first", "1"), run("second", "2")
    assert len(first) == (1 if experiment == "allocator_mixed" else 5)  # one module per learning seat
    for seat, tensors in first.items():
        assert set(tensors) == set(second[seat])
        assert all(np.array_equal(tensors[k], second[seat][k]) for k in tensors), f"{seat} differs between the runs"
    # the run's own experiment.toml holds the same experiment (rerun it with --config <run>/experiment.toml)
    assert load_experiment(tmp_path / "first" / "experiment.toml") == load_experiment(path)
    if experiment == "selfplay" or runners:
        return  # the other-seed check below needs running once
    other = run("seed1", "1", "--seed", "1")  # the comparison can fail
    assert any(not np.array_equal(first[seat][k], other[seat][k]) for seat in first for k in first[seat])


def test_only_training_commands_pin_the_hash_seed(capsys):
    from commands.cli import TRAINING_COMMANDS, main

    for name in TRAINING_COMMANDS:  # every one names a subcommand (a renamed one would pin nothing)
        with pytest.raises(SystemExit) as exit_info:
            main([name, "--help"])
        assert exit_info.value.code == 0 and f"commons-arena {name}" in capsys.readouterr().out
    assert needs_pinning(True, {"PYTHONHASHSEED": "1"}) and needs_pinning(True, {})
    assert not needs_pinning(True, {"PYTHONHASHSEED": TRAINING_HASH_SEED})
    assert not needs_pinning(False, {"PYTHONHASHSEED": "1"}) and not needs_pinning(False, {})


def test_a_run_reads_its_scenario_files_once(tmp_path, monkeypatch):
    """The setup parses every stage once; the run folder's experiment file reuses those configs."""
    import commons_arena.scenario as scenario_module
    from experiments.training.runs import open_run
    from experiments.training.setup import resolve

    parsed: list[str] = []
    real = scenario_module.scenario_from_dict

    def counting(data, source="<dict>"):
        parsed.append(source)
        return real(data, source=source)

    monkeypatch.setattr(scenario_module, "scenario_from_dict", counting)
    setup = resolve(TrainArgs(experiment="allocator_mixed", out=tmp_path))
    run, _, _ = open_run(setup.args, setup.stages)
    assert len(parsed) == 3, parsed  # standard, elevated, crisis: each once
    assert load_experiment(run / "experiment.toml").stages == setup.args.stages
