"""The focal/background substrate: one seeding rule wherever a population plays (docs/rules.md §9)."""

from __future__ import annotations

import numpy as np
import pytest

import commons_arena
from commands.play import Play
from commons_arena.enums import ALLOCATOR
from policies import Population, run_episode
from policies.base import UniformRandomPolicy
from policies.focal import FocalEnv, policy_seed
from policies.single_agent import SingleAgentEnv

# "random" is a stochastic allocator: the same episode needs the same policy seed too
STOCHASTIC = Population(agents={"allocator": "random"}, roles={"team": "greedy_bluffer"})


def test_play_and_run_episode_give_the_same_episode(tmp_path, capsys):
    roster = tmp_path / "roster.toml"
    STOCHASTIC.to_toml(roster)
    for seed in (3, 4):
        played = Play(seed=seed, population=str(roster), quiet=True).run()
        assert played == run_episode(commons_arena.parallel_env("standard"), STOCHASTIC, seed)
    assert Play(seed=3, population=str(roster), quiet=True).run() != Play(seed=4, population=str(roster), quiet=True).run()


def test_play_without_a_population_is_uniform_random_by_the_same_rule(capsys):
    env = commons_arena.parallel_env("standard")
    uniform = {a: UniformRandomPolicy(env.action_space(a).nvec) for a in env.possible_agents}
    assert Play(seed=5, quiet=True).run() == run_episode(env, uniform, 5)


def test_focal_seats_see_an_ordinary_parallel_env_of_their_own():
    from pettingzoo.test import parallel_api_test

    env = FocalEnv.from_scenario("standard", focal=["safety", "allocator"])
    assert env.possible_agents == ["allocator", "safety"]  # env order
    parallel_api_test(env, num_cycles=30)
    obs, infos = env.reset(seed=1)
    assert set(obs) == {"allocator", "safety"} and infos["allocator"]["episode_seed"] == 1
    with pytest.raises(ValueError, match="non-focal"):
        env.step({"broker": np.zeros(env.arena.action_space("broker").shape, np.int64)})


def test_a_focal_seat_played_by_its_population_policy_is_run_episode():
    """Focal or background, a seat's policy is seeded by the same rule: same episode."""
    population, seed = STOCHASTIC, 11
    expected = run_episode(commons_arena.parallel_env("standard"), population, seed)
    for focal in (["allocator"], ["search", "broker"], list(commons_arena.parallel_env("standard").possible_agents)):
        env = FocalEnv.from_scenario("standard", focal, population)
        mine = population.build(env.config, env=env.arena)
        for seat in focal:
            mine[seat].reset(policy_seed(seed, env.seat_index[seat]))
        obs, _ = env.reset(seed=seed)
        infos: dict = {}
        while env.agents:
            obs, _, _, _, infos = env.step({a: mine[a].act(obs[a]) for a in env.agents})
        assert {a: i["episode"] for a, i in env.seat_infos.items()} == expected, focal
        assert set(infos) == set(focal)


def test_unseeded_resets_follow_the_last_seed():
    env = FocalEnv.from_scenario("standard", ["allocator"], STOCHASTIC)
    env.reset(seed=2)
    first = [env.reset()[1]["allocator"]["episode_seed"] for _ in range(3)]
    env.reset(seed=2)
    assert [env.reset()[1]["allocator"]["episode_seed"] for _ in range(3)] == first
    assert len(set(first)) == 3


def test_single_agent_view_is_the_one_seat_case():
    view = SingleAgentEnv("standard", agent="robotics", population=STOCHASTIC)
    focal = FocalEnv.from_scenario("standard", ["robotics"], STOCHASTIC)
    a, _ = view.reset(seed=8)
    b, _ = focal.reset(seed=8)
    np.testing.assert_array_equal(a, b["robotics"])
    for _ in range(4):
        action = np.ones(view.action_space.shape, np.int64)
        a = view.step(action)[0]
        b = focal.step({"robotics": action})[0]["robotics"]
        np.testing.assert_array_equal(a, b)


def test_bad_seats_and_missing_background_say_what_to_fix():
    env = commons_arena.parallel_env("standard")
    with pytest.raises(ValueError, match="not seats of scenario 'standard'"):
        FocalEnv(env, ["nobody"], Population())
    with pytest.raises(ValueError, match=r"no policy for agent\(s\) \['broker'\]"):
        FocalEnv(env, [ALLOCATOR], {a: None for a in env.possible_agents if a not in ("broker", ALLOCATOR)})
    with pytest.raises(RuntimeError, match="reset"):
        FocalEnv(env, [ALLOCATOR], Population()).step({})
