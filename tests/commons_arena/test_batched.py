"""The batched core plays the reference's game bit for bit (issue 40's "same game" target).

The game runs once, in the batched core (``parallel_env`` is a batch of one); the list-based
reference (tests/reference/, the executable spec) plays the same rules the plain way. Arena *i*
of a :class:`~commons_arena.batched.VectorArenaEnv` reset with seed ``s`` must give the
observations, rewards, reward terms, terminations, truncations and episode totals of the
reference env reset with ``s + i`` (and its *k*-th episode those of ``s + i + k * N``, across
autoresets), fed the same actions: random ones in every seat, half of them drawn over the whole
space (over budget, over capacity, over inventory: every repair runs), half small.

The shipped scenarios and the ``broad`` family never reach some branches (a purchase more than 64
units over budget, a hard cap binding in most clusters, every shock at once), so the test family
``stress`` (tests/data/families/stress.toml) does, and rules only a rare draw reaches get a test of
their own (the bulk purchase cut, numpy's integer rejections). ``python -m tests.mutants`` plants a
mutant in each rule and says which the fast tests miss.

The fast loop holds a slice (shocks, dependencies, a hard cap that binds, eight teams, four stress
clusters); the full sweep (every shipped scenario, 80 ``broad`` and 80 ``stress`` scenarios x 4
seeds) is ``slow``.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import commons_arena
from commons_arena import VectorArenaEnv
from commons_arena.family import generate_one, load_family
from commons_arena.rewards import Repairs
from commons_arena.scenario import ScenarioConfig, load_scenario, scenario_from_dict
from tests.reference.arena import ReferenceEnv

DATA = Path(__file__).resolve().parent.parent / "data" / "scenarios"
FAMILIES = DATA.parent / "families"


def random_actions(rng: np.random.Generator, env: VectorArenaEnv) -> dict[str, np.ndarray]:
    """Per agent ``(N, act_dim)``: each row over the whole space or small, by a coin."""
    actions = {}
    for agent in env.possible_agents:
        nvec = env.action_space(agent).nvec
        wide = rng.integers(0, nvec, size=(env.num_envs, len(nvec)))
        small = rng.integers(0, np.minimum(nvec, 4), size=(env.num_envs, len(nvec)))
        actions[agent] = np.where(rng.random((env.num_envs, 1)) < 0.5, wide, small)
    return actions


class Played(NamedTuple):
    """What a side-by-side run went through: episodes compared, and units cut per repair rule."""

    episodes: int
    repairs: Counter[str]


def assert_same_game(config: ScenarioConfig, num_envs: int, seed: int, steps: int, action_seed: int = 0) -> Played:
    """Step the batch and one reference env per arena side by side; say what they went through."""
    env = VectorArenaEnv(config, num_envs=num_envs)
    refs = [ReferenceEnv(config) for _ in range(num_envs)]
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
    repairs: Counter[str] = Counter()
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
                repairs[rule] += units
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
    return Played(episodes, repairs)


def broad(index: int) -> ScenarioConfig:
    return generate_one(load_family("broad"), 0, index)


FAST = ["standard", "crisis", "wait_for_capacity", "job_mix"]


@pytest.mark.parametrize("name", FAST)
def test_same_game_shipped(name: str) -> None:
    config = load_scenario(name)
    played = assert_same_game(config, num_envs=3, seed=11, steps=3 * config.max_ticks + 5)
    assert played.episodes >= 6  # autoresets crossed


def test_same_game_hard_cap() -> None:
    assert_same_game(load_scenario(DATA / "hard_cap_cluster.toml"), num_envs=3, seed=5, steps=40)


def test_same_game_eight_teams_and_hard_cap_generated() -> None:
    binding, eight_teams, four_shocks = broad(5), broad(9), broad(4)
    assert binding.carbon.mode == "hard" and len(eight_teams.teams) == 8 and len(four_shocks.shocks) == 4
    played = assert_same_game(binding, num_envs=2, seed=3, steps=binding.max_ticks + 3)
    assert played.repairs["grant_over_carbon_cap"] > 0  # the cap binds: its cut runs in both paths
    for config in (eight_teams, four_shocks):
        assert_same_game(config, num_envs=2, seed=3, steps=config.max_ticks + 3)


# ---------------------------------------------------------------------- the per-arena env: a batch of one
def assert_same_arena(config: ScenarioConfig, seed: int, episodes: int = 2) -> None:
    """``parallel_env`` (the core at a batch of one, read through commons_arena/view.py) beside the
    reference env: every output of ``step``, the tick report's recording line (hidden state, jobs
    and their names, events, repairs) and the render."""
    from commons_arena.arena import ArenaEnv
    from commons_arena.recording import header_record, jsonable, tick_record
    from commons_arena.render import render_ansi

    env, ref = ArenaEnv(config), ReferenceEnv(config)
    rng = np.random.default_rng(seed)
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        ref_obs, _ = ref.reset(seed=seed + episode)
        assert all(np.array_equal(obs[a], ref_obs[a]) for a in env.possible_agents)
        assert jsonable(header_record(config, seed, 0, env.hidden_state())) == jsonable(
            header_record(config, seed, 0, ref.hidden_state()))
        while env.agents:
            small = rng.random() < 0.5
            actions = {a: rng.integers(0, np.minimum(env.action_space(a).nvec, 3) if small else env.action_space(a).nvec)
                       for a in env.agents}
            out, ref_out = env.step(actions), ref.step(actions)
            for a in env.possible_agents:
                assert np.array_equal(out[0][a], ref_out[0][a]), (config.name, a)
            assert out[1:] == ref_out[1:], config.name  # rewards, ends, infos (terms, repairs, events, episode)
            line, ref_line = (tick_record(config, e.hidden_state(), e.last_tick) for e in (env, ref))
            assert jsonable(line) == jsonable(ref_line), config.name
            assert render_ansi(config, env.hidden_state(), env.last_tick) == render_ansi(
                config, ref.hidden_state(), ref.last_tick)
        assert ref.agents == []


def test_parallel_env_is_the_reference() -> None:
    for config in (load_scenario("crisis"), load_scenario(DATA / "hard_cap_cluster.toml"), broad(4), stress(6)):
        assert_same_arena(config, seed=2)


# ---------------------------------------------------------------------- stress: every branch
def stress(index: int) -> ScenarioConfig:
    """A scenario of the test family ``stress`` (tests/data/families/stress.toml): huge spot markets
    against small budgets, binding hard caps, every shock often; the shipped ones reach none of it."""
    return generate_one(load_family(FAMILIES / "stress.toml"), 0, index)


FAST_STRESS = (0, 2, 6, 7)  # hard caps, 1-5 tiers, 3-8 teams


def test_same_game_stress_family() -> None:
    """A few stress scenarios reach every repair rule, the hard cap's cut included."""
    repairs: Counter[str] = Counter()
    for index in FAST_STRESS:
        config = stress(index)
        repairs += assert_same_game(config, num_envs=3, seed=index, steps=2 * config.max_ticks + 2,
                                    action_seed=index).repairs
    assert all(repairs[rule] > 0 for rule in Repairs._fields), repairs


def edited_standard(**top: object) -> ScenarioConfig:
    data = load_scenario("standard").model_dump(mode="json", exclude_none=True)
    tiers = top.pop("tiers", {})
    data.update(top)
    for tier in data["gpu_tiers"]:
        tier.update(tiers)
    return scenario_from_dict(data)


def test_bulk_purchase_cut() -> None:
    """Buying 400 GPUs a tier on a budget of 50 cuts hundreds of units: the cut's bulk step (more than
    64 units over budget) and its unit steps, in both paths, from the first purchase (step 1)."""
    config = edited_standard(budget=50.0, tiers={"spot_inventory": 400})
    env, ref = VectorArenaEnv(config, num_envs=1), ReferenceEnv(config)
    env.reset(seed=0)
    ref.reset(seed=0)
    T = len(config.gpu_tiers)
    everything = {"broker": np.array([[400] * T + [config.price_levels - 1] * T]),
                  "allocator": np.array([[400] * T + [0] * (len(config.teams) * T)])}
    for step in range(2):
        obs, rewards, _, _, infos = env.step(everything)
        ref_obs, ref_rewards, _, _, ref_infos = ref.step({a: v[0] for a, v in everything.items()})
        assert infos["allocator"]["repairs"]["buy_over_budget"][0] == ref_infos["allocator"]["repairs"]["buy_over_budget"]
        for a in env.possible_agents:
            assert rewards[a][0] == ref_rewards[a] and np.array_equal(obs[a][0], ref_obs[a]), (step, a)
    assert ref_infos["allocator"]["repairs"]["buy_over_budget"] > 3 * 64


def test_integer_draws_flag_every_rejection() -> None:
    """``integers(0, 2**31 + 1)`` rejects about half of numpy's 32-bit draws: each arena's vectorised
    draws are numpy's own until the first one numpy rejected, and that one is flagged for a redraw."""
    from commons_arena.batched.draws import _Streams

    seeds, n = list(range(12)), 64
    streams = _Streams(np.stack([np.random.PCG64(seed).random_raw(n) for seed in seeds]))
    every = np.ones(len(seeds), dtype=bool)
    drawn, flagged = [], []
    for _ in range(n):
        drawn.append(streams.integers(0, 2**31 + 1, every))
        flagged.append(streams.redo.copy())
    for i, seed in enumerate(seeds):
        rng = np.random.Generator(np.random.PCG64(seed))
        truth = [int(rng.integers(0, 2**31 + 1)) for _ in range(n)]
        ours = [int(d[i]) for d in drawn]
        first_wrong = next(k for k in range(n) if ours[k] != truth[k])  # some draw is rejected in 64
        first_flag = next(k for k in range(n) if flagged[k][i])
        assert first_flag == first_wrong, (seed, first_flag, first_wrong)


@pytest.mark.slow
@pytest.mark.parametrize("name", commons_arena.list_scenarios())
def test_same_game_every_shipped_scenario(name: str) -> None:
    config = load_scenario(name)
    for seed in range(0, 25, 5):
        assert_same_game(config, num_envs=5, seed=seed, steps=3 * config.max_ticks + 3, action_seed=seed)


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(4))
def test_same_game_broad_family(chunk: int) -> None:
    """80 generated ``broad`` scenarios x 4 seeds (a batch of 4 arenas, seeds s..s+3), in four chunks
    (200 x 5 until the stress family below reached the branches ``broad`` never does)."""
    for index in range(chunk * 20, (chunk + 1) * 20):
        config = broad(index)
        assert_same_game(config, num_envs=4, seed=100 + index, steps=2 * config.max_ticks + 2, action_seed=index)


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(4))
def test_same_game_stress_family_sweep(chunk: int) -> None:
    """80 stress scenarios x 4 seeds, in four chunks: every repair rule binds in each chunk."""
    repairs: Counter[str] = Counter()
    for index in range(chunk * 20, (chunk + 1) * 20):
        config = stress(index)
        repairs += assert_same_game(config, num_envs=4, seed=200 + index, steps=2 * config.max_ticks + 2,
                                    action_seed=index).repairs
    assert all(repairs[rule] > 0 for rule in Repairs._fields), repairs


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
    from tests.reference.mechanics import carbon

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


def test_jain_index_is_the_reference_index() -> None:
    """Satisfactions as the env makes them (placed / ready GPUs), 2 to 8 teams, any of them without
    a need: the batched index is the reference's to the bit (its square is Python's ``**``, libm's
    pow, which rounds one ulp away from ``x * x`` now and then)."""
    from commons_arena.batched.tick import jain_index
    from tests.reference.rewards import jain_index as reference_index

    rng = np.random.default_rng(5)
    for teams in range(2, 9):
        ready = rng.integers(1, 2000, size=(1500, teams))
        x = rng.integers(0, ready + 1) / ready
        counted = rng.random((1500, teams)) < 0.8
        index = jain_index(x, counted)
        for row, mask, value in zip(x.tolist(), counted.tolist(), index.tolist(), strict=True):
            assert value == reference_index([v for v, c in zip(row, mask, strict=True) if c]), (row, mask)


def test_a_scheduled_job_shock_keeps_the_episode_open() -> None:
    """Every job resolved by tick 4 and an escalation due at tick 5: both envs and the reference play
    on to tick 5 (the episode ends only after the last scheduled job shock), the same tick for every arena."""
    from tests.conftest import TINY

    data = {**TINY, "shocks": [{"kind": "customer_escalation", "tick": 5,
                                "job": {"gpus": 1, "work": 1.0, "slack": 0, "value": 5.0}}]}
    config = scenario_from_dict(data)
    env = VectorArenaEnv(config, num_envs=2)
    env.reset(seed=0)
    ends = []
    for _ in range(config.max_ticks):
        _, _, terms, truncs, _ = env.step({})
        ends.append(bool(terms["allocator"][0] or truncs["allocator"][0]))
    assert ends == [False] * (config.max_ticks - 1) + [True]
    one = commons_arena.parallel_env(config)  # the per-arena env decides its end itself
    one.reset(seed=0)
    assert [any(one.step({})[2].values()) or not one.agents for _ in range(config.max_ticks)] == ends
    assert_same_game(config, num_envs=2, seed=0, steps=3 * config.max_ticks)
    assert_same_arena(config, seed=0)
