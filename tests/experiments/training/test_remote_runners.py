"""Training with remote env runners (the driver's local runner then holds no env), for every
experiment. On a two-node Ray cluster (training and a tournament from the command line, with
--address): tests/experiments/test_cluster_shipping.py, which starts the one cluster the tests use.

Tiny budgets: what is tested is that scenario switches, snapshot loads and evaluations
reach the runners that hold the envs, not that anything learns.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import commons_arena
from experiments.training import league
from experiments.training.algorithm import build_algorithm
from experiments.training.callbacks import foreach_sampling_runner, set_scenario_everywhere
from experiments.training.setup import resolve, with_unit_scales
from experiments.training.train import TrainArgs, train

pytestmark = [pytest.mark.slow, pytest.mark.rllib, pytest.mark.ray, pytest.mark.timeout(600)]  # remote env runners on the session's Ray

TINY = dict(eval_every=1, eval_seeds=2, train_batch_size=100, minibatch_size=50, num_epochs=1,
            num_envs_per_env_runner=2, hidden=(8, 8), quiet=True, num_env_runners=1)
TEAMS = ["search", "robotics", "safety"]


@pytest.mark.parametrize(
    "experiment, extra",
    [
        ("allocator_mixed", {}),  # allocator_ppo: the curriculum test below and the two-node test train it
        ("seats_ppo", {"learners": ("broker",)}),
        ("selfplay", {}),
    ],
)
def test_every_experiment_trains_with_a_remote_env_runner(ray_session, tmp_path, experiment, extra):
    checkpoint = train(TrainArgs(out=tmp_path, run_name="r", experiment=experiment, iterations=1, **TINY, **extra))
    history = json.loads((checkpoint.parent / "history.json").read_text())
    assert len(history) == 1 and history[0]["env_steps"] >= TINY["train_batch_size"]
    assert np.isfinite(history[0]["score"])
    if experiment == "seats_ppo":  # the broker alone: RLlib holds only its module, the rest play in the env
        assert {p.name for p in (checkpoint / "learner_group" / "learner" / "rl_module").iterdir() if p.is_dir()} == {
            "broker"}


def test_a_curriculum_promotes_the_remote_envs(ray_session, tmp_path):
    """Promotion at any score: the second iteration samples on `elevated`, the remote envs' scenario.
    (allocator_curriculum is allocator_ppo's seat plan: this is also allocator_ppo's remote-runner run.)"""
    checkpoint = train(TrainArgs(out=tmp_path, run_name="c", experiment="allocator_curriculum", iterations=2,
                                 promote_at=-1e9, promote_after=0, **TINY))
    history = json.loads((checkpoint.parent / "history.json").read_text())
    assert [row["scenario"] for row in history] == ["elevated", "crisis"]
    assert history[0]["env_steps"] >= TINY["train_batch_size"] and all(np.isfinite(row["score"]) for row in history)


def test_scenario_switch_and_snapshots_reach_the_remote_runners(ray_session):
    args = TrainArgs(experiment="league", snapshot_margin=1e9, **TINY)  # no automatic snapshots
    algo = build_algorithm(with_unit_scales(resolve(args)))
    try:
        assert algo.env_runner_group.num_remote_env_runners() == 1 and algo.env_runner.env is None
        set_scenario_everywhere(algo, commons_arena.load_scenario("crisis"))
        algo.train()
        scenarios = foreach_sampling_runner(algo, lambda r: {e.unwrapped.par_env.config.name for e in r.env.envs})
        assert scenarios == [{"crisis"}]

        weights = league.add_snapshot(algo, "team_v1", ["team", "scripted_truthful", "scripted_greedy_bluffer"], TEAMS)

        def holds_snapshot(runner) -> bool:
            state = runner.module["team_v1"].get_state()
            return all(np.array_equal(np.asarray(state[k]), np.asarray(weights[k])) for k in state)

        assert foreach_sampling_runner(algo, holds_snapshot) == [True]
        result = algo.train()
        assert "team_v1" in result["env_runners"]["module_episode_returns_mean"]
    finally:
        algo.stop()


def wait_for_cpus(count: float, seconds: float = 60.0) -> None:
    """Until Ray has ``count`` CPUs free (actors of an algorithm stopped just before release theirs
    asynchronously); fails the test if they never come."""
    import time

    import ray

    deadline = time.monotonic() + seconds
    while ray.available_resources().get("CPU", 0.0) < count:
        assert time.monotonic() < deadline, f"Ray never freed {count} CPUs: {ray.available_resources()}"
        time.sleep(0.5)


def test_the_start_weights_reach_every_remote_runner_before_it_samples(ray_session):
    """The kind's start weights right after build_algo(): RLlib's fire-and-forget sync_weights dropped this
    push while the one Algorithm.setup sent was still in flight, so whether a runner sampled its
    first iteration from the start weights or the initial ones was a matter of timing (two runs of
    one seed with a background mix on two remote runners differed)."""
    wait_for_cpus(2)  # an earlier test's stopped runners may still hold theirs: build would then make one runner
    setup = with_unit_scales(resolve(TrainArgs(experiment="allocator_mixed", **{**TINY, "num_env_runners": 2})))
    algo = build_algorithm(setup)
    try:
        setup.args.kind.start_weights(algo, setup, Path("unused"))  # the zero code: no search, no file
        learner = algo.learner_group.get_state(components="learner/rl_module", inference_only=True)
        start = learner["learner"]["rl_module"]
        held = foreach_sampling_runner(algo, lambda runner: runner.module.get_state(inference_only=True))
        assert len(held) == 2
        for runner in held:
            for module, tensors in start.items():
                assert all(np.array_equal(np.asarray(tensors[k]), np.asarray(runner[module][k])) for k in tensors)
    finally:
        algo.stop()


def test_a_slow_sample_is_waited_for_not_dropped():
    """RLlib's 60 s sample timeout dropped a slow sample while the remote call ran on, and every later
    request queued behind it and timed out too: "sampled nothing" for the rest of a run on a loaded
    machine. The run's config waits instead (and the shape-free allocator learns per cell)."""
    from experiments.training.algorithm import algorithm_config
    from experiments.training.cell_module import CellPPOLearner

    setup = with_unit_scales(resolve(TrainArgs(experiment="allocator_mixed", **{**TINY, "num_env_runners": 0})))
    assert algorithm_config(setup).sample_timeout_s is None
    family = resolve(TrainArgs(experiment="allocator_family", network="cells", eval_scenarios=1,
                               **{**TINY, "num_env_runners": 0}))
    assert algorithm_config(family).learner_class is CellPPOLearner
