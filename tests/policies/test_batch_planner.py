"""The ``planner`` (policies/planner.py's :class:`BatchPlanner`, its one definition) is bit for bit the
list-based planner it replaced (tests/reference/planner.py, the spec), arena by arena (issues 40, 51).

Observations come from reference-env episodes of the allocator seat (uniform random actions,
the planner itself, the ``need`` codec's random corrections) dealt to N arenas with
episodes cut at random lengths, so arenas reset mid-batch (tests/policies/batch_streams.py).
Per step the batch and N reference planners (:class:`~policies.batch.LoopBatchPolicy`) get the
same resets and observations; their actions, need estimates and log-weights (to the byte) and
the plans for randomly corrected needs (what the ``need`` codec asks for) must agree. The fast
loop holds ``standard``, ``crisis``, a generated ``broad`` scenario and a one-tier hard-cap
shape; the full run every shipped scenario, both unusual shapes and 10 generated ones (30 passed once, 2026-12-05).
"""

from __future__ import annotations

import numpy as np
import pytest

import commons_arena
from commons_arena.enums import ALLOCATOR
from policies import planner
from policies.batch import BatchPolicy, LoopBatchPolicy
from policies.planner import BatchPlanner
from policies.registry import make_policy
from tests.policies.batch_cases import HARD_CAP
from tests.policies.batch_streams import case_config, cases, episodes, mixed_actor, schedule
from tests.reference.planner import ReferencePlanner


def assert_planners_agree(config, num_envs: int, n_episodes: int, seed: int = 0, **params) -> int:
    """Step the batch and the loop side by side over a schedule; returns how many steps ran."""
    played = episodes(config, ALLOCATOR, range(seed, seed + n_episodes), mixed_actor(config, ALLOCATOR, "need", seed))
    loop = LoopBatchPolicy(lambda: ReferencePlanner(config, **params), num_envs)
    batch = BatchPlanner(config, ALLOCATOR, num_envs, **params)
    rng = np.random.default_rng(seed)
    steps = 0
    for index, seeds, obs in schedule(played, num_envs, seed):
        loop.reset(seeds, index)
        batch.reset(seeds, index)
        expected = loop.act(obs)
        got = batch.act(obs)
        assert got.dtype == np.int64 and np.array_equal(got, expected), f"step {steps}: actions differ"
        estimate = np.stack([p.last_estimate for p in loop.policies])
        assert np.array_equal(batch.last_estimate, estimate), f"step {steps}: need estimates differ"
        log_w = np.stack([np.stack([b.log_w for b in p.beliefs]) for p in loop.policies])
        assert batch.log_w.tobytes() == log_w.tobytes(), f"step {steps}: beliefs differ"
        need = np.maximum(estimate + rng.integers(-2, 3, estimate.shape), 0)
        headroom = [None if p.buy_headroom else p.last_headroom for p in loop.policies]  # what each never buys
        planned = np.stack([np.asarray(p.plan(o, n.tolist(), headroom=None if h is None else h.tolist()), np.int64)
                            for p, o, n, h in zip(loop.policies, obs, need, headroom, strict=True)])
        unbought = batch.unbought(np.arange(num_envs))
        if not batch.buy_headroom:
            assert unbought is not None and np.array_equal(unbought, np.stack(headroom)), f"step {steps}: headrooms differ"
        assert np.array_equal(batch.plan(obs, need, headroom=unbought), planned), \
            f"step {steps}: plans for corrected needs differ"
        steps += 1
    return steps


@pytest.mark.parametrize("case", cases(broad=10))
def test_the_batched_planner_is_the_planner_in_every_arena(case):
    assert assert_planners_agree(case_config(case), num_envs=6, n_episodes=15) == 40


@pytest.mark.slow
@pytest.mark.parametrize("case", ["crisis", "elevated", "duo_one_tier_hard", "broad:3"])
def test_the_batched_planner_with_other_parameters_and_many_arenas(case):
    params = {"pacing": 1.0, "gpu_tick_value": 9.0, "prior_sigma": 0.3, "margin": 1.0}
    assert assert_planners_agree(case_config(case), num_envs=24, n_episodes=60, seed=5, **params) == 40


def test_a_batch_of_one_with_one_arena_reset_at_a_time_is_the_planner():
    assert assert_planners_agree(commons_arena.load_scenario("standard"), num_envs=1, n_episodes=4, seed=2) == 40


def test_it_is_a_batch_policy_and_refuses_bad_input():
    config = commons_arena.load_scenario("standard")
    batch = BatchPlanner(config, ALLOCATOR, 3)
    assert isinstance(batch, BatchPolicy)
    assert batch.params == make_policy("planner", config, ALLOCATOR).params == {
        "pacing": 2.0, "gpu_tick_value": 6.0, "prior_sigma": 0.1, "margin": 0.5}
    tuned = make_policy("planner", config, ALLOCATOR, margin=0.8, pacing=1.5, heed_escalation=False).batched.resized(2)
    assert tuned.params == {**batch.params, "margin": 0.8, "pacing": 1.5, "heed_escalation": False} and tuned.num_envs == 2
    assert tuned.settings == {**batch.params, "margin": 0.8, "pacing": 1.5, "headroom": None, "heed_escalation": False,
                              "buy_headroom": True}
    with pytest.raises(ValueError, match="one seed per arena"):
        batch.reset([1, 2], np.array([0]))
    with pytest.raises(ValueError, match="outside 0..2"):
        batch.reset([1], np.array([3]))
    with pytest.raises(ValueError, match=r"takes observations of shape \(3, \d+\)"):
        batch.act(np.zeros((2, batch.obs_dim), dtype=np.float32))
    with pytest.raises(ValueError, match=r"observations must be \(arenas, \d+\)"):
        batch.act(np.zeros((2, batch.obs_dim), dtype=np.float32), np.array([1]))
    with pytest.raises(ValueError, match="distinct arenas"):
        batch.act(np.zeros((2, batch.obs_dim), dtype=np.float32), np.array([1, 1]))
    with pytest.raises(ValueError, match="num_envs must be at least 1"):
        BatchPlanner(config, ALLOCATOR, 0)
    with pytest.raises(ValueError, match="margin must be in"):
        BatchPlanner(config, ALLOCATOR, 2, margin=2.0)
    with pytest.raises(ValueError, match="plays the allocator role"):
        BatchPlanner(config, "search", 2)


def test_a_reset_forgets_only_the_arenas_it_names():
    config = commons_arena.load_scenario("crisis")
    played = episodes(config, ALLOCATOR, [3], mixed_actor(config, ALLOCATOR, "need", 1))
    _, seen = played[0]
    batch = BatchPlanner(config, ALLOCATOR, 3)
    batch.reset([0, 1, 2])
    for obs in seen[:6]:
        batch.act(np.stack([obs] * 3))
    learned = batch.log_w.copy()
    batch.reset([9], np.array([1]))
    assert np.array_equal(batch.log_w[[0, 2]], learned[[0, 2]])
    fresh = BatchPlanner(config, ALLOCATOR, 1)
    assert np.array_equal(batch.log_w[1], fresh.log_w[0]) and not np.array_equal(learned[1], fresh.log_w[0])


# ------------------------------------------------------------------ a binding hard cap (issue 53, item 3)
def test_cap_admission_finishes_work_in_progress_and_starts_only_what_the_carbon_left_can_finish():
    # three teams, one tier at 1 kg per GPU: needs 2, 1, 3 GPUs; team 2 has run 3 ticks in full
    need = np.array([[[2], [1], [3]]])
    kg = np.array([[1.0]])
    streak, rank = np.array([[0, 0, 3]]), np.array([[0, 1, 2]])
    # 10 kg left, below 4 ticks of every need (24 kg): binding. Team 2 first (1 tick left: 3 kg),
    # then team 0 (8 kg of 7 left: not started), then team 1 (4 kg of 7 left)
    admitted, first = planner.cap_admission(need, kg, np.array([10.0]), streak, rank, horizon=4.0)
    assert admitted.tolist() == [[False, True, True]] and first.tolist() == [[False, False, True]]
    # 24 kg left covers 4 ticks of every need: nothing changes
    admitted, first = planner.cap_admission(need, kg, np.array([24.0]), streak, rank, horizon=4.0)
    assert admitted.all() and not first.any()
    # a team without need is never dropped
    admitted, _ = planner.cap_admission(np.array([[[0], [1], [3]]]), kg, np.array([0.0]), streak, rank)
    assert admitted.tolist() == [[True, False, False]]
    assert planner.served_streak(np.array([2, 1, 0]), np.array([[1], [2], [0]]), np.array([[1], [1], [0]])).tolist() == [3, 0, 0]


def test_the_batched_planner_is_the_planner_where_a_hard_cap_binds(monkeypatch):
    """Both paths call the one rule; on the hard-cap cluster it drops teams and serves work in progress first."""
    seen = {"dropped": 0, "first": 0}
    rule = planner.cap_admission

    def spy(need, *args, **kwargs):
        admitted, first = rule(need, *args, **kwargs)
        seen["dropped"] += int((~admitted & (need.sum(axis=2) > 0)).sum())
        seen["first"] += int(first.sum())
        return admitted, first

    monkeypatch.setattr(planner, "cap_admission", spy)
    assert assert_planners_agree(commons_arena.load_scenario(str(HARD_CAP)), num_envs=4, n_episodes=10, seed=3) == 40
    assert seen["dropped"] > 0 and seen["first"] > 0, seen


def test_under_a_soft_cap_the_planner_keeps_no_streak_and_plans_every_need():
    """Where the cap is soft the planner keeps no streak and plans every team's need."""
    config = commons_arena.load_scenario("standard")
    p = BatchPlanner(config, ALLOCATOR, 1)
    played = episodes(config, ALLOCATOR, [1], mixed_actor(config, ALLOCATOR, "need", 1))
    for obs in played[0][1][:5]:
        action = p.act(obs[None])
        assert np.array_equal(action, np.clip(p.plan(obs[None], p.last_estimate), 0, p.high))
    assert not p.streak.any()


@pytest.mark.parametrize("case", ["crisis", "duo_one_tier_hard", "broad:2"])
def test_the_batched_fair_planner_is_fair_planner_in_every_arena(case):
    # fair_planner: the whole inflation undone, then the same headroom share of the deflated need for every team
    assert assert_planners_agree(case_config(case), num_envs=6, n_episodes=15, seed=4, margin=0.0, headroom=0.5) == 40


@pytest.mark.parametrize("case", ["standard", "crisis", "duo_one_tier_hard", "broad:5"])
def test_a_planner_that_never_buys_its_headroom_is_the_reference_planner_that_never_does(case):
    assert assert_planners_agree(case_config(case), num_envs=6, n_episodes=15, seed=8, margin=0.0, headroom=0.5,
                                 heed_escalation=False, buy_headroom=False) == 40


def test_the_headroom_is_granted_from_gpus_online_but_never_bought():
    config = commons_arena.load_scenario("standard")
    played = episodes(config, ALLOCATOR, range(12), mixed_actor(config, ALLOCATOR, "need", 0))
    buys = BatchPlanner(config, ALLOCATOR, 2, margin=0.0, headroom=0.5)
    thrifty = BatchPlanner(config, ALLOCATOR, 2, margin=0.0, headroom=0.5, buy_headroom=False)
    T, fewer = len(config.gpu_tiers), 0
    for index, seeds, obs in schedule(played, 2, 0):
        buys.reset(seeds, index)
        thrifty.reset(seeds, index)
        bought, kept = buys.act(obs)[:, :T].sum(axis=1), thrifty.act(obs)[:, :T].sum(axis=1)
        np.testing.assert_array_equal(buys.last_estimate, thrifty.last_estimate)  # the same estimate, headroom included
        assert (kept <= bought).all() and (thrifty.last_headroom <= thrifty.last_estimate).all()
        fewer += int((kept < bought).sum())
    assert fewer > 0  # some tick bought headroom that the thrifty planner did not
    assert buys.unbought(np.arange(2)) is None and not buys.last_headroom.any()  # buying it, none is kept aside


@pytest.mark.parametrize("case", ["standard", "crisis", "broad:5"])
def test_an_unbought_headroom_comes_last_and_takes_no_gpu_a_need_would_have(case):
    """The plan of needs with a headroom never bought is the plan of the needs without it, plus at most the
    headroom on each team's own tier: the same purchases, every need's grant kept."""
    config = case_config(case)
    played = episodes(config, ALLOCATOR, range(6), mixed_actor(config, ALLOCATOR, "need", 0))
    obs = np.stack([o for _, steps in played for o in steps])
    N, T = len(config.teams), len(config.gpu_tiers)
    rng = np.random.default_rng(5)
    need = rng.integers(0, 6, size=(len(obs), N, T))
    headroom = np.minimum(rng.integers(0, 4, size=need.shape), need)
    p = BatchPlanner(config, ALLOCATOR, len(obs))
    with_room, without = p.plan(obs, need, headroom=headroom), p.plan(obs, need - headroom)
    np.testing.assert_array_equal(with_room[:, :T], without[:, :T])  # the headroom buys nothing
    extra = (with_room[:, T:] - without[:, T:]).reshape(-1, N, T)
    assert (extra >= 0).all() and (extra <= headroom).all()
    assert extra.any()  # some headroom found GPUs left online


@pytest.mark.parametrize("case", ["crisis", "broad:5"])
def test_the_batched_planner_heeding_no_escalation_is_the_planner_heeding_none(case):
    assert assert_planners_agree(case_config(case), num_envs=6, n_episodes=15, seed=6, margin=0.0, headroom=0.5,
                                 heed_escalation=False) == 40
