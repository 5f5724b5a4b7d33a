"""The shape-free allocator trained for real, on a tiny budget: an env mixing cluster shapes,
one iteration of ``allocator_family`` on the family's training split, fine-tuning from its
checkpoint on a user's own file, long episodes that no iteration finishes (no NaN), and the
memory of declarations (``--cell-features v2``) trained on the lean path and started from a
``cells_v1`` checkpoint, and credit per cell (``--critic cells`` and ``privileged``) on the lean path."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from commons_arena.enums import ALLOCATOR
from commons_arena.scenario import load_scenario, scenario_from_dict
from experiments.training.cell_module import PRIVILEGED
from experiments.training.env import ArenaRLlibEnv
from experiments.training.env_config import ArenaEnvConfig
from experiments.training.networks import NETWORKS
from experiments.training.references import reward_scale
from experiments.training.train import TrainArgs, train
from policies.checkpoint_format import load_network
from policies.learned import LearnedPolicy, read_sidecar
from policies.universal import CELL_VIEWS, MAX_TEAMS, MAX_TIERS, split_view
from tests.conftest import UNUSUAL, toml_dumps
from tests.policies.batch_cases import assert_equivalent, record_episodes
from tests.policies.test_universal import SHAPES, _octet_four_tiers

pytestmark = [pytest.mark.slow, pytest.mark.rllib, pytest.mark.ray, pytest.mark.timeout(900)]  # the shape-free allocator trained, fine-tuned, on long episodes

TINY = dict(iterations=1, eval_every=1, eval_seeds=2, train_batch_size=200, minibatch_size=50, num_epochs=1,
            num_envs_per_env_runner=2, hidden=(16, 16), quiet=True)


def _no_nan(text: str) -> object:
    def refuse(name: str) -> object:
        raise AssertionError(f"{name} in JSON")

    return json.loads(text, parse_constant=refuse)


def test_an_env_mixing_cluster_shapes_keeps_one_space():
    configs = [SHAPES["duo_one_tier_hard"], SHAPES["octet_four_tiers"], SHAPES["standard"]]
    env = ArenaRLlibEnv(ArenaEnvConfig(scenarios=tuple(configs), scripted_in_env=True, learned_agents=(ALLOCATOR,),
                                       action_codec={ALLOCATOR: "need"}, network={ALLOCATOR: NETWORKS["cells"]}))
    obs_space, act_space = env.get_observation_space(ALLOCATOR), env.get_action_space(ALLOCATOR)
    shapes = set()
    obs, _ = env.reset(seed=0)
    for _ in range(12):
        _, mask = split_view(obs[ALLOCATOR])
        shapes.add(int(mask.sum()))
        while True:
            assert obs_space.contains(obs[ALLOCATOR])
            obs, _, terms, truncs, _ = env.step({ALLOCATOR: act_space.sample()})
            if terms["__all__"] or truncs["__all__"]:
                break
        obs, _ = env.reset()
    assert len(shapes) >= 2  # episodes played clusters of several shapes through one space


def test_a_family_reward_scale_is_100_over_planners_gap_to_random_floored_by_randoms_spread():
    assert reward_scale([50.0, 70.0], [10.0, 10.0]) == pytest.approx(2.0)  # a gap of 50
    assert reward_scale([10.0], [0.0, 40.0]) == pytest.approx(5.0)  # planner below random: random's spread (20)
    assert reward_scale([1.0], [1.0]) == pytest.approx(100.0)  # at least 1: never a division by ~0


def test_the_training_reward_is_scaled_per_scenario_and_the_episode_totals_are_not():
    configs = [SHAPES["duo_one_tier_hard"], SHAPES["standard"]]
    scale = {configs[0].content_hash: 0.5, configs[1].content_hash: 3.0}
    base = ArenaEnvConfig(scripted_in_env=True, learned_agents=(ALLOCATOR,), action_codec={ALLOCATOR: "need"},
                          network={ALLOCATOR: NETWORKS["cells"]})
    for config in configs:
        plain = ArenaRLlibEnv(replace(base, scenario=config))
        scaled = ArenaRLlibEnv(replace(base, scenario=config, reward_scale={ALLOCATOR: scale}))
        plain.reset(seed=3), scaled.reset(seed=3)
        zero = plain.get_action_space(ALLOCATOR).sample() * 0 + 2  # the need codec's zero correction
        rewards = []
        while True:
            _, r_plain, terms, truncs, info_plain = plain.step({ALLOCATOR: zero})
            _, r_scaled, _, _, info_scaled = scaled.step({ALLOCATOR: zero})
            rewards.append((r_plain[ALLOCATOR], r_scaled[ALLOCATOR]))
            if terms["__all__"] or truncs["__all__"]:
                break
        assert any(abs(p) > 1e-6 for p, _ in rewards)
        assert all(q == pytest.approx(p * scale[config.content_hash]) for p, q in rewards)
        assert info_scaled[ALLOCATOR]["episode"] == info_plain[ALLOCATOR]["episode"]  # reports stay unscaled


@pytest.fixture(scope="module")
def family_checkpoint(ray_session, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    return train(TrainArgs(out=out, run_name="family", experiment="allocator_family", network="cells",
                           eval_scenarios=1, **TINY))


def test_one_family_iteration_writes_a_checkpoint_for_every_shape(family_checkpoint):
    meta = read_sidecar(family_checkpoint)
    assert meta["universal"] == {"max_teams": MAX_TEAMS, "max_tiers": MAX_TIERS, "features": "cells_v1",
                                 "cell_features": meta["input_size"]}
    assert meta["scenario"] == "split:broad-train"
    for config in SHAPES.values():  # 2 and 8 teams, 1 and 4 tiers
        policy = LearnedPolicy.load(family_checkpoint, config, ALLOCATOR)
        policy.reset()
    history = _no_nan((family_checkpoint.parent / "history.json").read_text())
    assert history[-1]["iteration"] == 1
    experiment = (family_checkpoint.parent / "experiment.toml").read_text()
    assert '"split:broad-train" = ' in experiment  # the split's hash, so a changed split is refused on rerun


def test_fine_tuning_on_a_users_file_starts_from_the_checkpoint(family_checkpoint, tmp_path):
    own = tmp_path / "own.toml"
    own.write_text(toml_dumps(_octet_four_tiers()))
    checkpoint = train(TrainArgs(out=tmp_path, run_name="tuned", scenario=str(own), network="cells",
                                 init_from=f"learned:{family_checkpoint}", **{**TINY, "lr": 0.0}))
    _, theirs = load_network(family_checkpoint)
    _, ours = load_network(checkpoint)
    probe = np.random.default_rng(1).normal(size=(16, theirs.input_size)).astype(np.float32)
    np.testing.assert_allclose(ours.logits(probe), theirs.logits(probe), atol=1e-5)  # lr 0: still the checkpoint
    with pytest.raises(ValueError, match="pass --network cells"):
        train(TrainArgs(out=tmp_path, run_name="mlp", scenario=str(own), init_from=f"learned:{family_checkpoint}",
                        **TINY))


def test_episodes_longer_than_an_iteration_report_no_nan(ray_session, tmp_path):
    """The issue's case: a five-team, one-tier hard-cap cluster, need codec from the planner,
    episodes longer than an iteration's samples per env: no iteration may log NaN."""
    data = UNUSUAL["duo_one_tier_hard"]()
    data["name"], data["max_ticks"], data["budget"] = "long_five", 60, 0.0
    data["gpu_tiers"][0]["spot_inventory"] = 0
    base = data["teams"][0]
    data["teams"] = [{**base, "name": f"team{i}", "jobs": [], "generator": {
        "rate": 0.4, "last_tick": 55, "gpus": [1, 2], "work": [1.0, 3.0], "slack": [2, 5], "value": [5.0, 20.0]}}
        for i in range(5)]
    data["shocks"] = [s for s in data["shocks"] if "job" not in s]
    data["population"] = {}
    path = tmp_path / "long_five.toml"
    path.write_text(toml_dumps(data))
    scenario_from_dict(data)  # valid
    out = io.StringIO()
    with redirect_stdout(out):
        train(TrainArgs(out=tmp_path, run_name="long", scenario=str(path),
                        **{**TINY, "iterations": 2, "train_batch_size": 64, "minibatch_size": 32, "quiet": False}))
    text = out.getvalue()
    assert "no episode finished yet" in text and "nan" not in text.lower()
    history = _no_nan((tmp_path / "long" / "history.json").read_text())
    assert history[0]["train_return"] is None  # iteration 1 finished no episode: null, not NaN


LEAN = dict(sampler="lean", network="cells", cell_features="v2", scenario="crisis",
            **{**TINY, "iterations": 2, "train_batch_size": 256, "minibatch_size": 128, "num_envs_per_env_runner": 16})


def test_a_v2_run_on_the_lean_path_plays_through_learned_per_arena_and_batched_alike(ray_session, tmp_path):
    checkpoint = train(TrainArgs(out=tmp_path, run_name="memory", **LEAN))
    meta = read_sidecar(checkpoint)
    assert meta["universal"] == CELL_VIEWS["cells_v2"].fields()
    assert 'cell_features = "v2"' in (checkpoint.parent / "experiment.toml").read_text()  # a rerun reads v2 again
    config = load_scenario("crisis")
    policy = LearnedPolicy.load(checkpoint, config, ALLOCATOR)
    assert policy.interface.batched.view is CELL_VIEWS["cells_v2"]
    episodes = record_episodes(config, episodes=4, seed=5)[ALLOCATOR]
    assert assert_equivalent(f"learned:{checkpoint}", config, ALLOCATOR, episodes, num_envs=4, seed=2) > 20


def test_a_v2_run_from_the_shipped_v1_checkpoint_starts_from_its_policy_exactly(ray_session, tmp_path):
    """--init-from learned:universal with --cell-features v2: the v1 weights, the memory inputs' at zero (lr 0:
    still so after training), so the run's start is the shipped policy and the ablation's only change its inputs."""
    checkpoint = train(TrainArgs(out=tmp_path, run_name="widened", init_from="learned:universal",
                                 **{**LEAN, "hidden": (128, 128), "lr": 0.0, "iterations": 1}))
    _, shipped = load_network(Path(__file__).resolve().parents[3] / "checkpoints" / "universal")
    _, ours = load_network(checkpoint)
    v1 = CELL_VIEWS["cells_v1"].n_features
    assert ours.input_size == CELL_VIEWS["cells_v2"].n_features and shipped.input_size == v1
    assert not ours.tensors()["layers.0.weight"][:, v1:].any()
    probe = np.random.default_rng(2).normal(size=(32, ours.input_size)).astype(np.float32)
    np.testing.assert_allclose(ours.logits(probe), shipped.logits(probe[:, :v1]), atol=1e-5)


@pytest.mark.parametrize("critic", ["cells", "privileged"])
def test_a_run_with_credit_per_cell_trains_its_critic_and_plays_through_learned(ray_session, tmp_path, critic):
    """--critic cells / privileged on the lean path: the learner fits Q beside V and takes each cell's advantage
    ([rows, CELLS], padded cells 0, normalised over the real ones); the checkpoint is the policy alone, as a pooled
    run's, and plays through learned: per arena and batched alike."""
    import experiments.training.lean_update as lean_update
    from experiments.training.algorithm import build_algorithm
    from experiments.training.setup import resolve
    from policies.universal import CELLS

    args = TrainArgs(critic=critic, **{**LEAN, "cell_features": "v1"})
    batches = []
    spied = lean_update.lean_batch

    def spy(algorithm, rollouts):
        batch = spied(algorithm, rollouts)
        batches.append(dict(batch.policy_batches[ALLOCATOR]))
        return batch

    lean_update.lean_batch = spy
    algo = build_algorithm(resolve(args))
    try:
        stats = [algo.train()["learners"][ALLOCATOR] for _ in range(2)]
    finally:
        algo.stop()
        lean_update.lean_batch = spied
    assert all(np.isfinite(s["q_loss"]) and "q_explained_var" in s for s in stats)
    advantages, real = batches[-1]["advantages"], batches[-1]["obs"][:, -CELLS:] > 0.5
    assert advantages.shape == real.shape and not advantages[~real].any()
    assert abs(advantages[real].mean()) < 1e-4 and abs(advantages[real].std() - 1) < 1e-3
    assert (PRIVILEGED in batches[-1]) == (critic == "privileged")
    checkpoint = train(replace(args, out=tmp_path, run_name=critic))
    assert read_sidecar(checkpoint)["universal"] == CELL_VIEWS["cells_v1"].fields()
    _, network = load_network(checkpoint)
    assert set(network.tensors()) == {f"layers.{i}.{w}" for i in (0, 2, 4) for w in ("weight", "bias")}  # pi only
    assert 'critic = "' + critic + '"' in (checkpoint.parent / "experiment.toml").read_text()
    config = load_scenario("crisis")
    episodes = record_episodes(config, episodes=4, seed=5)[ALLOCATOR]
    assert assert_equivalent(f"learned:{checkpoint}", config, ALLOCATOR, episodes, num_envs=4, seed=2) > 20
