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

pytestmark = [pytest.mark.slow, pytest.mark.rllib, pytest.mark.ray, pytest.mark.timeout(300)]

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


class _Seat:
    def __init__(self, value: float) -> None:
        self.value = value

    def get_return(self) -> float:
        return self.value


class _Episode:
    """The parts of a MultiAgentEpisode the league reads."""

    def __init__(self, returns: dict[str, float], modules: dict[str, str], custom_data: dict | None = None) -> None:
        self.agent_episodes = {seat: _Seat(v) for seat, v in returns.items()}
        self.modules = modules
        self.custom_data = custom_data or {}

    def module_for(self, seat: str) -> str:
        return self.modules[seat]


def test_the_margin_counts_each_seat_the_learner_played_once_and_can_refuse():
    """The learner plays two seats (its own and one as a member of its mix): per seat it earns
    75 against the mix's 70, under the 10 % margin. RLlib's per-module sum (150) would pass."""
    modules = {"search": "team", "robotics": "team", "safety": "scripted_truthful"}
    earlier = _Episode({"search": 40.0, "robotics": 20.0, "safety": 30.0}, modules)  # a previous chunk
    episode = _Episode({"search": 60.0, "robotics": 30.0, "safety": 40.0}, modules)
    returns = league.seat_returns(episode, [earlier], TEAMS)
    assert returns == {"team": [100.0, 50.0], "scripted_truthful": [70.0]}
    means = {m: float(np.mean(v)) for m, v in returns.items()}
    assert league.learner_beats_mix(means, 0.1) == (False, 75.0, 70.0)
    assert league.learner_beats_mix({"team": 150.0, "scripted_truthful": 70.0}, 0.1)[0]  # the old, summed reading


def test_matchups_are_drawn_from_the_episode_seed():
    pool = ["team", "scripted_truthful", "scripted_greedy_bluffer", "team_v1"]

    def matchup(episode) -> tuple[str, ...]:
        return tuple(league.league_mapping(pool, TEAMS, seat, episode) for seat in TEAMS)

    class Env:
        episode_seed = 123

    by_env = matchup(_Episode({}, {}, {league.EPISODE_ENV: Env()}))
    by_seed = matchup(_Episode({}, {}, {league.EPISODE_SEED: 123}))
    assert by_env == by_seed  # the same seed, however it is known, gives the same matchup
    seen = [matchup(_Episode({}, {}, {league.EPISODE_SEED: seed})) for seed in range(200)]
    assert all(sum(1 for seat, m in zip(TEAMS, row, strict=True)
                   if m == "team" and league._draw(str(seed), 3) == TEAMS.index(seat)) == 1
               for seed, row in enumerate(seen))  # exactly one seat is the learner's own
    assert {m for row in seen for m in row} == set(pool)  # every member plays
    assert len(set(seen)) > 10
    assert league.league_mapping(pool, TEAMS, "allocator", _Episode({}, {})) == "allocator"


def test_league_run_snapshots_play_through_learned_pay_off_and_resume(ray_session, tmp_path):
    """Margin -inf: every iteration a snapshot joins; each is written as data-only policies
    that `learned:` plays, the snapshots' payoff matrix is in the run folder, and the run resumes.
    On one remote env runner (the driver's runner then holds no env): each snapshot must reach the
    runner that samples, or the next iteration's matchups fail (test_remote_runners.py)."""
    from policies.focal import run_episode
    from policies.population import Population

    checkpoint = train(TrainArgs(out=tmp_path, run_name="lg", experiment="league", iterations=2, snapshot_margin=-1e9,
                                 snapshot_gap=1, num_env_runners=1, **TINY))
    run = checkpoint.parent
    log = [json.loads(line) for line in (run / "league.json").read_text().splitlines()]
    assert [row["snapshot"] for row in log] == ["team_v1", "team_v2"]
    assert log[-1]["mix"] == ["team", "scripted_truthful", "scripted_greedy_bluffer", "team_v1", "team_v2"]
    assert all(row["learner_return"] == row["seat_returns"]["team"] for row in log)  # per seat, as the rule reads
    assert {p.name for p in (checkpoint / "policies").iterdir()} == set(TEAMS)
    assert {p.name for p in (run / "iteration_0" / "policies").iterdir()} == set(TEAMS)  # the untrained teams

    config = commons_arena.load_scenario("standard")
    env = commons_arena.parallel_env(config)
    population = Population.default(config)
    for team in TEAMS:
        population = population.with_agent(team, f"learned:{run / 'snapshots' / 'team_v1' / 'policies' / team}")
    result = run_episode(env, population.build(config, env=env), 3)
    assert set(TEAMS) <= set(result)

    payoff = json.loads((run / "league_payoff.json").read_text())
    assert payoff["snapshots"] == ["team_v1", "team_v2"]
    assert np.asarray(payoff["payoff"]).shape == (2, 2) and np.isfinite(payoff["payoff"]).all()
    assert sum(payoff["nash"].values()) == pytest.approx(1.0)
    assert (run / "league_tournament" / "results.sqlite").is_file()  # played through the tournament core

    train(TrainArgs(resume=run, iterations=3))  # the run's total: one more iteration
    resumed = [json.loads(line) for line in (run / "league.json").read_text().splitlines()][-1]
    assert resumed["iteration"] == 3
    assert resumed["mix"][:5] == log[-1]["mix"] and resumed["snapshot"] == "team_v3"
    assert "team_v2" in resumed["seat_returns"]  # the restored snapshots play
