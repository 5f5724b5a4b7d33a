"""The reference mechanisms (issue 42; policies/mechanisms.py): each rule pinned on hand-built observations.

Every one also plays every scenario through tests/policies/test_policies.py (actions in space, determinism,
no repair on random observations) and tests/policies/test_limits.py (no avoidable invalid unit).
"""

from __future__ import annotations

import numpy as np
import pytest

import commons_arena
from commons_arena.enums import ALLOCATOR
from policies.mechanisms import BatchCredit, even_split, raise_lowest, rotated
from policies.planner import BLUFF_GRID
from policies.registry import make_policy
from tests.policies.test_policies import alloc_obs, split


def in_team_order(rotation_order: np.ndarray, tick: int) -> list[int]:
    """One row in rotation order (from team ``tick mod n``) back in team order."""
    out = np.zeros_like(rotation_order)
    out[rotated(np.array([tick]), len(rotation_order))[0]] = rotation_order
    return out.tolist()


def test_even_split_rotates_the_odd_units() -> None:
    assert in_team_order(even_split(np.array([4]), 3)[0], 0) == [2, 1, 1]
    assert in_team_order(even_split(np.array([4]), 3)[0], 1) == [1, 2, 1]
    assert in_team_order(even_split(np.array([0]), 3)[0], 2) == [0, 0, 0]


def test_raise_lowest_is_max_of_demand_and_a_level() -> None:
    def raised(base: list[int], units: int, start: int) -> list[int]:
        order = rotated(np.array([start]), len(base))[0]
        return in_team_order(raise_lowest(np.array([base])[:, order], np.array([units]))[0], start)

    assert raised([3, 0, 1], 3, 0) == [3, 2, 2]
    assert raised([3, 0, 1], 0, 0) == [3, 0, 1]
    assert raised([0, 0, 0], 2, 1) == [0, 1, 1]


def test_uniform_rule_rations_by_a_level_and_hands_out_a_surplus() -> None:
    config = commons_arena.load_scenario("standard")  # small 4, medium 3, large 1 owned
    scarce = alloc_obs(config, declared=[[6, 0, 0], [1, 0, 0], [0, 0, 0]])
    _, grant = split(config, make_policy("uniform_rule", config, ALLOCATOR).act(scarce))
    assert grant[:, 0].tolist() == [3, 1, 0]  # min(demand, L): L = 3
    ample = alloc_obs(config, declared=[[1, 0, 0], [0, 1, 0], [0, 0, 0]])
    _, grant = split(config, make_policy("uniform_rule", config, ALLOCATOR).act(ample))
    assert grant[:, 0].tolist() == [2, 1, 1]  # max(demand, L): the 3 spare small GPUs raise the lowest
    assert grant[:, 1].tolist() == [1, 1, 1] and grant[:, 2].sum() == 1
    _, kept = split(config, make_policy("uniform_rule", config, ALLOCATOR, surplus=0.0).act(ample))
    assert kept.tolist() == [[1, 0, 0], [0, 1, 0], [0, 0, 0]]  # free disposal: the demands


def test_credit_guarantees_a_share_then_lends_to_the_richest() -> None:
    config = commons_arena.load_scenario("standard")
    policy = make_policy("credit", config, ALLOCATOR, guaranteed=0.5, endowment=0.0)
    assert isinstance(policy.batched, BatchCredit)  # type: ignore[attr-defined]
    policy.reset(0)
    # small tier, 4 GPUs: guaranteed floor(2) split 1/1/0 at tick 0; team 2 wants 0
    _, grant = split(config, policy.act(alloc_obs(config, tick=0, declared=[[4, 0, 0], [1, 0, 0], [0, 0, 0]])))
    assert grant[:, 0].tolist() == [3, 1, 0]  # team 0 borrows the shared slice's 2 (nobody donated)
    small = policy.batched.credits[0, :, 0].tolist()  # type: ignore[attr-defined]
    # team 0 paid 2, every team earned the shared slice's 2 / 3
    assert small == pytest.approx([-2 + 2 / 3, 2 / 3, 2 / 3])


def test_a_bluff_now_costs_allocation_later() -> None:
    """Two teams with the same demand: the one that borrowed more before is served after the other."""
    config = commons_arena.load_scenario("standard")
    policy = make_policy("credit", config, ALLOCATOR, guaranteed=0.0, endowment=1.0)
    policy.reset(0)
    # tick 0: team 0 bluffs 4 small GPUs, team 1 asks 0: team 0 spends 4 credits
    policy.act(alloc_obs(config, tick=0, declared=[[4, 0, 0], [0, 0, 0], [0, 0, 0]]))
    # tick 3 (team 0 first in the rotation): both want 4; team 1 has the credits, so it is served first
    _, grant = split(config, policy.act(alloc_obs(config, tick=3, declared=[[4, 0, 0], [4, 0, 0], [0, 0, 0]])))
    assert grant[:, 0].tolist() == [0, 4, 0]


def test_credit_pays_donors_for_what_others_borrow() -> None:
    config = commons_arena.load_scenario("standard")
    policy = make_policy("credit", config, ALLOCATOR, guaranteed=1.0, endowment=0.0)
    policy.reset(0)
    # small: 4 guaranteed, split 2/1/1 at tick 0; team 1 and 2 want 0 and donate 1 each; team 0 borrows both
    _, grant = split(config, policy.act(alloc_obs(config, tick=0, declared=[[4, 0, 0], [0, 0, 0], [0, 0, 0]])))
    assert grant[:, 0].tolist() == [4, 0, 0]
    assert policy.batched.credits[0, :, 0].tolist() == pytest.approx([-2.0, 1.0, 1.0])  # type: ignore[attr-defined]


def test_fair_planner_keeps_a_share_of_the_deflated_need() -> None:
    config = commons_arena.load_scenario("standard")
    planner = make_policy("planner", config, ALLOCATOR)
    fair = make_policy("fair_planner", config, ALLOCATOR, headroom=0.5)
    tops = [4, 4, 4]
    assert 2.0 in BLUFF_GRID and 3.0 in BLUFF_GRID
    # a x2 bluffer declaring 8 / 4 needs 4 / 2: planner undoes x1.5 of it (half the inflation kept) -> 5 / 3,
    # fair_planner undoes all of it and keeps half the need -> 4 + 2 / 2 + 1
    assert planner.batched.estimate_need([8, 0, 4], 2.0, [9, 9, 9]) == [5, 0, 3]
    assert fair.batched.estimate_need([8, 0, 4], 2.0, [9, 9, 9]) == [6, 0, 3]
    # a truth-teller (factor 1): planner keeps no headroom, fair_planner half its need (rounded half up, at most the
    # ceiling): 4 -> 6 cut to 4; 1 -> 1.5 -> 2; 3 -> 4.5 -> 4 (the ceiling)
    assert planner.batched.estimate_need([4, 1, 3], 1.0, tops) == [4, 1, 3]
    assert fair.batched.estimate_need([4, 1, 3], 1.0, tops) == [4, 2, 4]
    # a x3 bluffer declaring 12 (need 4): planner undoes x2 -> 6; fair_planner 4 + 2 -> 6
    assert planner.batched.estimate_need([12], 3.0, [20]) == fair.batched.estimate_need([12], 3.0, [20]) == [6]
    # the headroom is a share of the need whatever the bluff: a x2 and a x3 bluffer with need 4 get the same
    assert fair.batched.estimate_need([8], 2.0, [20]) == fair.batched.estimate_need([12], 3.0, [20])
    assert planner.batched.estimate_need([8], 2.0, [20]) != planner.batched.estimate_need([12], 3.0, [20])
    assert fair.params["headroom"] == 0.5 and "margin" not in fair.params


def test_fair_planner_is_planner_at_zero_headroom_and_no_margin() -> None:
    from policies import Population, run_episode

    config = commons_arena.load_scenario("crisis")
    env = commons_arena.parallel_env(config)
    lineup = Population.default(config).build(config, env=env)

    def allocator_summary(policy, seed):
        return run_episode(env, {**lineup, ALLOCATOR: policy}, seed)[ALLOCATOR]

    differs = 0
    for seed in range(3):
        zero = allocator_summary(make_policy("fair_planner", config, ALLOCATOR, headroom=0.0), seed)
        assert zero == allocator_summary(make_policy("planner", config, ALLOCATOR, margin=0.0), seed)
        differs += allocator_summary(make_policy("fair_planner", config, ALLOCATOR), seed) != zero
    assert differs  # the headroom changes what it grants


@pytest.mark.parametrize("name, bad", [("credit", {"guaranteed": 1.5}), ("credit", {"endowment": -1.0}),
                                       ("uniform_rule", {"surplus": -0.1}), ("fair_planner", {"headroom": 2.0})])
def test_bad_parameters_are_refused_by_name(name: str, bad: dict[str, float]) -> None:
    key = next(iter(bad))
    with pytest.raises(ValueError, match=key):
        make_policy(name, "standard", ALLOCATOR, **bad)


def test_uniform_rule_at_free_disposal_is_max_min_fairs_water_filling() -> None:
    from policies import Population, run_episode

    config = commons_arena.load_scenario("crisis")
    env = commons_arena.parallel_env(config)
    lineup = Population.default(config).build(config, env=env)
    for seed in range(3):
        mine = run_episode(env, {**lineup, ALLOCATOR: make_policy("uniform_rule", config, ALLOCATOR, surplus=0.0)}, seed)
        theirs = run_episode(env, {**lineup, ALLOCATOR: make_policy("max_min_fair", config, ALLOCATOR)}, seed)
        assert mine[ALLOCATOR] == theirs[ALLOCATOR]
        textbook = run_episode(env, {**lineup, ALLOCATOR: make_policy("uniform_rule", config, ALLOCATOR)}, seed)
        assert textbook[ALLOCATOR]["return"] != theirs[ALLOCATOR]["return"]  # the surplus is handed out
