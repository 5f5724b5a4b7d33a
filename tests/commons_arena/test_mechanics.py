"""Each rule of the game on hand-computed cases: first the list-based reference's pure functions
(``tests/reference/mechanics``, the spec the batched core is held to), then the same rules observed
through the environment."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commons_arena import observation_layout
from commons_arena.scenario import GpuTierConfig, ShockSpec
from tests.reference.mechanics import carbon, grants, market, shocks, social
from tests.reference.mechanics.jobs import (
    DONE,
    MISSED,
    PENDING,
    Job,
    edf_order,
    fitting_tiers,
    run_team_jobs,
    true_need,
)

TIERS = (
    GpuTierConfig(name="small", owned=4, memory_gb=16.0, speed=1.0, op_cost=0.0, power_kw=1.0),
    GpuTierConfig(name="medium", owned=4, memory_gb=40.0, speed=1.5, op_cost=0.0, power_kw=1.0),
    GpuTierConfig(name="large", owned=4, memory_gb=80.0, speed=2.5, op_cost=0.0, power_kw=1.0),
)
SPEEDS = np.array([t.speed for t in TIERS])


def job(name: str, gpus: int = 1, mem: float = 0.0, work: float = 1.0, arrival: int = 0, deadline: int = 5,
        value: float = 1.0, priority: int = 1, deps: tuple[int, ...] = ()) -> Job:
    return Job(id=name, gpus=gpus, min_memory_gb=mem, work=work, arrival=arrival, deadline=deadline, value=value,
               priority=priority, deps=deps, fits=fitting_tiers(mem, TIERS), remaining=work)


def run(jobs: list[Job], grant: list[int], t: int):
    return run_team_jobs(jobs, edf_order(jobs), np.array(grant), SPEEDS, t)


# =========================================================================== jobs


def test_fitting_tiers_smallest_memory_first() -> None:
    assert fitting_tiers(0.0, TIERS) == (0, 1, 2)
    assert fitting_tiers(16.0, TIERS) == (0, 1, 2)
    assert fitting_tiers(16.5, TIERS) == (1, 2)
    assert fitting_tiers(80.0, TIERS) == (2,)
    assert fitting_tiers(81.0, TIERS) == ()
    shuffled = (TIERS[2], TIERS[0], TIERS[1])
    assert fitting_tiers(20.0, shuffled) == (2, 0)  # medium (index 2), then large (index 0)


def test_edf_order_deadline_then_priority_then_creation() -> None:
    jobs = [job("p", deadline=5), job("q", deadline=3), job("r", deadline=3, priority=2), job("s", deadline=3)]
    assert edf_order(jobs) == [2, 1, 3, 0]


def test_edf_runs_earliest_deadline_first_under_scarcity() -> None:
    late, early = job("late", gpus=2, work=5.0, deadline=4), job("early", gpus=2, work=5.0, deadline=2)
    result = run([late, early], [2, 0, 0], t=0)
    assert early.remaining == 3.0 and late.remaining == 5.0
    assert result.need.tolist() == [4, 0, 0] and result.used.tolist() == [2, 0, 0]
    assert result.ready_gpus == 4 and result.placed_gpus == 2
    assert result.satisfaction == 0.5 and result.starved


def test_memory_fit() -> None:
    big = job("big", mem=40.0, work=3.0)
    result = run([big], [4, 0, 0], t=0)  # plenty of small GPUs, none with 40 GB
    assert big.remaining == 3.0 and result.used.tolist() == [0, 0, 0]
    assert result.need.tolist() == [0, 1, 0] and result.starved
    result = run([big], [4, 0, 1], t=1)  # large fits too
    assert big.remaining == pytest.approx(0.5) and result.used.tolist() == [0, 0, 1]


def test_gang_placement_on_one_tier() -> None:
    gang = job("gang", gpus=3, work=9.0)
    result = run([gang], [2, 2, 0], t=0)  # 4 GPUs granted, but never 3 on one tier
    assert gang.remaining == 9.0 and result.used.sum() == 0 and result.starved
    result = run([gang], [2, 3, 0], t=1)  # small too few: the 3 run together on medium
    assert gang.remaining == pytest.approx(9.0 - 3 * 1.5) and result.used.tolist() == [0, 3, 0]
    assert not result.starved and result.satisfaction == 1.0


def test_smallest_fitting_tier_with_room() -> None:
    mid = job("mid", mem=20.0, work=10.0)
    assert run([mid], [4, 1, 1], t=0).used.tolist() == [0, 1, 0]  # medium, not large
    assert mid.remaining == pytest.approx(8.5)
    assert run([mid], [4, 0, 1], t=1).used.tolist() == [0, 0, 1]  # medium full: large
    assert mid.remaining == pytest.approx(6.0)
    # two jobs: the more urgent takes the small GPU, the other moves up a tier
    a, b = job("a", work=10.0, deadline=2), job("b", work=10.0, deadline=3)
    assert run([b, a], [1, 1, 0], t=0).used.tolist() == [1, 1, 0]
    assert a.remaining == 9.0 and b.remaining == 8.5


def test_dependency_unlocks_next_tick() -> None:
    first, second = job("first", work=1.0), job("second", work=1.0, deps=(0,))
    jobs = [first, second]
    assert true_need(jobs, edf_order(jobs), 0, 3).tolist() == [1, 0, 0]  # second is not ready
    r0 = run(jobs, [2, 0, 0], t=0)
    assert first.status == DONE and first.done_tick == 0
    assert second.status == PENDING and second.remaining == 1.0  # a free GPU, but not ready yet
    assert [j.id for j in r0.completed] == ["first"] and r0.used.tolist() == [1, 0, 0]
    r1 = run(jobs, [2, 0, 0], t=1)
    assert second.status == DONE and second.done_tick == 1 and [j.id for j in r1.completed] == ["second"]


def test_completion_pays_once() -> None:
    paid = job("paid", work=2.0, value=7.5)
    assert run([paid], [1, 0, 0], t=0).completed == []
    r1 = run([paid], [1, 0, 0], t=1)
    assert r1.completed == [paid] and paid.status == DONE and paid.value == 7.5
    r2 = run([paid], [1, 0, 0], t=2)  # done jobs neither run nor pay again
    assert r2.completed == [] and r2.used.sum() == 0 and r2.ready_gpus == 0


def test_miss_at_deadline() -> None:
    slow = job("slow", work=5.0, deadline=2)
    assert run([slow], [0, 0, 0], t=0).missed == [] and run([slow], [0, 0, 0], t=1).missed == []
    assert slow.status == PENDING
    r2 = run([slow], [0, 0, 0], t=2)
    assert r2.missed == [slow] and slow.status == MISSED
    assert run([slow], [4, 4, 4], t=3).missed == []  # missed once only, never runs again


def test_completing_on_the_deadline_tick_is_in_time() -> None:
    tight = job("tight", work=1.0, deadline=0)
    result = run([tight], [1, 0, 0], t=0)
    assert result.completed == [tight] and result.missed == [] and tight.status == DONE


def test_missed_dependency_blocks_dependant_until_its_deadline() -> None:
    root, leaf = job("root", work=5.0, deadline=1), job("leaf", work=1.0, deadline=3, deps=(0,))
    jobs = [root, leaf]
    run(jobs, [0, 0, 0], t=0)
    assert run(jobs, [0, 0, 0], t=1).missed == [root]
    assert run(jobs, [4, 0, 0], t=2).used.sum() == 0  # never ready
    assert run(jobs, [4, 0, 0], t=3).missed == [leaf]


def test_not_arrived_jobs_neither_run_nor_count() -> None:
    future = job("future", arrival=2, work=1.0)
    result = run([future], [1, 0, 0], t=0)
    assert result.need.sum() == 0 and result.used.sum() == 0 and not result.starved
    assert result.satisfaction == 1.0


def test_fractional_work() -> None:
    odd = job("odd", work=1.2)
    run([odd], [1, 0, 0], t=0)
    assert odd.remaining == pytest.approx(0.2) and odd.status == PENDING
    assert run([odd], [1, 0, 0], t=1).completed == [odd] and odd.remaining == 0.0


# =========================================================================== market


def test_price_grid() -> None:
    grid = market.price_grid(np.array([6.0, 10.0]), 3)
    np.testing.assert_allclose(grid, [[0.0, 3.0, 6.0], [0.0, 5.0, 10.0]])


def test_offer_cut_to_inventory_and_priced() -> None:
    grid = market.price_grid(np.array([6.0, 10.0]), 11)
    qty, price, cut = market.post_offer(np.array([5, 1]), np.array([5, 10]), np.array([2, 3]), grid, 1.0)
    assert qty.tolist() == [2, 1] and cut == 3
    np.testing.assert_allclose(price, [3.0, 10.0])
    qty, price, cut = market.post_offer(np.array([1, 1]), np.array([5, 10]), np.array([2, 3]), grid, 2.0)
    assert qty.tolist() == [1, 1] and cut == 0
    np.testing.assert_allclose(price, [6.0, 20.0])  # crisis multiplier


def test_purchase_cut_to_offer_then_budget_most_expensive_first() -> None:
    offer, price = np.array([2, 2, 2]), np.array([1.0, 4.0, 9.0])
    buys, cost, offer_cut, budget_cut = market.repair_purchases(np.array([3, 2, 1]), offer, price, 10.0)
    # offer: [2, 2, 1] (1 cut), cost 2 + 8 + 9 = 19 > 10: drop the 9 → cost 10 fits
    assert buys.tolist() == [2, 2, 0] and (offer_cut, budget_cut) == (1, 1) and cost == 10.0
    buys, _, offer_cut, budget_cut = market.repair_purchases(np.array([3, 2, 1]), offer, price, 5.0)
    # 19 → drop 9 (10) → drop a 4 (6) → drop a 4 (2): the cheapest tier is kept
    assert buys.tolist() == [2, 0, 0] and (offer_cut, budget_cut) == (1, 3)
    buys, _, _, budget_cut = market.repair_purchases(np.array([1, 1, 0]), offer, np.array([3.0, 3.0, 1.0]), 3.0)
    assert buys.tolist() == [1, 0, 0] and budget_cut == 1  # equal prices: the higher tier goes first
    buys, _, offer_cut, budget_cut = market.repair_purchases(np.array([1, 1, 1]), offer, price, 14.0)
    assert buys.tolist() == [1, 1, 1] and offer_cut == budget_cut == 0  # exactly on budget


def test_broker_profit() -> None:
    assert market.broker_profit(np.array([2, 1]), np.array([3.0, 5.0]), np.array([1.0, 2.0])) == 7.0
    assert market.broker_profit(np.array([1, 0]), np.array([0.5, 5.0]), np.array([1.0, 2.0])) == -0.5


@settings(max_examples=150, deadline=None, database=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6), st.floats(0, 20)), min_size=1, max_size=4),
       st.floats(0, 100))
def test_purchase_repair_properties(rows, budget) -> None:
    want = np.array([r[0] for r in rows])
    offer = np.array([r[1] for r in rows])
    price = np.array([r[2] for r in rows])
    buys, _, offer_cut, budget_cut = market.repair_purchases(want, offer, price, budget)
    assert (buys >= 0).all() and (buys <= np.minimum(want, offer)).all()
    assert float(buys @ price) <= budget + 1e-6
    assert offer_cut + budget_cut == int((want - buys).sum())


# =========================================================================== grants


def test_grant_repair_proportional_largest_remainder() -> None:
    requested = np.array([[3, 1], [2, 0], [2, 1]])
    fixed, cut = grants.repair_grants(requested, np.array([4, 5]))
    # tier 0: 7 asked of 4: shares 12/7, 8/7, 8/7 = 1.71, 1.14, 1.14 → floors 1, 1, 1 and
    # the one left goes to the largest remainder (team 0). Tier 1 fits: untouched.
    assert fixed.tolist() == [[2, 1], [1, 0], [1, 1]] and cut == 3


def test_grant_repair_ties_go_to_the_earlier_team() -> None:
    fixed, cut = grants.repair_grants(np.array([[1], [1], [1]]), np.array([2]))
    assert fixed[:, 0].tolist() == [1, 1, 0] and cut == 1


def test_grant_repair_other_case() -> None:
    fixed, cut = grants.repair_grants(np.array([[5], [3], [0]]), np.array([5]))
    # shares 25/8 = 3.125, 15/8 = 1.875, 0 → floors 3, 1, 0; the left GPU goes to team 1 (.875)
    assert fixed[:, 0].tolist() == [3, 2, 0] and cut == 3
    fixed, cut = grants.repair_grants(np.array([[4], [2]]), np.array([0]))
    assert fixed[:, 0].tolist() == [0, 0] and cut == 6


@settings(max_examples=200, deadline=None, database=None)
@given(st.integers(1, 8).flatmap(lambda n: st.tuples(
    st.lists(st.lists(st.integers(0, 12), min_size=3, max_size=3), min_size=n, max_size=n),
    st.lists(st.integers(0, 15), min_size=3, max_size=3))))
def test_grant_repair_properties(case) -> None:
    requested, available = np.array(case[0]), np.array(case[1])
    fixed, cut = grants.repair_grants(requested, available)
    assert (fixed >= 0).all() and (fixed <= requested).all()
    np.testing.assert_array_equal(fixed.sum(axis=0), np.minimum(requested.sum(axis=0), available))
    assert cut == int((requested - fixed).sum())
    # proportional: each team keeps floor or ceil of its exact share
    for tier in np.flatnonzero(requested.sum(axis=0) > available):
        share = requested[:, tier] * available[tier] / requested[:, tier].sum()
        assert ((fixed[:, tier] == np.floor(share)) | (fixed[:, tier] == np.ceil(share))).all()


# =========================================================================== carbon


def test_intensity_profile_repeats_its_last_value() -> None:
    profile = (0.4, 0.5)
    assert [carbon.intensity_at(profile, t) for t in range(4)] == [0.4, 0.5, 0.5, 0.5]
    assert carbon.intensity_at(profile, 7, multiplier=2.0) == 1.0
    np.testing.assert_allclose(carbon.forecast(profile, 0, 3), [0.4, 0.5, 0.5])
    np.testing.assert_allclose(carbon.forecast((0.1, 0.2, 0.3), 1, 4), [0.2, 0.3, 0.3, 0.3])


def test_emissions() -> None:
    assert carbon.emissions(np.array([1, 2]), np.array([0.3, 0.5]), 0.4) == pytest.approx(0.52)


def test_hard_cap_cuts_most_power_hungry_tier_last_team_first() -> None:
    power = np.array([0.3, 0.5, 0.7])
    granted = np.array([[2, 1, 1], [1, 1, 1]])  # full use: 3 x 0.3 + 2 x 0.5 + 2 x 0.7 = 3.3 kg
    fixed, cut = carbon.cut_for_hard_cap(granted, power, 1.0, 2.0)
    # 1.3 kg too much: take large GPUs (0.7 each) from team 1, then team 0
    assert fixed.tolist() == [[2, 1, 0], [1, 1, 0]] and cut == 2
    fixed, cut = carbon.cut_for_hard_cap(granted, power, 1.0, 0.5)
    # 2.8 too much: both large (1.4), both medium (1.0), then small from team 1 then team 0
    assert fixed.tolist() == [[1, 0, 0], [0, 0, 0]] and cut == 6
    assert carbon.emissions(fixed.sum(axis=0), power, 1.0) <= 0.5
    fixed, cut = carbon.cut_for_hard_cap(granted, power, 1.0, 5.0)
    assert fixed.tolist() == granted.tolist() and cut == 0
    fixed, cut = carbon.cut_for_hard_cap(granted, power, 1.0, -3.0)  # already over: no headroom
    assert fixed.sum() == 0 and cut == 7


def test_hard_cap_ties_take_the_higher_tier_and_spare_zero_power() -> None:
    fixed, cut = carbon.cut_for_hard_cap(np.array([[1, 1, 2]]), np.array([0.5, 0.5, 0.0]), 1.0, 0.5)
    assert fixed.tolist() == [[1, 0, 2]] and cut == 1  # tier 1 before tier 0; free GPUs never cut


def test_soft_cap_charges_only_the_new_excess() -> None:
    assert carbon.over_cap_increment(5.0, 9.0, 10.0) == 0.0
    assert carbon.over_cap_increment(8.0, 12.0, 10.0) == 2.0
    assert carbon.over_cap_increment(12.0, 15.0, 10.0) == 3.0
    assert carbon.over_cap_increment(10.0, 10.0, 10.0) == 0.0


@settings(max_examples=150, deadline=None, database=None)
@given(st.lists(st.lists(st.integers(0, 5), min_size=3, max_size=3), min_size=1, max_size=5),
       st.floats(0, 3), st.floats(-5, 20))
def test_hard_cap_properties(rows, intensity, headroom) -> None:
    power = np.array([0.3, 0.5, 0.7])
    granted = np.array(rows)
    fixed, cut = carbon.cut_for_hard_cap(granted, power, intensity, headroom)
    assert (fixed >= 0).all() and (fixed <= granted).all() and cut == int((granted - fixed).sum())
    assert carbon.emissions(fixed.sum(axis=0), power, intensity) <= max(headroom, 0.0) + 1e-6
    if cut:  # minimal: giving back the last GPU cut would break the cap
        diff = granted - fixed
        lightest = min(t for t in range(3) if diff[:, t].any())
        assert carbon.emissions(fixed.sum(axis=0), power, intensity) + power[lightest] * intensity > max(
            headroom, 0.0) - 1e-6


# =========================================================================== shocks


def _spec(**kw) -> ShockSpec:
    return ShockSpec.model_validate(kw)


def test_due_shocks_scheduled_and_random() -> None:
    rng = np.random.default_rng(0)
    at2, never, always = _spec(kind="grid_spike", tick=2), _spec(kind="grid_spike", rate=0.0), \
        _spec(kind="market_crisis", rate=1.0)
    assert shocks.due_shocks((at2, never, always), 1, rng) == [always]
    assert shocks.due_shocks((at2, never, always), 2, rng) == [at2, always]


def test_effects_last_their_duration_and_combine() -> None:
    inc = _spec(kind="production_incident", tick=0, tier="small", gpus_offline=2)
    e1 = shocks.Effect(spec=inc, tier_index=0, until=3)
    e2 = shocks.Effect(spec=inc, tier_index=0, until=1)
    e3 = shocks.Effect(spec=_spec(kind="market_crisis", tick=0, price_multiplier=2.0, inventory_factor=0.5),
                       tier_index=-1, until=2)
    e4 = shocks.Effect(spec=_spec(kind="market_crisis", tick=0, price_multiplier=1.5, inventory_factor=0.5),
                       tier_index=-1, until=2)
    e5 = shocks.Effect(spec=_spec(kind="grid_spike", tick=0, intensity_multiplier=3.0), tier_index=-1, until=2)
    assert shocks.active([e1, e2, e3], 2) == [e1, e3]
    assert shocks.offline_gpus([e1, e2], 2).tolist() == [4, 0]
    assert shocks.price_multiplier([e3, e4]) == 3.0 and shocks.inventory_factor([e3, e4]) == 0.25
    assert shocks.intensity_multiplier([e5, e3]) == 3.0
    assert shocks.price_multiplier([]) == shocks.inventory_factor([]) == shocks.intensity_multiplier([]) == 1.0


# =========================================================================== social


def test_starvation_streak_and_reveal() -> None:
    streak, revealed = np.array([0, 1, 3]), np.array([False, False, True])
    social.update_starvation(streak, np.array([True, True, False]), revealed, reveal_after=2)
    assert streak.tolist() == [1, 2, 0] and revealed.tolist() == [False, True, True]  # reveal is for good


def test_escalations_judged_on_last_tick() -> None:
    justified, unjustified = social.judge_escalations(np.array([True, True, False]), np.array([True, False, True]))
    assert justified == [True, False, False] and unjustified == [False, True, False]


def test_exposed_bluffs_with_tolerance() -> None:
    declared = np.array([[3, 0], [2, 0], [0, 0], [5, 0], [1, 0]])
    need = np.array([[2, 0], [2, 0], [0, 0], [2, 2], [0, 0]])
    # 3 > 2 x 1.25; 2 ≤ 2.5; 0 ≤ 0; 5 = 4 x 1.25 is within tolerance; 1 > 0
    assert social.exposed_bluffs(declared, need, 0.25).tolist() == [True, False, False, False, True]
    assert social.exposed_bluffs(declared, need, 0.0).tolist() == [True, False, False, True, True]


def test_credibility_floor_at_zero() -> None:
    cred = np.array([0.15, 1.0, 0.0])
    lost = social.lose_credibility(cred, np.array([0.2, 0.1, 0.3]))
    np.testing.assert_allclose(cred, [0.0, 0.9, 0.0])
    np.testing.assert_allclose(lost, [0.15, 0.1, 0.0])  # what was actually lost


# =========================================================================== through the env


def acts(env, buy=(0, 0), grant=((0, 0), (0, 0)), declare=((0, 0), (0, 0)), stance=(0, 0), offer=(0, 0),
         levels=(0, 0)) -> dict[str, np.ndarray]:
    """Actions for the tiny scenario (teams search, robotics; tiers small, large)."""
    out = {"allocator": np.array([*buy, *np.ravel(grant)]), "broker": np.array([*offer, *levels])}
    for i, team in enumerate(env.config.team_names):
        out[team] = np.array([*declare[i], stance[i]])
    return out


def view(env, obs, agent):
    return observation_layout(env.config, agent).view(obs[agent])


def test_env_dependency_unlocks_next_tick(tiny, make_env) -> None:
    tiny["teams"][0]["jobs"] = [
        {"id": "a", "gpus": 1, "work": 1.0, "arrival": 0, "deadline": 5, "value": 3.0},
        {"id": "c", "gpus": 1, "work": 1.0, "arrival": 0, "deadline": 5, "value": 4.0, "depends_on": ["a"]},
    ]
    env = make_env(tiny)
    env.reset(seed=0)
    _, _, _, _, i0 = env.step(acts(env, grant=((2, 0), (0, 0))))
    assert i0["search"]["reward_terms"]["job_value"] == 3.0
    assert i0["allocator"]["reward_terms"]["idle"] == -0.5  # c could not use the second GPU
    obs, _, _, _, i1 = env.step(acts(env, grant=((2, 0), (0, 0))))
    assert i1["search"]["reward_terms"]["job_value"] == 4.0
    assert [j.done_tick for j in env.hidden_state().jobs[0]] == [0, 1]


def test_env_market_offer_then_purchase(tiny, make_env) -> None:
    env = make_env(tiny)
    env.reset(seed=0)
    # tick 0: nothing on offer yet; the broker posts 2 small at level 5 (5.0), 1 large at level 5 (10.0)
    obs, rew, _, _, info = env.step(acts(env, buy=(1, 1), offer=(2, 1), levels=(5, 5)))
    assert info["allocator"]["repairs"]["buy_over_offer"] == 2 and env.hidden_state().budget == 20.0
    a = view(env, obs, "allocator")
    assert a["offer_qty"].tolist() == [2, 1] and a["offer_price"].tolist() == [5.0, 10.0]
    assert view(env, obs, "search")["offer_price"].tolist() == [5.0, 10.0]  # public
    # tick 1: buy 1 + 1 = 15; grant them (with the owned ones) to robotics
    obs, rew, _, _, info = env.step(acts(env, buy=(1, 1), grant=((0, 0), (0, 2))))
    assert env.hidden_state().budget == 5.0
    assert info["allocator"]["repairs"]["grant_over_capacity"] == 0  # 1 owned + 1 bought large
    b = view(env, obs, "broker")
    assert b["last_sold"].tolist() == [1, 1] and b["last_price"].tolist() == [5.0, 10.0]
    assert rew["broker"] == (5.0 - 1.0) + (10.0 - 3.0)
    assert view(env, obs, "allocator")["budget"][0] == 5.0


def test_env_purchases_cut_to_offer_then_budget(tiny, make_env) -> None:
    env = make_env(tiny)
    env.reset(seed=0)
    env.step(acts(env, offer=(1, 1), levels=(5, 5)))  # posts 1 small @5, 1 large @10
    _, _, _, _, info = env.step(acts(env, buy=(2, 1), offer=(2, 1), levels=(10, 10)))
    assert info["allocator"]["repairs"]["buy_over_offer"] == 1
    assert info["allocator"]["repairs"]["buy_over_budget"] == 0
    assert env.hidden_state().budget == 5.0  # 20 - 5 - 10
    # now 2 small @10 and 1 large @20 on offer, 5 left: 40 → 20 (large out) → 10 → 0
    _, _, _, _, info = env.step(acts(env, buy=(2, 1)))
    assert info["allocator"]["repairs"]["buy_over_budget"] == 3
    assert info["allocator"]["reward_terms"]["invalid"] == -3.0
    assert env.hidden_state().budget == 5.0
    assert env.hidden_state().last_sold.tolist() == [0, 0]


def test_env_grant_repair(tiny, make_env) -> None:
    env = make_env(tiny)
    env.reset(seed=0)
    obs, _, _, _, info = env.step(acts(env, grant=((3, 0), (2, 0))))
    # 5 small asked of 2 owned: shares 1.2, 0.8 → floors 1, 0; the left GPU goes to robotics (.8)
    assert view(env, obs, "search")["last_grant"].tolist() == [1, 0]
    assert view(env, obs, "robotics")["last_grant"].tolist() == [1, 0]
    assert info["allocator"]["repairs"]["grant_over_capacity"] == 3
    assert info["allocator"]["reward_terms"]["invalid"] == -3.0


def test_env_hard_carbon_cap(tiny, make_env) -> None:
    tiny["carbon"] = {"cap_kg": 2.5, "mode": "hard", "intensity": [1.0]}
    env = make_env(tiny)
    env.reset(seed=0)
    # full use would emit 2 x 1 kW + 1 x 2 kW = 4 kg; 2.5 allowed: the large GPU goes
    obs, _, _, _, info = env.step(acts(env, grant=((2, 0), (0, 1))))
    assert info["allocator"]["repairs"]["grant_over_carbon_cap"] == 1
    assert info["allocator"]["reward_terms"]["invalid"] == -1.0  # a repaired unit like any other
    assert view(env, obs, "robotics")["last_grant"].tolist() == [0, 0]
    assert view(env, obs, "search")["last_grant"].tolist() == [2, 0]
    assert env.hidden_state().carbon_used == 1.0  # only one small GPU was busy
    # 1.5 kg left: 2 small would be 2 kg, one is cut
    obs, _, _, _, info = env.step(acts(env, grant=((2, 0), (0, 0))))
    assert info["allocator"]["repairs"]["grant_over_carbon_cap"] == 1
    assert view(env, obs, "search")["last_grant"].tolist() == [1, 0]
    assert env.hidden_state().carbon_used == 2.0
    assert info["search"]["reward_terms"]["job_value"] == 10.0
    assert info["allocator"]["reward_terms"]["carbon"] == 0.0  # a hard cap is never exceeded


def test_env_intensity_profile_and_grid_spike(tiny, make_env) -> None:
    tiny["teams"][0]["jobs"][0].update(work=10.0, deadline=5)
    tiny["carbon"]["intensity"] = [1.0, 3.0]
    tiny["shocks"] = [{"kind": "grid_spike", "tick": 2, "duration": 2, "intensity_multiplier": 2.0}]
    env = make_env(tiny)
    obs, _ = env.reset(seed=0)
    assert view(env, obs, "allocator")["intensity_forecast"].tolist() == [1.0, 3.0, 3.0]  # last value repeats
    used = []
    active = []
    for _ in range(5):
        obs, *_ = env.step(acts(env, grant=((1, 0), (0, 0))))  # one busy 1 kW GPU each tick
        used.append(env.hidden_state().carbon_used)
        active.append(int(view(env, obs, "allocator")["shocks_active"][4]))
    # intensity per tick: 1, 3, 3 x 2, 3 x 2, 3 (spike on ticks 2-3)
    assert used == pytest.approx([1.0, 4.0, 10.0, 16.0, 19.0])
    # the spike fires during tick 2: the observation after tick 2 (for tick 3) shows it active
    assert active == [0, 0, 1, 0, 0]


def test_env_starvation_reveal(tiny, make_env) -> None:
    env = make_env(tiny)
    env.reset(seed=0)
    obs, *_ = env.step(acts(env))  # no grants: both starve
    a = view(env, obs, "allocator")
    assert view(env, obs, "search")["starved_streak"][0] == 1
    assert a["revealed"].tolist() == [0, 0] and a["revealed_need"].sum() == 0
    obs, *_ = env.step(acts(env))
    a = view(env, obs, "allocator")
    assert view(env, obs, "robotics")["starved_streak"][0] == 2
    assert a["revealed"].tolist() == [1, 1]
    assert a["revealed_need"].tolist() == [[1, 0], [0, 1]]
    obs, *_ = env.step(acts(env, grant=((1, 0), (0, 1))))  # fed: the streak resets, the reveal stays
    assert view(env, obs, "search")["starved_streak"][0] == 0
    assert view(env, obs, "allocator")["revealed"].tolist() == [1, 1]


def test_env_reveal_needs_consecutive_ticks(tiny, make_env) -> None:
    tiny["teams"][0]["jobs"][0].update(work=10.0, deadline=5)
    env = make_env(tiny)
    env.reset(seed=0)
    for grant in (0, 1, 0, 1):  # starved every other tick: never 2 in a row
        obs, *_ = env.step(acts(env, grant=((grant, 0), (0, 1))))
    assert view(env, obs, "allocator")["revealed"][0] == 0


def test_env_justified_and_unjustified_escalation(tiny, make_env) -> None:
    env = make_env(tiny)
    env.reset(seed=0)
    # tick 0: escalating has no grant to be about: nothing happens
    obs, _, _, _, info = env.step(acts(env, grant=((1, 0), (0, 0)), stance=(2, 2)))
    assert view(env, obs, "allocator")["escalations"].tolist() == [0, 0]
    assert info["allocator"]["reward_terms"]["escalation"] == 0.0
    # tick 1: search was fed at tick 0 (unjustified), robotics starved (justified)
    obs, rew, _, _, info = env.step(acts(env, grant=((1, 0), (0, 1)), stance=(2, 2)))
    a = view(env, obs, "allocator")
    assert a["escalations"].tolist() == [1, 1]
    assert a["stance"].tolist() == [[0, 0, 1], [0, 0, 1]]
    assert a["credibility"].tolist() == pytest.approx([0.9, 1.0])
    assert info["allocator"]["reward_terms"]["escalation"] == pytest.approx(-2.0 * 1.5)  # weight x pressure
    assert info["search"]["reward_terms"]["credibility"] == pytest.approx(-10.0 * 0.1)
    assert info["robotics"]["reward_terms"]["credibility"] == 0.0
    assert view(env, obs, "search")["credibility"][0] == pytest.approx(0.9)


def test_env_credibility_floor(tiny, make_env) -> None:
    tiny["credibility"] = {"unjustified_escalation_loss": 0.7}
    tiny["teams"][0]["jobs"][0].update(work=10.0, deadline=5)  # search keeps running, never starved
    env = make_env(tiny)
    env.reset(seed=0)
    env.step(acts(env, grant=((1, 0), (0, 1))))
    _, _, _, _, i1 = env.step(acts(env, grant=((1, 0), (0, 1)), stance=(2, 0)))
    _, _, _, _, i2 = env.step(acts(env, stance=(2, 0)))
    assert env.hidden_state().credibility.tolist() == pytest.approx([0.0, 1.0])
    assert i1["search"]["reward_terms"]["credibility"] == pytest.approx(-7.0)
    assert i2["search"]["reward_terms"]["credibility"] == pytest.approx(-3.0)  # only 0.3 was left


def test_env_audit_exposes_bluffs_beyond_tolerance(tiny, make_env) -> None:
    tiny["credibility"] = {"audit_tolerance": 0.5, "bluff_loss": 0.2}
    tiny["shocks"] = [{"kind": "compliance_audit", "tick": 1}]
    env = make_env(tiny)
    env.reset(seed=0)
    env.step(acts(env, declare=((3, 0), (0, 1))))  # declarations for tick 1
    obs, _, _, _, info = env.step(acts(env))
    # need at tick 1: search 1 small (3 > 1.5: exposed), robotics 1 large (1 ≤ 1.5)
    assert env.hidden_state().credibility.tolist() == pytest.approx([0.8, 1.0])
    assert info["search"]["reward_terms"]["credibility"] == pytest.approx(-2.0)
    assert info["robotics"]["reward_terms"]["credibility"] == 0.0
    assert info["allocator"]["events"] == [{"tick": 1, "kind": "compliance_audit", "until": 1}]
    assert view(env, obs, "allocator")["shocks_seen"].tolist() == [1, 0, 0, 0, 0]
    while env.agents:
        _, _, _, _, info = env.step(acts(env))
    assert info["allocator"]["episode"]["exposed_bluffs"] == 1


def test_env_no_audit_no_exposure(tiny, make_env) -> None:
    env = make_env(tiny)
    env.reset(seed=0)
    env.step(acts(env, declare=((4, 1), (4, 1))))
    env.step(acts(env))
    assert env.hidden_state().credibility.tolist() == [1.0, 1.0]


def test_env_production_incident(tiny, make_env) -> None:
    tiny["shocks"] = [{"kind": "production_incident", "tick": 1, "tier": "small", "gpus_offline": 2, "duration": 2,
                       "job": {"gpus": 1, "min_memory_gb": 40.0, "work": 1.0, "slack": 2, "value": 5.0}}]
    env = make_env(tiny)
    env.reset(seed=0)
    online = []
    obs, *_ = env.step(acts(env))
    online.append(view(env, obs, "allocator")["online"].tolist())
    obs, _, _, _, info = env.step(acts(env, grant=((1, 0), (0, 0))))  # the small GPU is gone this tick
    online.append(view(env, obs, "allocator")["online"].tolist())
    assert info["allocator"]["repairs"]["grant_over_capacity"] == 1
    assert info["allocator"]["events"] == [{"tick": 1, "kind": "production_incident", "until": 2,
                                            "team": "robotics", "job": "production_incident_1",
                                            "tier": "small", "gpus_offline": 2}]
    injected = env.hidden_state().jobs[1][-1]
    assert (injected.id, injected.arrival, injected.deadline, injected.value) == ("production_incident_1", 1, 3, 5.0)
    r = view(env, obs, "robotics")
    assert r["jobs"][:, 5].tolist()[:2] == [5.0, 20.0]  # the urgent job (deadline 3) comes first
    obs, *_ = env.step(acts(env))
    online.append(view(env, obs, "allocator")["online"].tolist())
    assert online == [[2, 1], [0, 1], [2, 1]]  # seen for the next tick: offline on ticks 1-2


def test_env_customer_escalation_injects_search_job(tiny, make_env) -> None:
    tiny["shocks"] = [{"kind": "customer_escalation", "tick": 0,
                       "job": {"gpus": 2, "work": 2.0, "slack": 0, "value": 30.0}}]
    env = make_env(tiny)
    env.reset(seed=0)
    _, _, _, _, info = env.step(acts(env, grant=((2, 0), (0, 0))))
    # the injected job (deadline 0) takes both GPUs before "a" (deadline 3) and completes
    assert info["search"]["reward_terms"]["job_value"] == 30.0
    jobs = env.hidden_state().jobs[0]
    assert [(j.id, j.status) for j in jobs] == [("a", PENDING), ("customer_escalation_1", DONE)]
    assert jobs[0].remaining == 2.0
    assert info["allocator"]["events"][0]["team"] == "search"


def test_env_market_crisis(tiny, make_env) -> None:
    tiny["shocks"] = [{"kind": "market_crisis", "tick": 0, "duration": 2, "price_multiplier": 2.0,
                       "inventory_factor": 0.5}]
    env = make_env(tiny)
    env.reset(seed=0)
    # the offer of tick 0 was posted before the crisis fired: normal
    obs, rew, _, _, info = env.step(acts(env, offer=(2, 1), levels=(5, 5)))
    b = view(env, obs, "broker")
    assert b["offer_qty"].tolist() == [2, 1] and b["offer_price"].tolist() == [5.0, 10.0]
    assert b["crisis"][0] == 1 and b["inventory"].tolist() == [1, 0]  # what it may post now
    # tick 1, crisis on: the same post is cut to the shrunken inventory, prices doubled
    obs, rew, _, _, info = env.step(acts(env, offer=(2, 1), levels=(5, 5)))
    b = view(env, obs, "broker")
    assert b["offer_qty"].tolist() == [1, 0] and b["offer_price"].tolist() == [10.0, 20.0]
    assert info["allocator"]["repairs"]["offer_over_inventory"] == 2
    assert info["broker"]["reward_terms"]["invalid"] == pytest.approx(-0.1 * 2)
    assert b["crisis"][0] == 0 and b["inventory"].tolist() == [2, 1]  # over after tick 1
