"""The reward rubric (docs/rules.md §8): each term, its weight, and that the terms sum to the reward."""

from __future__ import annotations

import numpy as np
import pytest

from commons_arena import numerics, rewards
from commons_arena.scenario import AllocatorWeights, BrokerWeights, RewardWeights, TeamWeights
from tests.reference.rewards import TickOutcome, jain_index


def outcome() -> TickOutcome:
    return TickOutcome(
        completed_value=np.array([10.0, 0.0, 5.0]),
        missed_value=np.array([0.0, 4.0, 0.0]),
        satisfaction=np.array([1.0, 0.5, 0.0]),
        has_need=np.array([True, True, False]),
        credibility_lost=np.array([0.0, 0.1, 0.0]),
        purchase_cost=6.0,
        operating_cost=1.5,
        idle_gpus=3,
        carbon_over_kg=0.7,
        justified_pressure=1.5,
        allocator_invalid=2,
        broker_profit=4.5,
        broker_invalid=1,
    )


@pytest.mark.parametrize(
    ("x", "expected"),
    [([1.0, 1.0], 1.0), ([1.0, 0.0], 0.5), ([1.0, 0.5], 0.9), ([], 1.0), ([0.0, 0.0], 1.0), ([2.0, 2.0, 2.0], 1.0),
     ([1.0, 0.0, 0.0, 0.0], 0.25), ([3.0, 1.0], 16.0 / 20.0)],
)
def test_jain_index(x, expected) -> None:
    assert jain_index(np.array(x, dtype=float)) == pytest.approx(expected)


def test_raw_allocator_terms() -> None:
    o = outcome()
    assert rewards.allocator_job_value(o) == 15.0
    assert rewards.allocator_spend(o) == -7.5
    assert rewards.allocator_missed(o) == -4.0
    assert rewards.allocator_idle(o) == -3.0
    assert rewards.allocator_carbon(o) == -0.7
    assert rewards.allocator_escalation(o) == -1.5
    # Jain over the teams with a need: [1, 0.5] → 2.25 / 2.5 = 0.9; the term is index - 1
    assert rewards.allocator_fairness(o) == pytest.approx(-0.1)
    assert rewards.allocator_invalid(o) == -2.0


def test_raw_team_and_broker_terms() -> None:
    o = outcome()
    assert [rewards.team_job_value(o.team(i)) for i in range(3)] == [10.0, 0.0, 5.0]
    assert [rewards.team_missed(o.team(i)) for i in range(3)] == [0.0, -4.0, 0.0]
    assert [rewards.team_credibility(o.team(i)) for i in range(3)] == [0.0, -0.1, 0.0]
    assert rewards.broker_profit(o) == 4.5 and rewards.broker_invalid(o) == -1.0


def test_default_weights() -> None:
    o, w = outcome(), RewardWeights()
    assert rewards.Rubric(w).allocator_terms(o) == pytest.approx({
        "job_value": 15.0, "spend": -7.5, "missed": -2.4, "idle": -1.5, "carbon": -0.7, "escalation": -3.0,
        "fairness": -0.1, "invalid": -2.0,
    })
    assert rewards.Rubric(w).team_terms(o, 1) == pytest.approx({"job_value": 0.0, "missed": -2.4, "credibility": -1.0})
    assert rewards.Rubric(w).broker_terms(o) == pytest.approx({"profit": 4.5, "invalid": -0.1})


def test_custom_weights_scale_each_term() -> None:
    w = RewardWeights(
        allocator=AllocatorWeights(job_value=2.0, spend=0.0, missed=1.0, idle=1.0, carbon=3.0, escalation=1.0,
                                   fairness=10.0, invalid=0.5),
        team=TeamWeights(job_value=0.5, missed=0.0, credibility=1.0),
        broker=BrokerWeights(profit=-1.0, invalid=0.0),
    )
    o = outcome()
    assert rewards.Rubric(w).allocator_terms(o) == pytest.approx({
        "job_value": 30.0, "spend": 0.0, "missed": -4.0, "idle": -3.0, "carbon": -2.1, "escalation": -1.5,
        "fairness": -1.0, "invalid": -1.0,
    })
    assert rewards.Rubric(w).team_terms(o, 0) == pytest.approx({"job_value": 5.0, "missed": 0.0, "credibility": 0.0})
    assert rewards.Rubric(w).broker_terms(o) == pytest.approx({"profit": -4.5, "invalid": 0.0})


def test_every_term_has_a_weight_and_every_weight_a_term() -> None:
    assert set(rewards.ALLOCATOR_TERMS) == set(AllocatorWeights.model_fields)
    assert set(rewards.TEAM_TERMS) == set(TeamWeights.model_fields)
    assert set(rewards.BROKER_TERMS) == set(BrokerWeights.model_fields)


# --------------------------------------------------------------------------- through the env


def _acts(env, buy=(0, 0), grant=((0, 0), (0, 0)), offer=(0, 0), levels=(0, 0)):
    out = {"allocator": np.array([*buy, *np.ravel(grant)]), "broker": np.array([*offer, *levels])}
    for team in env.config.team_names:
        out[team] = np.zeros(3, dtype=np.int64)
    return out


def _check_sum(rew, info) -> None:
    for agent, r in rew.items():
        assert r == pytest.approx(sum(info[agent]["reward_terms"].values()), abs=1e-12)


def test_hand_computed_episode(tiny, make_env) -> None:
    """tiny, soft cap 3.5 kg. Every number below is worked out in the comments."""
    tiny["carbon"]["cap_kg"] = 3.5
    env = make_env(tiny)
    env.reset(seed=0)
    # tick 0: search 2 small (its 1-GPU job runs, 1 idle), robotics 1 large (job b: 2 work at
    # speed 2, done, +20). Broker posts 2 small @5, 1 large @10 for tick 1.
    # spend = op cost 2 x 0.5 + 1 x 2 = 3; idle 1 x 0.5; carbon 1 + 2 = 3 kg (under 3.5)
    _, rew, term, _, info = env.step(_acts(env, grant=((2, 0), (0, 1)), offer=(2, 1), levels=(5, 5)))
    assert info["allocator"]["reward_terms"] == pytest.approx({
        "job_value": 20.0, "spend": -3.0, "missed": 0.0, "idle": -0.5, "carbon": 0.0, "escalation": 0.0,
        "fairness": 0.0, "invalid": 0.0})
    assert rew == pytest.approx({"allocator": 16.5, "search": 0.0, "robotics": 20.0, "broker": 0.0})
    assert info["robotics"]["reward_terms"] == pytest.approx({"job_value": 20.0, "missed": 0.0, "credibility": 0.0})
    _check_sum(rew, info)
    assert not any(term.values())
    # tick 1: buy 1 small @5 (budget 15); grant search 3 small: job a finishes (+10), 2 idle.
    # spend = 5 + 3 x 0.5 = 6.5; idle 2 x 0.5 = 1; carbon 1 kg → 4 kg, 0.5 over the cap.
    # Fairness counts only teams with a ready job (search, satisfied): 0. Broker: 5 - 1 = 4.
    _, rew, term, _, info = env.step(_acts(env, buy=(1, 0), grant=((3, 0), (0, 0))))
    assert info["allocator"]["reward_terms"] == pytest.approx({
        "job_value": 10.0, "spend": -6.5, "missed": 0.0, "idle": -1.0, "carbon": -0.5, "escalation": 0.0,
        "fairness": 0.0, "invalid": 0.0})
    assert rew == pytest.approx({"allocator": 2.0, "search": 10.0, "robotics": 0.0, "broker": 4.0})
    _check_sum(rew, info)
    assert all(term.values())  # every job resolved
    episode = info["allocator"]["episode"]
    assert episode["return"] == pytest.approx(18.5)
    assert episode["term/job_value"] == 30.0 and episode["term/carbon"] == pytest.approx(-0.5)
    assert (episode["completed"], episode["missed"], episode["purchased_gpus"]) == (2, 0, 1)
    assert episode["spend"] == pytest.approx(9.5) and episode["idle_gpu_ticks"] == 3
    assert episode["carbon_kg"] == pytest.approx(4.0) and episode["fairness"] == 1.0
    assert episode["utilisation"] == pytest.approx(3 / 7)  # 3 used of 2 ticks x 3 owned + 1 bought
    assert info["broker"]["episode"]["return"] == pytest.approx(4.0)
    assert info["search"]["episode"]["term/job_value"] == 10.0


def test_missed_and_unfair_ticks(tiny, make_env) -> None:
    env = make_env(tiny)
    env.reset(seed=0)
    # tick 0: only search is fed: satisfactions [1, 0] → Jain 0.5 → fairness -0.5
    _, rew, _, _, info = env.step(_acts(env, grant=((1, 0), (0, 0))))
    assert info["allocator"]["reward_terms"]["fairness"] == pytest.approx(-0.5)
    assert rew["allocator"] == pytest.approx(-0.5 - 0.5)  # + op cost 0.5
    # tick 1, 2: nobody fed: all satisfactions 0, equally starved → fairness 0
    _, rew, _, _, info = env.step(_acts(env))
    assert info["allocator"]["reward_terms"]["fairness"] == 0.0 and rew["allocator"] == 0.0
    env.step(_acts(env))
    # tick 3: a (value 10) misses its deadline: 0.6 x 10 for the allocator and for search
    _, rew, _, _, info = env.step(_acts(env))
    assert info["allocator"]["reward_terms"]["missed"] == pytest.approx(-6.0)
    assert rew["search"] == pytest.approx(-6.0) and rew["robotics"] == 0.0
    # tick 4: b (value 20) misses
    _, rew, term, _, info = env.step(_acts(env))
    assert rew["robotics"] == pytest.approx(-12.0) and rew["allocator"] == pytest.approx(-12.0)
    assert all(term.values())
    assert info["allocator"]["episode"]["missed_value"] == 30.0


def test_scenario_weights_reach_the_rewards(tiny, make_env) -> None:
    tiny["rewards"] = {"allocator": {"missed": 2.0, "fairness": 0.0}, "team": {"missed": 0.0},
                       "broker": {"profit": 0.5}}
    env = make_env(tiny)
    env.reset(seed=0)
    _, _, _, _, info = env.step(_acts(env, grant=((1, 0), (0, 0)), offer=(1, 0), levels=(0, 0)))
    assert info["allocator"]["reward_terms"]["fairness"] == 0.0  # weight 0
    # broker sells 1 small at price 0 below its unit cost 1: profit -1 x 0.5
    _, rew, _, _, info = env.step(_acts(env, buy=(1, 0)))
    assert rew["broker"] == pytest.approx(-0.5)
    env.step(_acts(env))
    _, rew, _, _, info = env.step(_acts(env))  # tick 3: a misses
    assert info["allocator"]["reward_terms"]["missed"] == pytest.approx(-20.0)
    assert info["search"]["reward_terms"]["missed"] == 0.0 and rew["search"] == 0.0


@pytest.mark.parametrize("n", range(0, 10))
def test_numpy_sum_has_numpy_bits(n) -> None:
    """The team totals skip numpy for a few values; they must round exactly as numpy's sum."""
    rng = np.random.default_rng(n)
    for _ in range(200):
        values = (rng.random(n) * 10.0 ** rng.integers(-3, 4, n)).tolist()
        assert numerics.numpy_sum(values) == float(np.sum(np.array(values, dtype=np.float64)))
