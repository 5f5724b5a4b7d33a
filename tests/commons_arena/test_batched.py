"""The batched core plays the reference's game bit for bit (issue 40's "same game" target).

Arena *i* of a :class:`~commons_arena.batched.VectorArenaEnv` reset with seed ``s`` must give the
observations, rewards, reward terms, terminations, truncations and episode totals of the
reference env reset with ``s + i`` (and its *k*-th episode those of ``s + i + k * N``, across
autoresets), fed the same actions: random ones in every seat, half of them drawn over the whole
space (over budget, over capacity, over inventory: every repair runs), half small.

The fast loop holds a slice (shocks, dependencies, a hard cap, eight teams); the full sweep
(every shipped scenario, 200 generated ``broad`` scenarios x 5 seeds) is ``slow``.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import commons_arena
from commons_arena import ArenaEnv, VectorArenaEnv
from commons_arena.family import generate_one, load_family
from commons_arena.scenario import ScenarioConfig, load_scenario

DATA = Path(__file__).resolve().parent.parent / "data" / "scenarios"


def random_actions(rng: np.random.Generator, env: VectorArenaEnv) -> dict[str, np.ndarray]:
    """Per agent ``(N, act_dim)``: each row over the whole space or small, by a coin."""
    actions = {}
    for agent in env.possible_agents:
        nvec = env.action_space(agent).nvec
        wide = rng.integers(0, nvec, size=(env.num_envs, len(nvec)))
        small = rng.integers(0, np.minimum(nvec, 4), size=(env.num_envs, len(nvec)))
        actions[agent] = np.where(rng.random((env.num_envs, 1)) < 0.5, wide, small)
    return actions


def assert_same_game(config: ScenarioConfig, num_envs: int, seed: int, steps: int, action_seed: int = 0) -> int:
    """Step the batch and one reference env per arena side by side; return the episodes compared."""
    env = VectorArenaEnv(config, num_envs=num_envs)
    refs = [ArenaEnv(config) for _ in range(num_envs)]
    agents = env.possible_agents
    obs, _ = env.reset(seed=seed)
    assert env.episode_seeds == [seed + i for i in range(num_envs)]
    episode = [0] * num_envs
    restart = [False] * num_envs
    for i, ref in enumerate(refs):
        ref_obs, _ = ref.reset(seed=seed + i)
        for a in agents:
            assert np.array_equal(obs[a][i], ref_obs[a]), (config.name, i, a, "reset")
    rng = np.random.default_rng(action_seed)
    episodes = 0
    for step in range(steps):
        actions = random_actions(rng, env)
        obs, rewards, terms, truncs, infos = env.step(actions)
        for i, ref in enumerate(refs):
            where = (config.name, seed, i, step)
            if restart[i]:
                episode[i] += 1
                assert env.episode_seeds[i] == seed + i + episode[i] * num_envs
                ref_obs, _ = ref.reset(seed=env.episode_seeds[i])
                for a in agents:
                    assert np.array_equal(obs[a][i], ref_obs[a]), (*where, a, "autoreset")
                    assert rewards[a][i] == 0.0 and not terms[a][i] and not truncs[a][i], where
                restart[i] = False
                continue
            ref_obs, ref_rewards, ref_terms, ref_truncs, ref_infos = ref.step({a: actions[a][i] for a in agents})
            for a in agents:
                assert np.array_equal(obs[a][i], ref_obs[a]), (*where, a, "obs")
                assert rewards[a][i] == ref_rewards[a], (*where, a, rewards[a][i], ref_rewards[a])
                assert terms[a][i] == ref_terms[a] and truncs[a][i] == ref_truncs[a], (*where, a)
                for name, value in ref_infos[a]["reward_terms"].items():
                    assert infos[a]["reward_terms"][name][i] == value, (*where, a, name)
            for rule, units in ref_infos["allocator"]["repairs"].items():
                assert infos["allocator"]["repairs"][rule][i] == units, (*where, rule)
            if ref_terms[agents[0]] or ref_truncs[agents[0]]:
                for a in agents:
                    assert infos[a]["_episode"][i], where
                    assert infos[a]["episode"].keys() == ref_infos[a]["episode"].keys()
                    for key, value in ref_infos[a]["episode"].items():
                        assert infos[a]["episode"][key][i] == value, (*where, a, key, infos[a]["episode"][key][i], value)
                restart[i] = True
                episodes += 1
            elif "_episode" in infos[agents[0]]:
                assert not infos[agents[0]]["_episode"][i], where
    return episodes


def broad(index: int) -> ScenarioConfig:
    return generate_one(load_family("broad"), 0, index)


FAST = ["standard", "crisis", "wait_for_capacity", "job_mix"]


@pytest.mark.parametrize("name", FAST)
def test_same_game_shipped(name: str) -> None:
    config = load_scenario(name)
    episodes = assert_same_game(config, num_envs=3, seed=11, steps=3 * config.max_ticks + 5)
    assert episodes >= 6  # autoresets crossed


def test_same_game_hard_cap() -> None:
    assert_same_game(load_scenario(DATA / "hard_cap_cluster.toml"), num_envs=3, seed=5, steps=40)


def test_same_game_eight_teams_and_hard_cap_generated() -> None:
    configs = [broad(i) for i in (1, 3, 4, 9)]  # hard caps, eight teams, four shocks
    assert any(len(c.teams) == 8 for c in configs) and any(c.carbon.mode == "hard" for c in configs)
    for config in configs:
        assert_same_game(config, num_envs=2, seed=3, steps=config.max_ticks + 3)


@pytest.mark.slow
@pytest.mark.parametrize("name", commons_arena.list_scenarios())
def test_same_game_every_shipped_scenario(name: str) -> None:
    config = load_scenario(name)
    for seed in range(0, 25, 5):
        assert_same_game(config, num_envs=5, seed=seed, steps=3 * config.max_ticks + 3, action_seed=seed)


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(10))
def test_same_game_broad_family(chunk: int) -> None:
    """200 generated scenarios x 5 seeds (a batch of 5 arenas, seeds s..s+4), in ten chunks."""
    for index in range(chunk * 20, (chunk + 1) * 20):
        config = broad(index)
        assert_same_game(config, num_envs=5, seed=100 + index, steps=2 * config.max_ticks + 2, action_seed=index)


@pytest.mark.parametrize("name", ["crisis", "job_mix"])
def test_reset_draws_match_the_reference_code(name: str) -> None:
    """The vectorised draws of a reset fill the state the reference's own draw code fills
    (the path an arena takes after a rare rejection in numpy's integer sampling)."""
    from dataclasses import fields

    from commons_arena.batched.state import BatchState

    env = VectorArenaEnv(name, num_envs=8)
    env.reset(seed=40)
    fast = env.state
    slow = BatchState.empty(env.tables, 8)
    every = np.arange(8)
    slow.budget[:], slow.online[:] = env.config.budget, env.rules.owned
    slow.draw_with_reference(env.tables, every, env.episode_seeds)
    slow.sort_jobs(every)
    for f in fields(BatchState):
        if f.name == "need":  # the env's, from the queue after reset
            continue
        assert np.array_equal(getattr(fast, f.name), getattr(slow, f.name)), f.name


# ---------------------------------------------------------------------- the public face
def test_vector_env_shapes_and_seeds() -> None:
    env = commons_arena.vector_env("standard", num_envs=4)
    obs, infos = env.reset(seed=7)
    assert env.episode_seeds == [7, 8, 9, 10]
    for agent in env.possible_agents:
        assert obs[agent].shape == (4, env.observation_space(agent).shape[0]) and obs[agent].dtype == np.float32
        assert infos[agent]["scenario_hash"] == env.config.content_hash
    env.reset(seed=[3, 30, 300, 3000])
    assert env.episode_seeds == [3, 30, 300, 3000]
    env.reset(seed=None)
    base = env.episode_seeds[0]
    assert env.episode_seeds == [base + i for i in range(4)]
    obs, rewards, terms, truncs, infos = env.step({})  # every seat plays a no-op
    assert rewards["allocator"].shape == (4,) and terms["allocator"].dtype == bool
    assert set(infos["allocator"]["reward_terms"]) == set(env._term_names["allocator"])
    assert infos["allocator"]["repairs"]["buy_over_offer"].shape == (4,)


@pytest.mark.parametrize("bad, match", [
    ({"allocator": np.zeros((3, 2), dtype=np.int64)}, "shape"),
    ({"nobody": np.zeros((4, 1), dtype=np.int64)}, "unknown agent"),
    ({"broker": np.full((4, 6), np.nan)}, "NaN"),
    ({"broker": np.full((4, 6), 0.5)}, "integers"),
    ({"broker": np.full((4, 6), -1)}, "outside the space"),
    ({"broker": np.full((4, 6), 10**6)}, "outside the space"),
    ({"broker": np.full((4, 6), "a")}, "integers"),
    ([], "dict"),
])
def test_bad_actions_are_refused_and_change_nothing(bad, match) -> None:
    env = commons_arena.vector_env("standard", num_envs=4)
    env.reset(seed=1)
    before = {k: v.copy() for k, v in vars(env.state).items()}
    with pytest.raises(ValueError, match=match):
        env.step(bad)
    for key, value in vars(env.state).items():
        assert np.array_equal(value, before[key]), key


@pytest.mark.parametrize("bad", [-1, 1.5, "3", [1, 2], True])
def test_bad_seeds_are_refused(bad) -> None:
    env = commons_arena.vector_env("standard", num_envs=3)
    with pytest.raises(ValueError, match="seed"):
        env.reset(seed=bad)


def test_bad_num_envs_and_step_before_reset() -> None:
    with pytest.raises(ValueError, match="num_envs"):
        commons_arena.vector_env("standard", num_envs=0)
    started = time.perf_counter()
    for huge in (10**9, 10**30, np.int64(2**62)):  # issue 52: bounded, named, before any array is made
        with pytest.raises(ValueError, match=r"num_envs must be an integer in \[1, 4096\]"):
            commons_arena.vector_env("standard", num_envs=huge)
    assert time.perf_counter() - started < 1
    with pytest.raises(RuntimeError, match="reset"):
        commons_arena.vector_env("standard", num_envs=2).step({})


def test_autoreset_is_next_step() -> None:
    """The step after an arena's last one returns its reset observation, reward 0 and no end,
    whatever the actions; its next episode has seed + num_envs."""
    env = commons_arena.vector_env("cost_pressure", num_envs=2)
    obs, _ = env.reset(seed=0)
    ended = np.zeros(2, dtype=bool)
    for _ in range(env.config.max_ticks):
        obs, rewards, terms, truncs, infos = env.step({})
        ended = terms["allocator"] | truncs["allocator"]
        if ended.any():
            break
    assert ended.any() and infos["allocator"]["_episode"].tolist() == ended.tolist()
    first, _ = commons_arena.vector_env("cost_pressure", num_envs=2).reset(seed=[2, 3])
    rng = np.random.default_rng(0)
    wild = {a: rng.integers(0, env.action_space(a).nvec, size=(2, len(env.action_space(a).nvec)))
            for a in env.possible_agents}
    obs, rewards, terms, truncs, infos = env.step(wild)
    for i in np.flatnonzero(ended).tolist():
        assert env.episode_seeds[i] == i + 2
        for a in env.possible_agents:
            assert np.array_equal(obs[a][i], first[a][i]) and rewards[a][i] == 0.0
            assert not terms[a][i] and not truncs[a][i]


@pytest.mark.slow
@settings(max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, 10_000), seed=st.integers(0, 2**62), num_envs=st.integers(1, 4),
       action_seed=st.integers(0, 2**32 - 1))
def test_same_game_hypothesis(index: int, seed: int, num_envs: int, action_seed: int) -> None:
    """Any generated scenario, seed, batch size and actions: the same game."""
    config = broad(index)
    assert_same_game(config, num_envs=num_envs, seed=seed, steps=config.max_ticks + 2, action_seed=action_seed)


def test_round_2_is_pythons_round() -> None:
    from commons_arena.batched.draws import round_2

    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(0, 1000, 200_000), rng.uniform(0, 1, 50_000),
                        np.arange(0, 100, 0.005), np.arange(0, 10, 0.125)])
    assert round_2(x).tolist() == [round(v, 2) for v in x.tolist()]


def test_hard_cap_cut_is_the_reference_cut() -> None:
    """Random grants (hundreds of GPUs in a cell: several blocks of subtractions), powers with ties and
    zeros, headroom from none to plenty: the batched cut is the reference's, arena by arena."""
    from commons_arena.batched.tick import cut_for_hard_cap
    from commons_arena.mechanics import carbon

    rng = np.random.default_rng(3)
    for _ in range(12):
        B, N, T = 32, int(rng.integers(2, 9)), int(rng.integers(1, 7))
        power = rng.choice([0.0, 0.3, 0.7, 0.7, 1.1, 2.5], size=T)
        grants = rng.integers(0, rng.choice([3, 40, 700]), size=(B, N, T))
        intensity = rng.uniform(0.0, 0.9, size=B)
        headroom = rng.uniform(-50, 2000, size=B)
        fixed, cut = cut_for_hard_cap(grants, power, intensity, headroom)
        for b in range(B):
            ref_fixed, ref_cut = carbon.cut_for_hard_cap(grants[b], power, float(intensity[b]), float(headroom[b]))
            assert np.array_equal(fixed[b], ref_fixed) and cut[b] == ref_cut, b
