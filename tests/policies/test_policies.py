"""Scripted policies, the registry and populations (issue 3, parts 1–2).

Every policy plays every shipped scenario (and two scenarios of unusual shape) for a full
episode with every action checked against its space; rules of each baseline are pinned
on hand-built observations; rosters round-trip through TOML and fail clearly.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import commons_arena
from commons_arena.enums import Stance
from commons_arena.spaces import observation_layout
from policies import Population, PopulationError, available_policies, make_policy, run_episode
from policies.allocators import water_fill_batch
from policies.base import Policy
from policies.batch import OneArena
from policies.focal import policy_seed
from policies.registry import policy_spec
from policies.teams import ARCHETYPE_PROFILES
from tests.sweeps import swept

SCENARIOS = commons_arena.list_scenarios()
ALL_POLICIES = available_policies()
TEAM_POLICIES = ["safety_first", "growth", "reliability", "truthful", "greedy_bluffer"]
BROKER_POLICIES = ["demand_priced", "fixed_price"]
ALLOCATOR_POLICIES = [
    "random",
    "equal_split",
    "proportional",
    "fifo",
    "edf",
    "best_fit",
    "max_min_fair",
    "drf",
    "planner",
    "credit",
    "uniform_rule",
    "fair_planner",
    "oracle",
]


def population_for(policy: str) -> Population:
    """``policy`` plays its role (every team, for a team policy); defaults elsewhere."""
    return Population(roles={policy_spec(policy).role: policy})


def play_checked(env, population: Population, seed: int) -> tuple[list[dict[str, np.ndarray]], dict]:
    """One episode; assert every action is in its space; return the actions and final infos."""
    policies = population.build(env.config, env=env)
    for index, agent in enumerate(env.possible_agents):
        policies[agent].reset(policy_seed(seed, index))
    observations, _ = env.reset(seed=seed)
    history, infos = [], {}
    while env.agents:
        actions = {}
        for agent in env.agents:
            action = policies[agent].act(observations[agent])
            assert env.action_space(agent).contains(action), (agent, action, env.action_space(agent))
            actions[agent] = action
        history.append(actions)
        observations, _, _, _, infos = env.step(actions)
    return history, infos


# ------------------------------------------------------------------------- registry


def test_every_policy_of_the_brief_is_registered():
    assert set(available_policies("team")) == set(TEAM_POLICIES)
    assert set(available_policies("broker")) == set(BROKER_POLICIES)
    assert set(available_policies("allocator")) == set(ALLOCATOR_POLICIES)
    assert set(ALL_POLICIES) == set(TEAM_POLICIES + BROKER_POLICIES + ALLOCATOR_POLICIES)


def test_policies_satisfy_the_protocol():
    env = commons_arena.parallel_env("standard")
    for name in ALL_POLICIES:
        agent = {"allocator": "allocator", "team": "search", "broker": "broker"}[policy_spec(name).role]
        assert isinstance(make_policy(name, env.config, agent, env=env), Policy)


def test_registry_errors_are_clear():
    config = commons_arena.load_scenario("standard")
    with pytest.raises(ValueError, match="unknown policy 'nope'.*proportional"):
        make_policy("nope", config, "allocator")
    with pytest.raises(ValueError, match="plays the team role.*'allocator'.*allocator policies"):
        make_policy("growth", config, "allocator")
    with pytest.raises(ValueError, match="unknown agent 'ghost'"):
        make_policy("growth", config, "ghost")
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['bluf'\]"):
        make_policy("growth", config, "search", bluf=2.0)
    with pytest.raises(ValueError, match="pass env="):
        make_policy("oracle", config, "allocator")
    with pytest.raises(ValueError, match="unknown role"):
        available_policies("referee")


def test_make_policy_accepts_a_scenario_name_and_params():
    policy = make_policy("growth", "standard", "robotics", bluff=3.0, escalate_after=4)
    assert policy.params == {"bluff": 3.0, "escalate_after": 4}


# ------------------------------------------------------------------------- every policy, every scenario


@pytest.mark.parametrize("policy", ALL_POLICIES)
@pytest.mark.parametrize("scenario", swept(SCENARIOS))
def test_actions_stay_in_space_for_a_full_episode(scenario, policy):
    env = commons_arena.parallel_env(scenario)
    history, infos = play_checked(env, population_for(policy), seed=3)
    assert history and all("episode" in info for info in infos.values())


@pytest.mark.parametrize("policy", ALL_POLICIES)
def test_actions_stay_in_space_on_unusual_scenarios(policy, unusual_scenario):
    env = commons_arena.parallel_env(str(unusual_scenario))
    play_checked(env, population_for(policy), seed=5)


# ------------------------------------------------------------------------- determinism


@pytest.mark.parametrize("policy", [p for p in ALL_POLICIES if p != "oracle"])
def test_policies_are_deterministic_given_seed(policy):
    env = commons_arena.parallel_env("standard")
    first, _ = play_checked(env, population_for(policy), seed=11)
    second, _ = play_checked(env, population_for(policy), seed=11)
    assert len(first) == len(second)
    for a, b in zip(first, second, strict=True):
        assert a.keys() == b.keys()
        for agent in a:
            np.testing.assert_array_equal(a[agent], b[agent])


def test_random_allocator_depends_on_its_seed():
    config = commons_arena.load_scenario("standard")
    policy = make_policy("random", config, "allocator")
    env = commons_arena.parallel_env("standard")
    obs, _ = env.reset(seed=0)
    draws = []
    for seed in (1, 2):
        policy.reset(seed)
        draws.append(np.concatenate([policy.act(obs["allocator"]) for _ in range(5)]))
    assert not np.array_equal(*draws)


def test_run_episode_is_a_function_of_the_seed():
    env = commons_arena.parallel_env("standard")
    population = Population(agents={"allocator": "random"})
    a, b = run_episode(env, population, seed=7), run_episode(env, population, seed=7)
    assert a == b
    assert set(a) == set(env.possible_agents)
    assert run_episode(env, population, seed=8)["allocator"] != a["allocator"]


# ------------------------------------------------------------------------- teams


def team_obs(config, agent, **fields) -> np.ndarray:
    layout = observation_layout(config, agent)
    obs = np.zeros(layout.size, dtype=np.float32)
    view = layout.view(obs)
    for name, value in fields.items():
        view[name][...] = value
    return obs


@pytest.mark.parametrize("archetype", TEAM_POLICIES)
def test_team_declares_ceil_of_need_times_bluff(archetype):
    config = commons_arena.load_scenario("standard")
    policy = make_policy(archetype, config, "search")
    need = np.array([3.0, 1.0, 0.0])
    action = policy.act(team_obs(config, "search", need=need))
    factor = ARCHETYPE_PROFILES[archetype].bluff
    assert action[:3].tolist() == [math.ceil(n * factor - 1e-6) for n in need]
    assert action[3] == Stance.ACCEPT


def test_team_declaration_is_clipped_to_its_space():
    config = commons_arena.load_scenario("standard")
    policy = make_policy("greedy_bluffer", config, "search", bluff=50.0)
    action = policy.act(team_obs(config, "search", need=[4, 3, 1]))
    assert action[:3].tolist() == [t.owned + t.spot_inventory for t in config.gpu_tiers]


def test_team_stance_escalates_after_threshold_and_counters_a_short_grant():
    config = commons_arena.load_scenario("standard")
    policy = make_policy("reliability", config, "robotics")  # escalate_after = 3
    assert policy.params["escalate_after"] == 3
    # tick 1: it had declared [2, 2, 0] for this tick
    assert policy.act(team_obs(config, "robotics", need=[2, 2, 0], declared=[2, 2, 0]))[3] == Stance.ACCEPT
    # tick 2: the grant for tick 1 was short of [2, 2, 0], starved once -> counter
    obs = team_obs(config, "robotics", need=[2, 2, 0], declared=[3, 3, 0], last_grant=[1, 2, 0], starved_streak=1)
    assert policy.act(obs)[3] == Stance.COUNTER
    # starved three ticks in a row -> escalate
    obs = team_obs(config, "robotics", need=[2, 2, 0], declared=[3, 3, 0], last_grant=[3, 3, 0], starved_streak=3)
    assert policy.act(obs)[3] == Stance.ESCALATE
    # a full grant and no starvation -> accept
    obs = team_obs(config, "robotics", need=[2, 2, 0], declared=[3, 3, 0], last_grant=[3, 3, 0], starved_streak=0)
    assert policy.act(obs)[3] == Stance.ACCEPT


def test_safety_first_escalates_at_once_growth_waits():
    config = commons_arena.load_scenario("standard")
    obs = team_obs(config, "safety", need=[1, 0, 1], starved_streak=1)
    assert make_policy("safety_first", config, "safety").act(obs)[3] == Stance.ESCALATE
    assert make_policy("growth", config, "safety").act(obs)[3] == Stance.ACCEPT


# ------------------------------------------------------------------------- brokers


def broker_obs(config, **fields) -> np.ndarray:
    return team_obs(config, "broker", **fields)


def test_brokers_offer_the_whole_inventory():
    config = commons_arena.load_scenario("standard")
    for name in BROKER_POLICIES:
        action = make_policy(name, config, "broker").act(broker_obs(config, inventory=[2, 1, 0]))
        assert action[:3].tolist() == [2, 1, 0]


def test_demand_priced_rises_with_demand_and_crisis():
    config = commons_arena.load_scenario("standard")
    broker = make_policy("demand_priced", config, "broker")
    calm = broker.act(broker_obs(config, inventory=[2, 2, 1], demand=[0, 0, 0]))[3:]
    busy = broker.act(broker_obs(config, inventory=[2, 2, 1], demand=[12, 10, 4]))[3:]
    crisis = broker.act(broker_obs(config, inventory=[2, 2, 1], demand=[12, 10, 4], crisis=1))[3:]
    assert (busy > calm).all() and (crisis >= busy).all() and (crisis > busy).any()
    # the calm price covers the unit cost
    for k, tier in enumerate(config.gpu_tiers):
        assert tier.max_price * calm[k] / (config.price_levels - 1) >= tier.spot_unit_cost


def test_fixed_price_is_constant():
    config = commons_arena.load_scenario("standard")
    broker = make_policy("fixed_price", config, "broker", level=4)
    a = broker.act(broker_obs(config, inventory=[2, 2, 1], demand=[0, 0, 0]))
    b = broker.act(broker_obs(config, inventory=[2, 2, 1], demand=[20, 20, 20], crisis=1))
    assert a[3:].tolist() == b[3:].tolist() == [4, 4, 4]
    with pytest.raises(ValueError, match="level must be in"):
        make_policy("fixed_price", config, "broker", level=99)


# ------------------------------------------------------------------------- allocators


def alloc_obs(config, **fields) -> np.ndarray:
    defaults = {
        "owned": [t.owned for t in config.gpu_tiers],
        "online": [t.owned for t in config.gpu_tiers],
        "budget": config.budget,
    }
    return team_obs(config, "allocator", **{**defaults, **fields})


def split(config, action) -> tuple[np.ndarray, np.ndarray]:
    T, N = len(config.gpu_tiers), len(config.teams)
    return action[:T], action[T:].reshape(N, T)


@pytest.mark.parametrize("policy", [p for p in ALLOCATOR_POLICIES if p != "oracle"])
def test_baselines_never_need_repair(policy):
    """On random observations: grants within online + bought, buys within offer and budget."""
    config = commons_arena.load_scenario("standard")
    layout = observation_layout(config, "allocator")
    allocator = make_policy(policy, config, "allocator", seed=0)
    rng = np.random.default_rng(0)
    T, N = len(config.gpu_tiers), len(config.teams)
    inventory = np.array([t.spot_inventory for t in config.gpu_tiers])
    for _ in range(200):
        obs = np.zeros(layout.size, dtype=np.float32)
        view = layout.view(obs)
        view["tick"][...] = rng.integers(0, config.max_ticks)
        view["online"][...] = rng.integers(0, [t.owned + 1 for t in config.gpu_tiers])
        view["budget"][...] = rng.uniform(0, config.budget)
        view["offer_qty"][...] = rng.integers(0, inventory + 1)
        view["offer_price"][...] = rng.uniform(0, 12, T)
        view["declared"][...] = rng.integers(0, 6, (N, T))
        view["revealed"][...] = rng.integers(0, 2, N)
        view["revealed_need"][...] = rng.integers(0, 4, (N, T)) * view["revealed"][:, None]
        view["pressure"][...] = rng.integers(0, 3, N)
        view["stance"][np.arange(N), rng.integers(0, 3, N)] = 1
        action = allocator.act(obs)
        buy, grant = split(config, action)
        assert (buy <= view["offer_qty"]).all()
        assert float(buy @ view["offer_price"].astype(np.float64)) <= float(view["budget"][0]) + 1e-9
        assert (grant.sum(axis=0) <= view["online"] + buy).all()


def test_demand_uses_revealed_need_once_revealed():
    config = commons_arena.load_scenario("standard")
    obs = alloc_obs(
        config,
        declared=[[4, 0, 0], [1, 1, 0], [0, 0, 1]],
        revealed=[1, 0, 0],
        revealed_need=[[1, 0, 0], [0, 0, 0], [0, 0, 0]],
    )
    _, grant = split(config, make_policy("proportional", config, "allocator").act(obs))
    assert grant.tolist() == [[1, 0, 0], [1, 1, 0], [0, 0, 1]]


def test_proportional_shares_scarce_tiers_by_declaration():
    config = commons_arena.load_scenario("standard")  # small: 4 owned
    obs = alloc_obs(config, declared=[[6, 0, 0], [2, 0, 0], [0, 0, 0]])
    buy, grant = split(config, make_policy("proportional", config, "allocator").act(obs))
    assert buy.tolist() == [0, 0, 0]  # nothing offered at tick 0
    assert grant[:, 0].tolist() == [3, 1, 0]


def test_equal_split_caps_at_demand_without_redistribution():
    config = commons_arena.load_scenario("standard")
    obs = alloc_obs(config, declared=[[6, 0, 0], [1, 0, 0], [0, 0, 0]])
    _, grant = split(config, make_policy("equal_split", config, "allocator").act(obs))
    assert grant[:, 0].tolist() == [2, 1, 0]  # 4 // 2 = 2 each; team 1 caps at 1; 1 GPU left over


def test_max_min_fair_water_fills():
    def water_fill(demand: list[int], capacity: int, start: int) -> list[int]:
        return water_fill_batch(np.array([demand]), np.array([capacity]), np.array([start]))[0].tolist()

    assert water_fill([6, 1, 3], 7, 0) == [3, 1, 3]
    assert water_fill([6, 1, 0], 4, 0) == [3, 1, 0]
    assert water_fill([2, 2, 2], 4, 1) == [1, 2, 1]  # the odd unit rotates from team 1
    config = commons_arena.load_scenario("standard")
    obs = alloc_obs(config, declared=[[6, 0, 0], [1, 0, 0], [0, 0, 0]])
    _, grant = split(config, make_policy("max_min_fair", config, "allocator").act(obs))
    assert grant[:, 0].tolist() == [3, 1, 0]


def test_fifo_serves_the_longest_waiting_team_first():
    config = commons_arena.load_scenario("standard")
    fifo = make_policy("fifo", config, "allocator")
    fifo.act(alloc_obs(config, tick=1, declared=[[0, 0, 0], [0, 0, 0], [2, 0, 0]]))
    _, grant = split(config, fifo.act(alloc_obs(config, tick=2, declared=[[4, 0, 0], [0, 0, 0], [4, 0, 0]])))
    assert grant[:, 0].tolist() == [0, 0, 4]  # safety has waited since tick 1


def test_edf_serves_pressure_first():
    config = commons_arena.load_scenario("standard")
    obs = alloc_obs(config, declared=[[4, 0, 0], [4, 0, 0], [0, 0, 0]], pressure=[0, 2, 0])
    _, grant = split(config, make_policy("edf", config, "allocator").act(obs))
    assert grant[:, 0].tolist() == [0, 4, 0]


def test_best_fit_keeps_large_gpus_for_large_memory_demand():
    config = commons_arena.load_scenario("standard")  # small 4, medium 3, large 1
    obs = alloc_obs(config, declared=[[6, 0, 0], [0, 0, 1], [0, 3, 0]])
    _, grant = split(config, make_policy("best_fit", config, "allocator").act(obs))
    assert grant[1].tolist() == [0, 0, 1]  # the large GPU goes to the large-memory request
    assert grant[2].tolist() == [0, 3, 0]
    assert grant[0].tolist() == [4, 0, 0]  # small demand spills nowhere: medium and large are full


def test_best_fit_buys_the_cheapest_fitting_tier_for_urgent_work():
    config = commons_arena.load_scenario("standard")
    obs = alloc_obs(
        config,
        tick=1,
        declared=[[6, 0, 0], [0, 3, 1], [0, 0, 0]],
        pressure=[1, 0, 0],
        offer_qty=[2, 2, 1],
        offer_price=[3.0, 2.0, 9.0],
    )
    buy, grant = split(config, make_policy("best_fit", config, "allocator").act(obs))
    assert buy.tolist() == [0, 2, 0]  # medium is cheaper than small here and fits small demand
    assert grant[0].tolist() == [4, 2, 0]


def test_best_fit_defers_work_that_is_not_urgent():
    config = commons_arena.load_scenario("standard")  # small 4, medium 3, large 1
    obs = alloc_obs(
        config,
        tick=1,
        declared=[[3, 0, 0], [3, 0, 0], [0, 0, 0]],
        pressure=[0, 1, 0],
        offer_qty=[2, 2, 1],
        offer_price=[1.0, 1.0, 1.0],
    )
    buy, grant = split(config, make_policy("best_fit", config, "allocator").act(obs))
    # team 0 (first by order) takes 3 small; urgent team 1's request of 3 no longer fits
    # small, so it goes whole onto the smallest larger tier with room; nothing is bought
    assert grant.tolist() == [[3, 0, 0], [0, 3, 0], [0, 0, 0]]
    assert buy.tolist() == [0, 0, 0]
    obs = alloc_obs(config, tick=1, declared=[[0, 0, 0], [6, 0, 0], [0, 0, 0]], pressure=[0, 0, 0])
    _, grant = split(config, make_policy("best_fit", config, "allocator").act(obs))
    assert grant[1].tolist() == [4, 0, 0]  # not urgent: the overflow waits for small GPUs
    _, grant = split(config, make_policy("best_fit", config, "allocator", defer=False).act(obs))
    assert grant[1].tolist() == [4, 2, 0]  # without deferral it spills onto medium


def test_drf_equalises_dominant_shares():
    config = commons_arena.load_scenario("standard")
    # team 0 also wants the single online medium GPU: once it holds it (dominant share 1),
    # team 1 gets the remaining small GPUs; per-tier max-min fairness would split small 2/2
    obs = alloc_obs(config, online=[4, 1, 1], declared=[[4, 1, 0], [4, 0, 0], [0, 0, 0]])
    _, grant = split(config, make_policy("drf", config, "allocator").act(obs))
    assert grant.tolist() == [[1, 1, 0], [3, 0, 0], [0, 0, 0]]
    _, grant = split(config, make_policy("max_min_fair", config, "allocator").act(obs))
    assert grant.tolist() == [[2, 1, 0], [2, 0, 0], [0, 0, 0]]


def test_shortfall_buying_respects_pacing():
    config = commons_arena.load_scenario("standard")
    obs = alloc_obs(
        config,
        tick=0,
        budget=12.0,
        declared=[[8, 0, 0], [0, 0, 0], [0, 0, 0]],
        offer_qty=[2, 0, 0],
        offer_price=[3.0, 0, 0],
    )
    buy, grant = split(config, make_policy("proportional", config, "allocator").act(obs))
    # 12 ticks left, pacing 2: at most 12 * 2/12 = 2 money -> nothing at price 3
    assert buy.tolist() == [0, 0, 0]
    buy, _ = split(config, make_policy("proportional", config, "allocator", pacing=12.0).act(obs))
    assert buy.tolist() == [2, 0, 0]


def test_scripted_policy_rejects_the_wrong_role():
    for name in ("proportional", "planner", "fair_planner"):  # each a batch of one
        with pytest.raises(ValueError, match="is a team"):
            make_policy(name, commons_arena.load_scenario("standard"), "search")
    assert isinstance(make_policy("planner", commons_arena.load_scenario("standard"), "allocator"), OneArena)


# ------------------------------------------------------------------------- populations


def test_default_population_is_the_scenarios_background():
    for scenario in SCENARIOS:
        config = commons_arena.load_scenario(scenario)
        resolved = Population.default(config).describe(config)
        assert set(resolved) == set(config.agents)
        for agent, policy in config.population.items():
            assert resolved[agent] == policy


def test_fallbacks_for_missing_agents(tiny):
    config = commons_arena.scenario.scenario_from_dict({**tiny, "population": {}})
    resolved = Population().describe(config)
    assert resolved == {
        "allocator": "proportional",
        "search": "truthful",
        "robotics": "truthful",
        "broker": "demand_priced",
    }
    tiny["teams"][0]["archetype"] = "growth"
    config = commons_arena.scenario.scenario_from_dict(tiny)
    assert Population().describe(config)["search"] == "growth"


def test_precedence_agent_over_role_over_scenario():
    config = commons_arena.load_scenario("standard")
    population = Population(roles={"team": "truthful", "allocator": "edf"}, agents={"search": "greedy_bluffer"})
    resolved = population.describe(config)
    assert resolved["search"] == "greedy_bluffer"
    assert resolved["robotics"] == resolved["safety"] == "truthful"
    assert resolved["allocator"] == "edf"
    assert resolved["broker"] == config.population["broker"]


def test_population_toml_round_trip(tmp_path: Path):
    population = Population(
        name="bluffers vs fair",
        roles={"team": "truthful", "broker": {"policy": "fixed_price", "level": 3}},
        agents={"allocator": "max_min_fair", "search": {"policy": "greedy_bluffer", "bluff": 3.0}},
    )
    path = tmp_path / "roster.toml"
    text = population.to_toml(path)
    assert path.read_text() == text
    again = Population.from_toml(path, "standard")
    assert again == population
    assert again.to_dict() == population.to_dict()
    policies = again.build("standard")
    assert policies["search"].params["bluff"] == 3.0
    assert policies["broker"].params["level"] == 3


def test_roster_file_written_by_hand(tmp_path: Path):
    path = tmp_path / "roster.toml"
    path.write_text('[roles]\nteam = "growth"\n[agents]\nallocator = "drf"\n', encoding="utf-8")
    resolved = Population.from_toml(path).describe("standard")
    assert resolved["allocator"] == "drf" and resolved["safety"] == "growth"


def test_population_errors_are_clear(tmp_path: Path):
    with pytest.raises(PopulationError, match="unknown policy 'teleport'.*known policies"):
        Population(agents={"allocator": "teleport"})
    with pytest.raises(PopulationError, match="roles: unknown role 'referee'"):
        Population(roles={"referee": "edf"})
    with pytest.raises(PopulationError, match="policy 'growth' plays the team role, not allocator"):
        Population(roles={"allocator": "growth"})
    with pytest.raises(PopulationError, match="plays the allocator role, not team"):
        Population(agents={"search": "edf"}).resolve("standard")
    with pytest.raises(PopulationError, match=r"has no parameter\(s\) \['speed'\]"):
        Population(agents={"search": {"policy": "growth", "speed": 2}})
    with pytest.raises(PopulationError, match=r"agent\(s\) \['ghost'\].*'standard'.*agents are"):
        Population(agents={"ghost": "growth"}).resolve("standard")
    # non-strict resolution ignores agents the scenario lacks (one roster, many scenarios)
    assert "ghost" not in Population(agents={"ghost": "growth"}).resolve("standard", strict=False)
    bad = tmp_path / "bad.toml"
    bad.write_text('[agents]\nallocator = "teleport"\n', encoding="utf-8")
    with pytest.raises(PopulationError, match=r"bad\.toml.*unknown policy 'teleport'"):
        Population.from_toml(bad)
    bad.write_text('[agent]\nallocator = "edf"\n', encoding="utf-8")
    with pytest.raises(PopulationError, match=r"unknown key\(s\) \['agent'\]"):
        Population.from_toml(bad)
    bad.write_text("[agents\n", encoding="utf-8")
    with pytest.raises(PopulationError, match="not valid TOML"):
        Population.from_toml(bad)
    with pytest.raises(PopulationError, match="not found"):
        Population.from_toml(tmp_path / "missing.toml")
    with pytest.raises(PopulationError, match="needs policy"):
        Population(agents={"search": {"bluff": 2.0}})


def test_run_episode_with_prebuilt_policies_reuses_them():
    env = commons_arena.parallel_env("standard")
    policies = Population.default(env.config).build(env.config, env=env)
    a = run_episode(env, policies, seed=4)
    b = run_episode(env, Population.default(env.config), seed=4)
    assert a == b
    with pytest.raises(PopulationError, match="no policy for agent"):
        run_episode(env, {"allocator": policies["allocator"]}, seed=4)
