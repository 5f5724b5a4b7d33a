"""PettingZoo conformance on every shipped scenario and on unusual shapes, plus the public API."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test

import commons_arena
from commons_arena import action_layout, arena_v0, observation_layout
from commons_arena.enums import ShockKind, Stance
from commons_arena.spaces import JOB_SLOT_FIELDS
from tests.sweeps import swept

SCENARIOS = commons_arena.list_scenarios()

# Warnings PettingZoo's AEC api_test emits about *style*, each a documented consequence of
# the arena's design, not a defect. Anything else it says fails the test.
ALLOWED_AEC_WARNINGS = {
    # roles have different observations (allocator, team, broker): docs/rules.md §7
    "Observations are different shapes",
    "Agents have different observation space sizes",
    # agents are named by role / team (docs/rules.md §2), not "player_0"
    'We recommend agents to be named in the format <descriptor>_<number>, like "player_0"',
    # actions are MultiDiscrete (issue 2: a space RLlib's PPO handles out of the box)
    "Action space for each agent probably should be gymnasium.spaces.box or gymnasium.spaces.discrete",
    # prices, carbon and escalation counts have no finite upper bound
    "Agent's maximum observation space value is infinity. This is probably too high",
}


def allowed_aec_warnings(config: commons_arena.ScenarioConfig) -> set[str]:
    allowed = set(ALLOWED_AEC_WARNINGS)
    inventory = [t.spot_inventory for t in config.gpu_tiers]
    if 0 in inventory or config.budget == 0:
        # a tier without a spot market has offer fields fixed at 0 (a zero budget: budget)
        allowed.add("Agent's maximum and minimum observation space values are equal")
    if not any(inventory):
        # no spot market at all: at reset the broker observes zeros only (tick 0, nothing to sell)
        allowed.add("Observation numpy array is all zeros.")
    return allowed


def _cycles(config: commons_arena.ScenarioConfig) -> int:
    """Enough cycles to reach the end of an episode, bounded to keep the suite fast."""
    return min(config.max_ticks + 2, 40)


def _run_capturing(fn: Callable[[], None]) -> set[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return {str(w.message) for w in caught if not issubclass(w.category, DeprecationWarning)}


def _check_parallel_api(scenario: str | Path) -> None:
    env = commons_arena.parallel_env(scenario=scenario)
    said = _run_capturing(lambda: parallel_api_test(env, num_cycles=_cycles(env.config)))
    assert said == set(), f"parallel_api_test warned: {said}"


def _check_parallel_seed(scenario: str | Path) -> None:
    said = _run_capturing(lambda: parallel_seed_test(lambda: commons_arena.parallel_env(scenario=scenario)))
    assert said == set(), f"parallel_seed_test warned: {said}"


def _check_aec_api(scenario: str | Path) -> None:
    aec = commons_arena.env(scenario=scenario)
    said = _run_capturing(lambda: api_test(aec, num_cycles=_cycles(aec.unwrapped.config)))
    allowed = allowed_aec_warnings(aec.unwrapped.config)
    assert said <= allowed, f"unexpected api_test warnings: {said - allowed}"


def test_there_are_scenarios() -> None:
    assert "standard" in SCENARIOS
    assert SCENARIOS == sorted(SCENARIOS)


@pytest.mark.parametrize("name", swept(SCENARIOS))
def test_parallel_api(name: str) -> None:
    _check_parallel_api(name)


@pytest.mark.parametrize("name", swept(SCENARIOS))
def test_parallel_seed(name: str) -> None:
    _check_parallel_seed(name)


@pytest.mark.parametrize("name", swept(SCENARIOS))
def test_aec_api(name: str) -> None:
    _check_aec_api(name)


def test_parallel_api_unusual(unusual_scenario: Path) -> None:
    _check_parallel_api(unusual_scenario)


def test_parallel_seed_unusual(unusual_scenario: Path) -> None:
    _check_parallel_seed(unusual_scenario)


def test_aec_api_unusual(unusual_scenario: Path) -> None:
    _check_aec_api(unusual_scenario)


# --------------------------------------------------------------------------- agents and spaces


def test_default_agents() -> None:
    env = commons_arena.parallel_env()
    assert env.possible_agents == ["allocator", "search", "robotics", "safety", "broker"]
    assert env.agents == []
    env.reset(seed=0)
    assert env.agents == env.possible_agents
    assert env.metadata["name"] == "commons_arena_v0"


def test_custom_teams_become_agents(unusual_scenario: Path) -> None:
    env = commons_arena.parallel_env(scenario=unusual_scenario)
    config = env.config
    assert env.possible_agents == ["allocator", *config.team_names, "broker"]
    assert len(config.team_names) in (2, 8)


@pytest.mark.parametrize("name", swept(SCENARIOS))
def test_spaces_match_layouts(name: str) -> None:
    env = commons_arena.parallel_env(scenario=name)
    config = env.config
    T, N = len(config.gpu_tiers), len(config.teams)
    for agent in env.possible_agents:
        obs_space, act_space = env.observation_space(agent), env.action_space(agent)
        assert obs_space is env.observation_space(agent) and act_space is env.action_space(agent)
        assert isinstance(obs_space, spaces.Box) and obs_space.dtype == np.float32
        assert isinstance(act_space, spaces.MultiDiscrete)
        obs_layout, act_layout = observation_layout(config, agent), action_layout(config, agent)
        assert obs_space.shape == (obs_layout.size,)
        assert act_space.shape == (act_layout.size,)
        np.testing.assert_array_equal(act_space.nvec, act_layout.high.astype(np.int64) + 1)
    cap = np.array([t.owned + t.spot_inventory for t in config.gpu_tiers])
    inventory = np.array([t.spot_inventory for t in config.gpu_tiers])
    alloc = action_layout(config, "allocator").view(env.action_space("allocator").nvec - 1)
    np.testing.assert_array_equal(alloc["buy"], inventory)
    np.testing.assert_array_equal(alloc["grant"], np.broadcast_to(cap, (N, T)))
    team = action_layout(config, config.team_names[0]).view(env.action_space(config.team_names[0]).nvec - 1)
    np.testing.assert_array_equal(team["request"], cap)
    assert team["stance"].tolist() == [len(Stance) - 1]
    broker = action_layout(config, "broker").view(env.action_space("broker").nvec - 1)
    np.testing.assert_array_equal(broker["quantity"], inventory)
    np.testing.assert_array_equal(broker["price_level"], np.full(T, config.price_levels - 1))


def test_observation_layout_field_shapes(unusual_scenario: Path) -> None:
    config = commons_arena.load_scenario(unusual_scenario)
    T, N, K = len(config.gpu_tiers), len(config.teams), config.queue_slots
    alloc = observation_layout(config, "allocator").shapes
    assert alloc["declared"] == (N, T) and alloc["stance"] == (N, len(Stance))
    assert alloc["revealed_need"] == (N, T) and alloc["shocks_seen"] == (len(ShockKind),)
    assert alloc["intensity_forecast"] == (config.carbon.forecast_horizon,)
    team = observation_layout(config, config.team_names[-1]).shapes
    assert team["others_declared"] == (N - 1, T) and team["jobs"] == (K, len(JOB_SLOT_FIELDS))
    assert "need" in team and "need" not in alloc and "jobs" not in alloc
    broker = observation_layout(config, "broker").shapes
    assert set(broker) == {"tick", "inventory", "unit_cost", "last_sold", "last_price", "offer_qty", "offer_price",
                           "demand", "crisis"}


def test_unknown_agent_space_is_an_error() -> None:
    env = commons_arena.parallel_env()
    with pytest.raises(ValueError, match="unknown agent 'ceo'"):
        env.observation_space("ceo")
    with pytest.raises(ValueError, match="unknown agent 'ceo'"):
        env.action_space("ceo")
    with pytest.raises(ValueError, match="unknown agent"):
        observation_layout(env.config, "ceo")


def test_reset_returns_observations_in_space_and_hash() -> None:
    env = commons_arena.parallel_env()
    obs, infos = env.reset(seed=1)
    assert set(obs) == set(infos) == set(env.possible_agents)
    for agent, o in obs.items():
        assert env.observation_space(agent).contains(o), agent
        assert infos[agent]["scenario_hash"] == env.config.content_hash
        assert infos[agent]["scenario"] == "standard"
    assert observation_layout(env.config, "allocator").view(obs["allocator"])["tick"][0] == 0


def test_reset_mid_episode_starts_over() -> None:
    env = commons_arena.parallel_env()
    first, _ = env.reset(seed=5)
    for _ in range(3):
        env.step({})
    again, _ = env.reset(seed=5)
    assert env.hidden_state().t == 0
    for agent in env.possible_agents:
        np.testing.assert_array_equal(first[agent], again[agent])


# --------------------------------------------------------------------------- episode end


def test_termination_when_every_job_is_resolved(tiny, make_env) -> None:
    env = make_env(tiny)
    env.reset(seed=0)
    ends = []
    while env.agents:
        _, rewards, term, trunc, infos = env.step({})  # no grants: both jobs miss
        ends.append((term, trunc))
    # a misses at its deadline 3, b at 4: the episode ends after tick 4 (5 steps)
    assert len(ends) == 5
    for term, trunc in ends[:-1]:
        assert not any(term.values()) and not any(trunc.values())
    term, trunc = ends[-1]
    assert set(term) == set(trunc) == set(env.possible_agents)
    assert all(term.values()) and not any(trunc.values())
    assert infos["allocator"]["episode"]["missed"] == 2
    assert env.agents == []


def test_truncation_at_max_ticks(tiny, make_env) -> None:
    tiny["teams"][0]["jobs"][0]["deadline"] = 50  # still pending when time runs out
    env = make_env(tiny)
    env.reset(seed=0)
    steps = 0
    while env.agents:
        _, _, term, trunc, infos = env.step({})
        steps += 1
    assert steps == tiny["max_ticks"]
    assert all(trunc.values()) and not any(term.values())
    assert infos["search"]["episode"]["ticks"] == tiny["max_ticks"]


def test_episode_infos_hold_totals_that_match_rewards() -> None:
    env = commons_arena.parallel_env()
    env.reset(seed=11)
    rng = np.random.default_rng(11)
    returns = dict.fromkeys(env.possible_agents, 0.0)
    term_totals: dict[str, dict[str, float]] = {a: {} for a in env.possible_agents}
    while env.agents:
        actions = {a: rng.integers(0, env.action_space(a).nvec) for a in env.agents}
        _, rewards, _, _, infos = env.step(actions)
        for agent, r in rewards.items():
            returns[agent] += r
            for name, value in infos[agent]["reward_terms"].items():
                term_totals[agent][name] = term_totals[agent].get(name, 0.0) + value
            assert infos[agent]["scenario_hash"] == env.config.content_hash
    for agent in env.possible_agents:
        episode = infos[agent]["episode"]
        assert episode["return"] == pytest.approx(returns[agent])
        for name, total in term_totals[agent].items():
            assert episode[f"term/{name}"] == pytest.approx(total)
        for stat in ("completed", "missed", "spend", "idle_gpu_ticks", "invalid_units", "carbon_kg", "fairness",
                     "utilisation", "justified_escalations", "exposed_bluffs"):
            assert stat in episode
        assert 0.0 <= episode["fairness"] <= 1.0 and 0.0 <= episode["utilisation"] <= 1.0
    assert infos["allocator"]["episode"]["carbon_kg"] == pytest.approx(env.hidden_state().carbon_used)
    assert set(infos["allocator"]["repairs"]) == {"buy_over_offer", "buy_over_budget", "grant_over_capacity",
                                                  "grant_over_carbon_cap", "offer_over_inventory"}


def test_missing_agents_play_the_noop() -> None:
    a, b = commons_arena.parallel_env(), commons_arena.parallel_env()
    a.reset(seed=2)
    b.reset(seed=2)
    zeros = {agent: np.zeros_like(b.action_space(agent).nvec) for agent in b.possible_agents}
    for _ in range(4):
        obs_a, rew_a, *_ = a.step({"search": zeros["search"]})
        obs_b, rew_b, *_ = b.step(zeros)
        for agent in a.possible_agents:
            np.testing.assert_array_equal(obs_a[agent], obs_b[agent])
        assert rew_a == rew_b


def test_float_actions_holding_integers_are_accepted() -> None:
    a, b = commons_arena.parallel_env(), commons_arena.parallel_env()
    a.reset(seed=4)
    b.reset(seed=4)
    rng = np.random.default_rng(0)
    for _ in range(3):
        acts = {agent: rng.integers(0, a.action_space(agent).nvec) for agent in a.possible_agents}
        obs_a, rew_a, *_ = a.step(acts)
        obs_b, rew_b, *_ = b.step({k: v.astype(np.float32).tolist() for k, v in acts.items()})
        assert rew_a == rew_b
        for agent in a.possible_agents:
            np.testing.assert_array_equal(obs_a[agent], obs_b[agent])


def test_env_keeps_no_reference_to_action_buffers() -> None:
    """A caller may reuse one action buffer per agent; changing it after step() must not
    change the env's state (e.g. last tick's grants)."""
    env, twin = commons_arena.parallel_env(), commons_arena.parallel_env()
    env.reset(seed=6)
    twin.reset(seed=6)
    rng = np.random.default_rng(6)
    buffers = {a: np.zeros(env.action_space(a).shape, dtype=np.int64) for a in env.possible_agents}
    while env.agents:
        for agent, buffer in buffers.items():
            buffer[:] = rng.integers(0, np.minimum(env.action_space(agent).nvec, 3))
        # grants that fit (1 GPU per tier, to one team), so that no repair makes a copy
        grant = action_layout(env.config, "allocator").view(buffers["allocator"])["grant"]
        grant[:] = 0
        grant[rng.integers(len(env.config.teams))] = 1
        obs, *_ = env.step(buffers)
        obs_twin, *_ = twin.step({a: b.copy() for a, b in buffers.items()})
        for buffer in buffers.values():
            buffer[:] = 0  # the caller scribbles over its buffers
        for agent in env.possible_agents:
            np.testing.assert_array_equal(obs[agent], obs_twin[agent])
        state, twin_state = env.hidden_state(), twin.hidden_state()
        for field in ("declared", "last_grant", "last_sold", "stance", "offer_qty"):
            np.testing.assert_array_equal(getattr(state, field), getattr(twin_state, field), err_msg=field)


@pytest.mark.parametrize("name", swept(SCENARIOS))
def test_observation_fields_land_where_the_layout_says(name: str) -> None:
    """The builder writes positionally; the layout (spaces.py) is the one declaration of the order."""
    env = commons_arena.parallel_env(name)
    obs, _ = env.reset(seed=1)
    rng = np.random.default_rng(1)
    for _ in range(3):
        if not env.agents:
            break
        obs, *_ = env.step({a: rng.integers(0, env.action_space(a).nvec) for a in env.agents})
    s, rules = env.hidden_state(), env.rules
    f32 = np.float32
    view = observation_layout(env.config, "allocator").view(obs["allocator"])
    np.testing.assert_array_equal(view["tick"], [s.t])
    np.testing.assert_array_equal(view["owned"], rules.owned.astype(f32))
    np.testing.assert_array_equal(view["online"], s.online.astype(f32))
    np.testing.assert_array_equal(view["budget"], [f32(s.budget)])
    np.testing.assert_array_equal(view["offer_price"], s.offer_price.astype(f32))
    np.testing.assert_array_equal(view["declared"], s.declared.astype(f32))
    np.testing.assert_array_equal(view["credibility"], s.credibility.astype(f32))
    np.testing.assert_array_equal(view["shocks_seen"], s.shocks_seen.astype(f32))
    for i, team in enumerate(env.teams):
        view = observation_layout(env.config, team).view(obs[team])
        np.testing.assert_array_equal(view["need"], s.need[i].astype(f32))
        np.testing.assert_array_equal(view["last_grant"], s.last_grant[i].astype(f32))
        np.testing.assert_array_equal(view["starved_streak"], [s.streak[i]])
        np.testing.assert_array_equal(view["offer_qty"], s.offer_qty.astype(f32))
        others = np.delete(s.declared, i, axis=0).astype(f32)
        np.testing.assert_array_equal(view["others_declared"], others)
    view = observation_layout(env.config, "broker").view(obs["broker"])
    np.testing.assert_array_equal(view["unit_cost"], rules.spot_unit_cost.astype(f32))
    np.testing.assert_array_equal(view["last_sold"], s.last_sold.astype(f32))
    np.testing.assert_array_equal(view["last_price"], s.last_price.astype(f32))
    np.testing.assert_array_equal(view["demand"], s.declared.sum(axis=0).astype(f32))


def test_tick_report_is_public_and_typed() -> None:
    from commons_arena.view import TickReport

    env = commons_arena.parallel_env("standard")
    env.reset(seed=0)
    assert env.last_tick is None
    rng = np.random.default_rng(0)
    _, rewards, _, _, infos = env.step({a: rng.integers(0, env.action_space(a).nvec) for a in env.agents})
    report = env.last_tick
    assert isinstance(report, TickReport) and report.tick == 0
    assert report.rewards == rewards
    assert report.terms["allocator"] == infos["allocator"]["reward_terms"]
    assert report.repairs.as_dict() == infos["allocator"]["repairs"]
    assert report.granted.shape == (len(env.teams), env.rules.n_tiers)
    with pytest.raises(AttributeError):
        report.tick = 5  # type: ignore[misc]
    env.reset(seed=0)
    assert env.last_tick is None


def test_rules_tables_are_shared_and_read_only() -> None:
    from commons_arena.rules import rules_for

    a, b = commons_arena.parallel_env("standard"), commons_arena.parallel_env("standard")
    assert a.rules is b.rules is rules_for(a.config)
    with pytest.raises(ValueError):
        a.rules.owned[0] = 99


def test_a_copied_or_pickled_env_plays_on_identically() -> None:
    import copy
    import pickle

    env = commons_arena.parallel_env("standard")
    env.reset(seed=3)
    rng = np.random.default_rng(3)
    actions = [{a: rng.integers(0, env.action_space(a).nvec) for a in env.possible_agents} for _ in range(4)]
    env.step(actions[0])
    twins = [copy.deepcopy(env), pickle.loads(pickle.dumps(env))]
    for action in actions[1:]:
        expected = env.step(action)[1]
        for twin in twins:
            assert twin.rules is env.rules
            assert twin.step(action)[1] == expected


def test_import_commons_arena_env_is_not_the_function() -> None:
    """``commons_arena.env`` is the AEC factory; the env class's module is ``commons_arena.arena``."""
    import importlib
    import types

    assert isinstance(importlib.import_module("commons_arena.arena"), types.ModuleType)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("commons_arena.env")
    assert callable(commons_arena.env)


# --------------------------------------------------------------------------- entry points, render


def test_entry_points() -> None:
    assert isinstance(arena_v0.parallel_env(), commons_arena.ArenaEnv)
    assert isinstance(commons_arena.make("standard"), commons_arena.ArenaEnv)
    for factory in (commons_arena.env, commons_arena.raw_env, arena_v0.env, arena_v0.raw_env):
        aec = factory(scenario="standard")
        aec.reset(seed=0)
        assert isinstance(aec.unwrapped, commons_arena.ArenaEnv)
        assert aec.possible_agents == ["allocator", "search", "robotics", "safety", "broker"]
        assert aec.agent_selection == "allocator"
    config = commons_arena.load_scenario("standard")
    env = commons_arena.parallel_env(scenario=config)
    assert env.config is config


def test_render_ansi_summarises_the_tick() -> None:
    env = commons_arena.parallel_env(render_mode="ansi")
    env.reset(seed=0)
    first = env.render()
    assert isinstance(first, str) and "standard" in first and "tick 0" in first
    env.step({})
    text = env.render()
    assert "tick 1" in text and "played tick 0" in text
    for team in env.config.team_names:
        assert team in text


def test_render_modes() -> None:
    env = commons_arena.parallel_env()
    env.reset(seed=0)
    assert env.render() is None
    with pytest.raises(ValueError, match="render_mode 'human3d' not supported"):
        commons_arena.parallel_env(render_mode="human3d")
