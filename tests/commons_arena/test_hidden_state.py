"""No observation contains another agent's hidden state (docs/rules.md §7).

Method: two copies of an env, reset with the same seed; change a hidden value of one team
in the second copy through ``hidden_state()``; play both with the same actions and check
that only that team's own observation moves. The allocator may see a team's true need
only once it is revealed (starvation, docs/rules.md §5, rule 8).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import commons_arena
from commons_arena import observation_layout
from tests.sweeps import swept

SCENARIOS = commons_arena.list_scenarios()


def _twins(scenario: str | Path, seed: int) -> tuple[commons_arena.ArenaEnv, commons_arena.ArenaEnv]:
    a, b = commons_arena.parallel_env(scenario=scenario), commons_arena.parallel_env(scenario=scenario)
    a.reset(seed=seed)
    b.reset(seed=seed)
    return a, b


def _teams_to_probe(config: commons_arena.ScenarioConfig) -> list[str]:
    teams = list(config.team_names)
    return sorted({"search" if "search" in teams else teams[0], teams[-1]})


def _check_values_are_private(scenario: str | Path, team: str, seed: int) -> None:
    """Job values of ``team`` change; with identical random actions nobody else sees it."""
    a, b = _twins(scenario, seed)
    i = a.config.team_names.index(team)
    for job in b.hidden_state().jobs[i]:
        job.value += 1000.0
    rng = np.random.default_rng(seed)
    own_moved = False
    slots = observation_layout(a.config, team)
    while a.agents:
        actions = {agent: rng.integers(0, a.action_space(agent).nvec) for agent in a.agents}
        obs_a, rew_a, *_ = a.step(actions)
        obs_b, rew_b, *_ = b.step(actions)
        for agent in a.possible_agents:
            if agent != team:
                np.testing.assert_array_equal(obs_a[agent], obs_b[agent], err_msg=f"{agent} sees {team}'s values")
        for other in a.config.team_names:
            if other != team:
                assert rew_a[other] == rew_b[other]
        assert rew_a["broker"] == rew_b["broker"]
        # value column of the job slots: +1000 for the changed jobs, equal for jobs a
        # shock injected after the change
        va, vb = slots.view(obs_a[team])["jobs"][:, 5], slots.view(obs_b[team])["jobs"][:, 5]
        assert set(np.round(vb - va, 3).tolist()) <= {0.0, 1000.0}
        own_moved |= bool((vb - va > 0).any())
    assert own_moved, f"{team} never saw its own changed jobs"


def _check_needs_are_private(scenario: str | Path, team: str, seed: int) -> None:
    """``team``'s jobs get more GPUs and work (its true need moves); nobody else's observation
    moves, except the allocator's revealed_need row of ``team`` once its need is revealed."""
    a, b = _twins(scenario, seed)
    config = a.config
    i = config.team_names.index(team)
    for job in b.hidden_state().jobs[i]:
        job.gpus += 1
        job.work += 1.0
        job.remaining += 1.0
    T = len(config.gpu_tiers)
    alloc = observation_layout(config, "allocator")
    mine = observation_layout(config, team)
    rng = np.random.default_rng(seed)
    own_need_moved = False
    while a.agents:
        # No grants (nothing runs, so starvation is the same in both copies) and nothing
        # declared (an audit can expose no bluff); stances and the broker play at random.
        actions = {"allocator": np.zeros_like(a.action_space("allocator").nvec),
                   "broker": rng.integers(0, a.action_space("broker").nvec)}
        for t in config.team_names:
            actions[t] = np.zeros_like(a.action_space(t).nvec)
            actions[t][-1] = rng.integers(0, 3)
        obs_a, *_ = a.step(actions)
        obs_b, *_ = b.step(actions)
        for agent in a.possible_agents:
            if agent in (team, "allocator"):
                continue
            np.testing.assert_array_equal(obs_a[agent], obs_b[agent], err_msg=f"{agent} sees {team}'s need")
        va, vb = alloc.view(obs_a["allocator"]), alloc.view(obs_b["allocator"])
        for field in va:
            if field != "revealed_need":
                np.testing.assert_array_equal(va[field], vb[field], err_msg=f"allocator.{field} moved")
        np.testing.assert_array_equal(np.delete(va["revealed_need"], i, 0), np.delete(vb["revealed_need"], i, 0))
        if va["revealed"][i] == 0:
            np.testing.assert_array_equal(va["revealed_need"][i], np.zeros(T))
            np.testing.assert_array_equal(vb["revealed_need"][i], np.zeros(T))
        else:  # revealed: the allocator now sees each copy's own truth
            np.testing.assert_array_equal(va["revealed_need"][i], a.hidden_state().need[i])
            np.testing.assert_array_equal(vb["revealed_need"][i], b.hidden_state().need[i])
        ma, mb = mine.view(obs_a[team]), mine.view(obs_b[team])
        # gpus column of the job slots: +1 for changed jobs, equal for jobs injected later
        assert set((mb["jobs"][:, 1] - ma["jobs"][:, 1]).tolist()) <= {0.0, 1.0}
        np.testing.assert_array_equal(ma["need"], a.hidden_state().need[i])
        np.testing.assert_array_equal(mb["need"], b.hidden_state().need[i])
        assert mb["need"].sum() >= ma["need"].sum()
        own_need_moved |= bool(mb["need"].sum() > ma["need"].sum())
    assert own_need_moved, f"{team} never had a ready job in this episode; pick another seed"


@pytest.mark.parametrize("name", swept(SCENARIOS))
def test_job_values_are_private(name: str) -> None:
    for team in _teams_to_probe(commons_arena.load_scenario(name)):
        _check_values_are_private(name, team, seed=7)


@pytest.mark.parametrize("name", swept(SCENARIOS))
def test_true_needs_are_private(name: str) -> None:
    for team in _teams_to_probe(commons_arena.load_scenario(name)):
        _check_needs_are_private(name, team, seed=7)


def test_hidden_state_is_private_in_unusual_shapes(unusual_scenario: Path) -> None:
    config = commons_arena.load_scenario(unusual_scenario)
    for team in config.team_names:  # every team, up to 8
        _check_values_are_private(unusual_scenario, team, seed=3)
        _check_needs_are_private(unusual_scenario, team, seed=3)


def test_search_ready_job_change_moves_only_search(tiny, make_env) -> None:
    """The brief's case, spelled out: search's ready job changes gpus, work and value."""
    a, b = make_env(tiny), make_env(tiny)
    a.reset(seed=0)
    b.reset(seed=0)
    job = b.hidden_state().jobs[0][0]  # search's job "a", ready at tick 0
    assert job.id == "a" and job.ready(0, b.hidden_state().jobs[0])
    job.gpus, job.work, job.remaining, job.value = 2, 5.0, 5.0, 99.0
    obs_a, *_ = a.step({})
    obs_b, *_ = b.step({})
    for agent in ("allocator", "robotics", "broker"):
        np.testing.assert_array_equal(obs_a[agent], obs_b[agent])
    sa = observation_layout(a.config, "search").view(obs_a["search"])
    sb = observation_layout(b.config, "search").view(obs_b["search"])
    assert sa["need"].tolist() == [1, 0] and sb["need"].tolist() == [2, 0]
    # slot fields: present, gpus, min_memory_gb, remaining_work, ticks_to_deadline, value, priority, ready
    assert sa["jobs"][0].tolist() == [1, 1, 0, 2, 2, 10, 1, 1]
    assert sb["jobs"][0].tolist() == [1, 2, 0, 5, 2, 99, 1, 1]


def test_team_observation_shows_only_public_parts_of_others(tiny, make_env) -> None:
    """A team sees others' declarations (public) but never their need or jobs."""
    env = make_env(tiny)
    env.reset(seed=0)
    obs, *_ = env.step({"search": np.array([2, 0, 1]), "robotics": np.array([0, 1, 0])})
    s = observation_layout(env.config, "search").view(obs["search"])
    r = observation_layout(env.config, "robotics").view(obs["robotics"])
    assert s["others_declared"].tolist() == [[0, 1]] and r["others_declared"].tolist() == [[2, 0]]
    assert s["declared"].tolist() == [2, 0] and r["declared"].tolist() == [0, 1]
    # the one job in each slot table is the team's own
    assert s["jobs"][0, 5] == 10 and r["jobs"][0, 5] == 20
    assert (s["jobs"][1:] == 0).all() and (r["jobs"][1:] == 0).all()
