"""The training run's light parts: arguments without RLlib, a setup resolved once, and the
seeding rule of scripted seats inside RLlib (no Ray session needed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import tyro

import commons_arena
import commons_arena.scenario
from commons_arena.enums import ALLOCATOR
from experiments.training.args import TrainArgs

pytestmark = [pytest.mark.slow, pytest.mark.rllib]  # builds RLlib configs and envs

REPO = Path(__file__).resolve().parents[3]


def test_the_arguments_and_the_cli_import_without_rllib():
    """`commons-arena --help` (and any command that needs neither) starts without RLlib, torch,
    and without matplotlib or scipy (the dashboard and the oracle import them when used)."""
    code = ("import sys, experiments.training.args, commands.cli; "
            "print(sorted(m for m in ('ray', 'torch', 'ray.rllib', 'matplotlib', 'scipy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("flag", ["--population", "--background"])
def test_population_is_the_background_flag(flag):
    from commands.train import Train

    parsed = tyro.cli(Train, args=[flag, "roster.toml"])
    assert parsed.args.background == Path("roster.toml")


def test_bad_arguments_are_refused_with_the_flag_named():
    from experiments.training.setup import resolve

    with pytest.raises(ValueError, match="--minibatch-size"):
        TrainArgs(minibatch_size=4096).validate()
    with pytest.raises(ValueError, match="unknown learner 'nobody'"):
        resolve(TrainArgs(experiment="seats_ppo", learners=("nobody",)))
    with pytest.raises(ValueError, match="--use-lstm"):
        resolve(TrainArgs(experiment="selfplay", use_lstm=True))
    with pytest.raises(ValueError, match="--learners is for --experiment seats_ppo"):
        resolve(TrainArgs(experiment="selfplay", learners=("team",)))


def test_the_scenario_is_parsed_once_from_the_flags_to_the_env(monkeypatch):
    """A mix's three tiers are parsed by the setup; the RLlib config, the env it builds and
    its episodes use those configs and never read a TOML file again."""
    from experiments.training.algorithm import algorithm_config
    from experiments.training.env import ArenaRLlibEnv
    from experiments.training.setup import resolve, with_unit_scales

    parsed: list[str] = []
    loads = commons_arena.scenario.tomllib.loads
    monkeypatch.setattr(commons_arena.scenario.tomllib, "loads", lambda text: parsed.append(text) or loads(text))
    setup = with_unit_scales(resolve(TrainArgs(experiment="allocator_mixed", hidden=(8,))))
    assert [c.name for c in setup.stages] == ["standard", "elevated", "crisis"] and len(parsed) == 3
    config = algorithm_config(setup)
    env = ArenaRLlibEnv(config.env_config)
    names = set()
    for seed in range(6):
        env.reset(seed=seed)
        names.add(env.par_env.config.name)
    assert len(names) > 1 and len(parsed) == 3


def test_scripted_modules_seed_their_policies_like_every_episode():
    """A ScriptedRLModule resets its policy with policy_seed(episode seed, seat index), the rule
    the background follows inside the env (policies.focal), so a seat plays the same either way."""
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from experiments.training.scripted import AGENT_T, ENV_INDEX, EPISODE_SEED, ScriptedRLModule, registered_policy
    from policies.focal import policy_seed
    from policies.registry import make_policy

    config = commons_arena.load_scenario("standard")
    env = commons_arena.parallel_env(config)
    index = list(env.possible_agents).index(ALLOCATOR)
    module = RLModuleSpec(module_class=ScriptedRLModule, observation_space=env.observation_space(ALLOCATOR),
                          action_space=env.action_space(ALLOCATOR),
                          model_config={"policy_factory": registered_policy("random", config), "agent_id": ALLOCATOR,
                                        "seat_index": {ALLOCATOR: index}}).build()
    obs, _ = env.reset(seed=3)
    rows = np.stack([obs[ALLOCATOR]] * 3)
    seeds = [11, 12, 11]
    batch = {Columns.OBS: torch.from_numpy(rows), ENV_INDEX: torch.tensor([0, 1, 2]),
             AGENT_T: torch.tensor([0, 0, 0]), EPISODE_SEED: torch.tensor(seeds)}
    actions = module.forward_inference(batch)[Columns.ACTIONS].numpy()

    def expected(seed: int) -> np.ndarray:
        policy = make_policy("random", config, ALLOCATOR)
        policy.reset(policy_seed(seed, index))
        return np.asarray(policy.act(obs[ALLOCATOR]))

    for action, seed in zip(actions, seeds, strict=True):
        np.testing.assert_array_equal(action, expected(seed))
    assert not np.array_equal(actions[0], actions[1])  # another episode seed, another draw
    np.testing.assert_array_equal(actions[0], actions[2])


def test_observation_scales_are_fitted_on_their_own_seed_stream():
    from experiments.training.setup import resolve, sample_observations, scale_sample_seeds

    seeds = scale_sample_seeds(0)
    assert seeds == scale_sample_seeds(0) and seeds != scale_sample_seeds(1) and len(set(seeds)) == len(seeds)
    setup = resolve(TrainArgs())
    a, b = sample_observations(setup.stages, 0), sample_observations(setup.stages, 0)
    np.testing.assert_array_equal(a[ALLOCATOR], b[ALLOCATOR])
    other = sample_observations(setup.stages, 1)[ALLOCATOR]
    assert other.shape != a[ALLOCATOR].shape or not np.array_equal(other, a[ALLOCATOR])
