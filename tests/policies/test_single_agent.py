"""The single-agent Gymnasium view (issue 3, part 3)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import commons_arena
from policies import ENV_ID, Population, SingleAgentEnv, run_episode
from tests.sweeps import swept


@pytest.mark.parametrize("agent", ["allocator", "search", "broker"])
def test_check_env_passes(agent):
    check_env(SingleAgentEnv("standard", agent=agent), skip_render_check=False)


@pytest.mark.parametrize("scenario", swept(commons_arena.list_scenarios()))
def test_check_env_passes_on_every_scenario(scenario):
    check_env(SingleAgentEnv(scenario))


def test_registered_with_gymnasium():
    env = gym.make(ENV_ID, scenario="standard", agent="allocator")
    assert env.spec.id == "commons_arena/SingleAgent-v0"
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    assert info["scenario_hash"] == commons_arena.load_scenario("standard").content_hash
    check_env(env.unwrapped)  # with a spec, the checker also tries the other render modes
    env.close()


def test_spaces_are_the_agents_spaces():
    arena = commons_arena.parallel_env("standard")
    for agent in arena.possible_agents:
        view = SingleAgentEnv("standard", agent=agent)
        assert view.observation_space == arena.observation_space(agent)
        assert view.action_space == arena.action_space(agent)
    with pytest.raises(ValueError, match="unknown agent 'ghost'"):
        SingleAgentEnv("standard", agent="ghost")


def test_reward_is_the_agents_reward_and_episode_ends_with_summary():
    env = SingleAgentEnv("standard", agent="allocator")
    env.reset(seed=2)
    env.action_space.seed(2)
    done, total, info = False, 0.0, {}
    while not done:
        _, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert reward == pytest.approx(sum(info["reward_terms"].values()))
        total += reward
        done = terminated or truncated
    assert info["episode"]["return"] == pytest.approx(total)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(env.action_space.sample())


def test_same_as_the_population_playing_itself():
    """Feeding the population's own allocator actions reproduces run_episode exactly."""
    scenario, seed = "standard", 5
    population = Population(agents={"allocator": "edf"})
    expected = run_episode(commons_arena.parallel_env(scenario), population, seed)["allocator"]
    view = SingleAgentEnv(scenario, agent="allocator", population=population)
    mine = population.build(view.config)["allocator"]
    from policies.focal import policy_seed

    mine.reset(policy_seed(seed, 0))
    obs, _ = view.reset(seed=seed)
    done, info = False, {}
    while not done:
        obs, _, terminated, truncated, info = view.step(mine.act(obs))
        done = terminated or truncated
    assert info["episode"] == expected


def test_reset_is_seeded_and_unseeded_resets_vary():
    env = SingleAgentEnv("standard", agent="search")
    a, _ = env.reset(seed=9)
    b, _ = env.reset(seed=9)
    np.testing.assert_array_equal(a, b)
    env.reset(seed=1)
    seeds = {env.reset()[1]["episode_seed"] for _ in range(5)}
    assert len(seeds) > 1


def test_a_team_can_play_against_the_oracle():
    env = SingleAgentEnv("standard", agent="safety", population=Population(agents={"allocator": "oracle"}))
    env.reset(seed=0)
    done = False
    while not done:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        done = terminated or truncated
    assert env.roles["allocator"] == "oracle"


def test_render_ansi():
    env = SingleAgentEnv("standard", render_mode="ansi")
    env.reset(seed=0)
    env.step(np.zeros(env.action_space.shape, dtype=np.int64))
    assert "tick" in env.render()
