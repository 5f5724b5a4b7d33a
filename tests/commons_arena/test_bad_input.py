"""Bad input: a clear error, and the state is exactly as before (issue 2, docs/rules.md §5, repairs).

Actions outside an agent's space, unknown or finished agents, ``step()`` out of order,
and malformed scenario files. Infeasible actions *inside* the space are not errors.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import commons_arena
from commons_arena import ScenarioError, load_scenario
from commons_arena.arena import ArenaEnv
from commons_arena.view import JOB_FIELDS, ArenaState

# --------------------------------------------------------------------------- helpers


def snapshot(env: commons_arena.ArenaEnv) -> dict[str, Any]:
    """Every array of the game's state (the env's batch of one: jobs, effects and the episode's
    random draws, all made at reset, included) and the hidden-state view of it, as plain values."""
    batch = env._batch
    out: dict[str, Any] = {f.name: (getattr(batch, f.name).dtype.str, getattr(batch, f.name).tolist())
                           for f in dataclasses.fields(batch)}
    state: ArenaState = env.hidden_state()
    out["jobs"] = [[tuple(getattr(job, name) for name in JOB_FIELDS) for job in team] for team in state.jobs]
    out["effects"] = [(e.spec.model_dump_json(), e.tier_index, e.until) for e in state.effects]
    out["agents"] = list(env.agents)
    return out


def random_actions(env: commons_arena.ArenaEnv, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {a: rng.integers(0, env.action_space(a).nvec) for a in env.agents}


def played_twins(seed: int = 3, ticks: int = 2) -> tuple[commons_arena.ArenaEnv, commons_arena.ArenaEnv]:
    """Two envs in the same mid-episode state; the first will receive bad input."""
    envs = []
    for _ in range(2):
        env = commons_arena.parallel_env()
        env.reset(seed=seed)
        rng = np.random.default_rng(seed)
        for _ in range(ticks):
            env.step(random_actions(env, rng))
        envs.append(env)
    return envs[0], envs[1]


def assert_same_future(env: commons_arena.ArenaEnv, twin: commons_arena.ArenaEnv, ticks: int = 3) -> None:
    rng_a, rng_b = np.random.default_rng(99), np.random.default_rng(99)
    for _ in range(ticks):
        out_a = env.step(random_actions(env, rng_a))
        out_b = twin.step(random_actions(twin, rng_b))
        for agent in env.possible_agents:
            np.testing.assert_array_equal(out_a[0][agent], out_b[0][agent])
        assert out_a[1:4] == out_b[1:4]
        if not env.agents:
            break


def zeros(env: commons_arena.ArenaEnv, agent: str) -> np.ndarray:
    return np.zeros_like(env.action_space(agent).nvec)


# --------------------------------------------------------------------------- actions


def _bad_actions(env: commons_arena.ArenaEnv) -> list[tuple[str, str, Any, str]]:
    """(case id, agent, action, regex the error message must match)."""
    n_alloc = len(env.action_space("allocator").nvec)
    n_team = len(env.action_space("search").nvec)
    stance_hi = int(env.action_space("search").nvec[-1]) - 1
    nan = np.zeros(n_alloc, dtype=np.float64)
    nan[1] = np.nan
    inf = np.zeros(n_team)
    inf[0] = np.inf
    half = np.zeros(n_team)
    half[2] = 0.5
    negative = np.zeros(n_team, dtype=np.int64)
    negative[0] = -1
    too_big = np.zeros(n_team, dtype=np.int64)
    too_big[-1] = stance_hi + 1
    broker_big = np.zeros_like(env.action_space("broker").nvec)
    broker_big[-1] = env.config.price_levels  # one past the last price level
    return [
        ("short", "allocator", np.zeros(n_alloc - 1, dtype=np.int64),
         rf"action for 'allocator' has shape \({n_alloc - 1},\); its space is MultiDiscrete with shape \({n_alloc},\)"),
        ("long", "search", np.zeros(n_team + 1, dtype=np.int64), r"action for 'search' has shape"),
        ("2d", "broker", np.zeros((1, len(broker_big)), dtype=np.int64), r"action for 'broker' has shape \(1, "),
        ("scalar", "safety", 0, r"action for 'safety' has shape \(\)"),
        ("nan", "allocator", nan, r"action for 'allocator' contains NaN"),
        ("inf", "search", inf, r"action for 'search' contains NaN or infinity"),
        ("non_integer", "robotics", half, r"action for 'robotics' must hold integers"),
        ("strings", "search", ["1"] * n_team, r"action for 'search' must be integers, got dtype"),
        ("negative", "search", negative, r"action for 'search' is outside its space at index 0: -1 not in \[0, \d+\]"),
        ("out_of_range", "search", too_big,
         rf"outside its space at index {n_team - 1}: {stance_hi + 1} not in \[0, {stance_hi}\]"),
        ("price_level", "broker", broker_big, rf"outside its space at index {len(broker_big) - 1}"),
    ]


CASES = [case[0] for case in _bad_actions(commons_arena.parallel_env())]


@pytest.mark.parametrize("case", CASES)
def test_bad_action_raises_and_leaves_state_unchanged(case: str) -> None:
    env, twin = played_twins()
    _, agent, action, message = next(c for c in _bad_actions(env) if c[0] == case)
    before = snapshot(env)
    # every other agent sends a valid action first: validation must come before any effect
    actions = random_actions(env, np.random.default_rng(1))
    del actions[agent]
    actions[agent] = action
    with pytest.raises(ValueError, match=message):
        env.step(actions)
    assert snapshot(env) == before
    assert_same_future(env, twin)


def test_actions_not_a_dict() -> None:
    env, twin = played_twins()
    before = snapshot(env)
    with pytest.raises(ValueError, match=r"step\(\) takes a dict of agent -> action, got list"):
        env.step([zeros(env, a) for a in env.agents])
    assert snapshot(env) == before
    assert_same_future(env, twin)


def test_unknown_agent() -> None:
    env, twin = played_twins()
    before = snapshot(env)
    actions = {a: zeros(env, a) for a in env.agents}
    actions["ceo"] = np.zeros(3, dtype=np.int64)
    with pytest.raises(ValueError, match=r"unknown agent 'ceo'; agents are \['allocator', 'search'"):
        env.step(actions)
    assert snapshot(env) == before
    assert_same_future(env, twin)


def test_step_before_reset() -> None:
    env = commons_arena.parallel_env()
    with pytest.raises(RuntimeError, match=r"step\(\) called before reset\(\)"):
        env.step({})
    with pytest.raises(RuntimeError, match=r"call reset\(\) before hidden_state\(\)"):
        env.hidden_state()
    # still usable afterwards
    obs, _ = env.reset(seed=0)
    assert set(obs) == set(env.possible_agents)


def _finished_env() -> commons_arena.ArenaEnv:
    env = commons_arena.parallel_env()
    env.reset(seed=8)
    while env.agents:
        env.step({})
    return env


def test_step_after_episode_end() -> None:
    env = _finished_env()
    before = snapshot(env)
    with pytest.raises(RuntimeError, match=r"step\(\) called after the episode ended \(every agent has finished\); call reset\(\)"):
        env.step({})
    assert snapshot(env) == before


def test_action_for_finished_agent() -> None:
    env = _finished_env()
    before = snapshot(env)
    # all agents finish together, so an action for a finished agent comes after the end
    # ... and it is also a ValueError, like every other action that cannot be played
    with pytest.raises(ValueError, match=r"step\(\) called after the episode ended"):
        env.step({"search": zeros(env, "search")})
    assert snapshot(env) == before
    env.reset(seed=8)
    env.step({"search": zeros(env, "search")})  # fine again after reset


def test_infeasible_actions_inside_the_space_are_repaired_not_errors() -> None:
    env = commons_arena.parallel_env()
    env.reset(seed=0)
    greedy = {a: env.action_space(a).nvec - 1 for a in env.agents}  # the largest action everywhere
    _, rewards, _, _, infos = env.step(greedy)
    repairs = infos["allocator"]["repairs"]
    # tick 0 has no offer yet: every buy is cut; grants far exceed the owned GPUs
    inventory = np.array([t.spot_inventory for t in env.config.gpu_tiers])
    assert repairs["buy_over_offer"] == inventory.sum()
    assert repairs["grant_over_capacity"] > 0
    assert infos["allocator"]["reward_terms"]["invalid"] < 0


# --------------------------------------------------------------------------- scenario files


def _expect(path: Path, *fragments: str) -> str:
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    message = str(err.value)
    for fragment in (str(path), *fragments):
        assert fragment in message, f"{fragment!r} not in {message!r}"
    with pytest.raises(ScenarioError):  # the env constructor reports the same problem
        commons_arena.parallel_env(scenario=path)
    return message


def test_scenario_error_is_a_value_error() -> None:
    assert issubclass(ScenarioError, ValueError)


def test_unknown_top_level_key(tiny, write_scenario) -> None:
    tiny["colour"] = "blue"
    _expect(write_scenario(tiny), "colour", "Extra inputs are not permitted")


def test_unknown_nested_key(tiny, write_scenario) -> None:
    tiny["gpu_tiers"][1]["colour"] = "blue"
    tiny["teams"][0]["jobs"][0]["owner"] = "bob"
    message = _expect(write_scenario(tiny), "gpu_tiers.1.colour", "teams.0.jobs.0.owner")
    assert message.count("Extra inputs are not permitted") == 2  # problems are reported together


def test_wrong_type_string_for_int(tiny, write_scenario) -> None:
    tiny["max_ticks"] = "3"
    _expect(write_scenario(tiny), "max_ticks", "valid integer", "'3'")


def test_wrong_type_float_for_int(tiny, write_scenario) -> None:
    tiny["gpu_tiers"][0]["owned"] = 2.5
    _expect(write_scenario(tiny), "gpu_tiers.0.owned", "valid integer")


def test_wrong_type_string_for_float(tiny, write_scenario) -> None:
    tiny["budget"] = "20"
    _expect(write_scenario(tiny), "budget", "valid number")


def test_negative_capacity(tiny, write_scenario) -> None:
    tiny["gpu_tiers"][0]["owned"] = -1
    tiny["gpu_tiers"][1]["spot_inventory"] = -2
    _expect(write_scenario(tiny), "gpu_tiers.0.owned", "gpu_tiers.1.spot_inventory", "greater than or equal to 0")


def test_deadline_before_arrival(tiny, write_scenario) -> None:
    tiny["teams"][1]["jobs"][0].update(arrival=3, deadline=1)
    _expect(write_scenario(tiny), "teams.1.jobs.0", "deadline 1 is before arrival 3")


def test_dependency_cycle(tiny, write_scenario) -> None:
    jobs = tiny["teams"][0]["jobs"]
    jobs[0]["depends_on"] = ["c"]
    jobs.append({"id": "c", "gpus": 1, "work": 1.0, "arrival": 0, "deadline": 5, "value": 1.0, "depends_on": ["a"]})
    message = _expect(write_scenario(tiny), "teams[0].jobs", "dependency cycle")
    assert re.search(r"a -> c -> a|c -> a -> c", message)


def test_self_dependency(tiny, write_scenario) -> None:
    tiny["teams"][1]["jobs"][0]["depends_on"] = ["b"]
    _expect(write_scenario(tiny), "teams[1].jobs", "dependency cycle b -> b")


def test_unknown_dependency(tiny, write_scenario) -> None:
    tiny["teams"][0]["jobs"][0]["depends_on"] = ["zz"]
    _expect(write_scenario(tiny), "teams[0].jobs[0] (a).depends_on", "unknown job 'zz'")


def test_job_no_tier_can_hold(tiny, write_scenario) -> None:
    tiny["teams"][0]["jobs"][0]["min_memory_gb"] = 200.0
    tiny["teams"][1]["jobs"][0]["gpus"] = 9
    _expect(write_scenario(tiny), "teams[0].jobs[0] (a)", "no tier has that much memory",
            "teams[1].jobs[0] (b)", "needs 9 GPUs on one tier")


def test_unknown_shock_tier_and_population_agent(tiny, write_scenario) -> None:
    tiny["shocks"] = [{"kind": "production_incident", "tick": 1, "tier": "huge", "gpus_offline": 1}]
    tiny["population"] = {"ceo": "growth"}
    _expect(write_scenario(tiny), "shocks[0] (production_incident).tier", "unknown tier 'huge'",
            "population: unknown agent 'ceo'")


def test_unknown_shock_kind(tiny, write_scenario) -> None:
    tiny["shocks"] = [{"kind": "alien_invasion", "tick": 1}]
    _expect(write_scenario(tiny), "shocks.0.kind", "alien_invasion")


def test_a_job_shock_in_a_cluster_of_its_own_names_targets_its_first_team(tiny, write_scenario) -> None:
    """An audit injects into "safety" by default; a scenario with team names of its own needs no 'team': the job goes
    to its first team. A 'team' it does not have is refused, naming the teams it has."""
    audit = {"kind": "compliance_audit", "tick": 1, "job": {"gpus": 1, "work": 1.0, "slack": 1, "value": 1.0}}
    tiny["shocks"] = [audit]
    config = load_scenario(write_scenario(tiny))
    teams = config.team_names
    assert "safety" not in teams and config.shocks[0].target_team(teams) == teams[0]
    env = ArenaEnv(scenario=config)
    env.reset(seed=0)
    env.step({a: env.action_space(a).sample() * 0 for a in env.agents})
    env.step({a: env.action_space(a).sample() * 0 for a in env.agents})
    assert [e["team"] for e in env.last_tick.events] == [teams[0]]
    tiny["shocks"] = [{**audit, "team": "safety"}]
    _expect(write_scenario(tiny), "shocks[0] (compliance_audit).team", "'safety' is not one of this scenario's teams")


def test_missing_required_key(tiny, write_scenario) -> None:
    del tiny["carbon"]
    _expect(write_scenario(tiny), "carbon", "Field required")


def test_reserved_and_duplicate_names(tiny, write_scenario) -> None:
    tiny["teams"][1]["name"] = "broker"
    tiny["gpu_tiers"][1]["name"] = "small"
    _expect(write_scenario(tiny), "reserved agent names", "gpu_tiers: names must be unique")


def test_team_count_bounds(tiny, write_scenario) -> None:
    tiny["teams"] = tiny["teams"][:1]
    _expect(write_scenario(tiny), "teams", "at least 2")


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.toml"
    with pytest.raises(ScenarioError, match=f"scenario file not found: {re.escape(str(path))}"):
        load_scenario(path)
    with pytest.raises(ScenarioError, match="scenario file not found"):
        load_scenario(str(path))


def test_unknown_scenario_name() -> None:
    with pytest.raises(ScenarioError, match=r"no scenario named 'no_such_scenario'; known scenarios: .*standard"):
        load_scenario("no_such_scenario")
    with pytest.raises(ScenarioError, match="no scenario named"):
        commons_arena.parallel_env(scenario="no_such_scenario")


def test_invalid_toml(write_scenario) -> None:
    path = write_scenario('name = "broken"\nmax_ticks = = 3\n', filename="broken.toml")
    _expect(path, "not valid TOML")


def test_duplicate_toml_key_is_invalid(tiny, write_scenario) -> None:
    path = write_scenario(tiny, filename="dup.toml")
    path.write_text(path.read_text() + "budget = 5.0\n")
    _expect(path, "not valid TOML")
