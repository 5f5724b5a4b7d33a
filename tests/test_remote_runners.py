"""Training with remote env runners (the driver's local runner then holds no env), for every
experiment, and on a two-node Ray cluster on this machine (training and a tournament).

Tiny budgets: what is tested is that scenario switches, snapshot loads and evaluations
reach the runners that hold the envs, not that anything learns.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import commons_arena
from commands.cli import main
from experiments.training import league
from experiments.training.algorithm import build_algorithm
from experiments.training.callbacks import foreach_sampling_runner, set_scenario_everywhere
from experiments.training.setup import resolve, with_unit_scales
from experiments.training.train import TrainArgs, train
from tests.test_tournament import stored

pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parents[1]
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


def _cli(*argv: str, address: str) -> subprocess.CompletedProcess[str]:
    # Its own process: the test session may hold a local Ray already (conftest's ray_session).
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_ADDRESS": ""}
    return subprocess.run([sys.executable, "-m", "commands", *argv, "--address", address],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=400)


def test_train_and_a_tournament_on_a_two_node_cluster(tmp_path, monkeypatch):
    from ray.cluster_utils import Cluster

    # The nodes' workers import this checkout's code: they inherit PYTHONPATH from this process.
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    # Two nodes of one CPU each: two env runners of one CPU each must sit on different nodes.
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        run = _cli("train", "--experiment", "allocator_ppo", "--iterations", "1", "--num-env-runners", "2",
                   "--train-batch-size", "100", "--minibatch-size", "50", "--num-epochs", "1",
                   "--num-envs-per-env-runner", "2", "--hidden", "8", "8", "--eval-seeds", "2", "--eval-every", "1",
                   "--quiet", "--out", str(tmp_path / "runs"), "--run-name", "cluster", address=cluster.address)
        assert run.returncode == 0, run.stderr[-2000:]
        assert "env runners instead of" not in run.stderr  # both runners were placed
        best = tmp_path / "runs" / "cluster" / "best"
        assert (best / "arena_policy.json").is_file()

        tournament = _cli("tournament", "--scenarios", "standard", "--allocators", "edf", f"learned:{best}",
                          "--seeds", "4", "--workers", "2", "--ray-min-seconds", "0", "--no-progress",
                          "--out", str(tmp_path / "t"), address=cluster.address)
        assert tournament.returncode == 0, tournament.stderr[-2000:]
        assert "ray" in tournament.stdout.lower()  # played as Ray tasks, not in-process
        assert (tmp_path / "t" / "standings.md").is_file()
        # the same tournament in-process stores the same rows
        args = ["tournament", "--scenarios", "standard", "--allocators", "edf", f"learned:{best}", "--seeds", "4",
                "--workers", "1", "--no-progress", "--out", str(tmp_path / "local")]
        main(args)
        assert stored(tmp_path / "local" / "results.sqlite") == stored(tmp_path / "t" / "results.sqlite")
    finally:
        cluster.shutdown()
