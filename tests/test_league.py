"""The league: snapshots join the mix and act exactly like the weights they were taken from."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns

import commons_arena
from experiments.training import league
from experiments.training.algorithm import build_algorithm
from experiments.training.seats import exact_scale
from experiments.training.setup import resolve, with_unit_scales
from experiments.training.train import TrainArgs, train

pytestmark = pytest.mark.timeout(300)

TINY = dict(eval_every=1, eval_seeds=2, train_batch_size=200, minibatch_size=50, num_epochs=1,
            num_envs_per_env_runner=2, hidden=(16, 16), quiet=True)
TEAMS = ["search", "robotics", "safety"]


def logits(module, obs: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return module.forward_inference({Columns.OBS: torch.from_numpy(obs)})[Columns.ACTION_DIST_INPUTS].numpy()


def same_weights(module, weights) -> bool:
    state = module.get_state()
    return all(np.array_equal(np.asarray(state[k]), np.asarray(weights[k])) for k in state)


def test_margin_rule():
    assert league.learner_beats_mix({"team": 120.0, "scripted_truthful": 100.0}, 0.1) == (True, 120.0, 100.0)
    assert not league.learner_beats_mix({"team": 105.0, "scripted_truthful": 100.0}, 0.1)[0]
    assert not league.learner_beats_mix({"team": 5.0}, 0.1)[0]  # nothing to compare with
    scale = exact_scale(np.array([0.5, 3.0, 100.0], np.float32))
    np.testing.assert_array_equal(scale, [1.0, 4.0, 128.0])
    x = np.random.default_rng(0).normal(size=(100, 3)).astype(np.float32) * 50
    np.testing.assert_array_equal((x / scale) * scale, x)  # scripted members see the raw observation


def test_a_snapshot_acts_like_its_source_on_the_next_iteration(ray_session):
    args = TrainArgs(experiment="league", snapshot_margin=1e9, **TINY)  # no automatic snapshots
    shape = commons_arena.parallel_env("standard").observation_space("search").shape
    algo = build_algorithm(with_unit_scales(resolve(args)))
    try:
        algo.train()
        runner = algo.env_runner  # the local env runner samples (num_env_runners=0)
        pool = ["team", "scripted_truthful", "scripted_greedy_bluffer"]
        obs = np.random.default_rng(1).normal(size=(16, shape[0] + len(TEAMS))).astype(np.float32)
        source = logits(runner.module["team"], obs)  # synced from the learner after the iteration

        # RLlib's stock sequence (add_module, then set_state) leaves the runners' copy random
        stale = league.add_snapshot(algo, "team_v1", pool, TEAMS, push=False)
        assert not same_weights(runner.module["team_v1"], stale)
        assert not np.allclose(logits(runner.module["team_v1"], obs), source)

        weights = league.add_snapshot(algo, "team_v2", [*pool, "team_v1"], TEAMS)
        assert same_weights(runner.module["team_v2"], weights)
        np.testing.assert_array_equal(logits(runner.module["team_v2"], obs), source)

        result = algo.train()  # the very next iteration samples with the snapshot in the mix
        assert "team_v2" in result["env_runners"]["module_episode_returns_mean"]
        np.testing.assert_array_equal(logits(runner.module["team_v2"], obs), source)  # frozen
        assert not np.array_equal(logits(runner.module["team"], obs), source)  # the learner moved on
        learner = algo.learner_group.get_weights(["team_v2"])["team_v2"]
        assert all(np.array_equal(learner[k], weights[k]) for k in weights)
    finally:
        algo.stop()


def test_league_run_adds_snapshots_when_the_learner_beats_the_mix(ray_session, tmp_path):
    """Margin -inf: every `snapshot_gap` iterations a snapshot joins; the log says so."""
    checkpoint = train(TrainArgs(out=tmp_path, run_name="lg", experiment="league", iterations=2, snapshot_margin=-1e9,
                                 snapshot_gap=1, **TINY))
    log = [json.loads(line) for line in (checkpoint.parent / "league.json").read_text().splitlines()]
    assert [row["snapshot"] for row in log] == ["team_v1", "team_v2"]
    assert log[-1]["mix"] == ["team", "scripted_truthful", "scripted_greedy_bluffer", "team_v1", "team_v2"]
    assert {p.name for p in (checkpoint / "policies").iterdir()} == set(TEAMS)
    with pytest.raises(ValueError, match="cannot be resumed"):
        train(TrainArgs(resume=checkpoint.parent, iterations=1))
