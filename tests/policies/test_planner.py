"""The observation-only ``planner`` (issue 8): what it may read, how it estimates inflation,
how it plans.

Its playing strength is measured by ``commons-arena evaluate`` / the checkpoint benchmark,
not here; these tests pin behaviour that could break silently.
"""

from __future__ import annotations

import numpy as np
import pytest

import commons_arena
from commons_arena.enums import ALLOCATOR, ShockKind
from commons_arena.scenario import scenario_from_dict
from commons_arena.spaces import observation_layout
from policies import Population, make_policy, run_episode
from policies.limits import PRICE_SLACK
from policies.planner import BLUFF_GRID, deflate, inflate
from policies.registry import policy_spec
from policies.teams import ARCHETYPE_PROFILES
from tests.reference.planner import InflationBelief


def observation(config, **fields) -> np.ndarray:
    layout = observation_layout(config, ALLOCATOR)
    obs = np.zeros(layout.size, dtype=np.float32)
    view = layout.view(obs)
    view["owned"][...] = view["online"][...] = [t.owned for t in config.gpu_tiers]
    view["budget"][...] = config.budget
    for name, value in fields.items():
        view[name][...] = value
    return obs


def split(config, action):
    T = len(config.gpu_tiers)
    return action[:T], action[T:].reshape(len(config.teams), T)


@pytest.mark.parametrize("bluff", sorted({a.bluff for a in ARCHETYPE_PROFILES.values()}))
def test_deflate_undoes_each_archetypes_rounding(bluff):
    for need in range(0, 8):
        assert deflate(int(inflate(need, bluff)), bluff) == need


def test_a_declaration_at_the_ceiling_is_read_as_a_lower_bound():
    # need 4 x 2 = 8 was cut to the ceiling 5: the need is at least 3 (3 x 2 = 6 >= 5)
    assert deflate(5, 2.0, ceiling=5) == 3
    assert deflate(4, 2.0, ceiling=5) == 2


def test_revealed_needs_move_a_wrong_prior_to_the_true_factor():
    """A team named 'truthful' that doubles its need: the pairs (revealed need, the
    declaration made in that tick) overrule the prior within a few ticks."""
    belief = InflationBelief(prior_centre=1.0, prior_sigma=0.1)
    ceiling = np.array([50, 50, 50])
    assert belief.factor == 1.0
    # each pair narrows the factors that explain it: 3 -> 6 leaves (1.67, 2], 21 -> 42 only 2.0 on the grid
    for need in ([1, 0, 0], [3, 1, 0], [7, 21, 0]):
        n = np.array(need)
        declared = np.minimum(inflate(n, 2.0), ceiling)
        belief.saw_declaration(declared, ceiling)
        belief.saw_revealed_pair(n, declared, ceiling)
    assert belief.factor == 2.0


def test_odd_declarations_rule_out_doubling():
    belief = InflationBelief(prior_centre=2.0, prior_sigma=0.1)
    ceiling = np.array([9, 9, 9])
    for _ in range(3):
        belief.saw_declaration(np.array([3, 5, 0]), ceiling)  # never ceil(n x 2)
    assert belief.factor != 2.0
    assert {3, 5} <= set(inflate(np.arange(1, 6), belief.factor).tolist())


def test_audits_separate_bluffers_from_honest_teams():
    exposed, cleared = InflationBelief(1.25, 0.3), InflationBelief(1.25, 0.3)
    for _ in range(2):
        exposed.saw_audit(6, exposed=True, tolerance=0.2)
        cleared.saw_audit(6, exposed=False, tolerance=0.2)
    assert exposed.factor > 1.2 >= cleared.factor


def test_planner_learns_an_unknown_teams_factor_in_play():
    """Against a team whose archetype name says nothing of its real style (named truthful,
    plays greedy_bluffer), the estimate moves to the doubling it shows once revealed."""
    env = commons_arena.parallel_env("crisis")
    population = Population.default(env.config).with_agent("safety", "greedy_bluffer")
    data = env.config.model_dump()
    for team in data["teams"]:
        if team["name"] == "safety":
            team["archetype"] = "truthful"  # what the planner is told
    told = scenario_from_dict(data)
    planner = make_policy("planner", told, ALLOCATOR)
    policies = population.build(env.config, env=env)
    policies[ALLOCATOR] = planner
    factors = []
    for seed in range(6):
        run_episode(env, policies, seed)
        factors.append(planner.batched.factors()[0, 2])
    assert np.mean(factors) > 1.5, factors


def test_planner_never_reads_job_lists_or_shock_schedules():
    """Two scenarios that differ only in hidden truth (jobs, generators, shocks) give the
    planner identical actions on identical observations."""
    config = commons_arena.load_scenario("standard")
    data = config.model_dump()
    for team in data["teams"]:
        team["jobs"] = []
        team["generator"] = None
    data["shocks"] = []
    hidden_changed = scenario_from_dict(data)
    env = commons_arena.parallel_env("standard")
    real, blind = make_policy("planner", config, ALLOCATOR), make_policy("planner", hidden_changed, ALLOCATOR)
    policies = Population.default(config).build(config, env=env)
    observations, _ = env.reset(seed=3)
    while env.agents:
        a, b = real.act(observations[ALLOCATOR]), blind.act(observations[ALLOCATOR])
        assert a.tolist() == b.tolist()
        observations, *_ = env.step({**{x: policies[x].act(observations[x]) for x in env.agents}, ALLOCATOR: a})
    assert not policy_spec("planner").needs_env and not policy_spec("planner").privileged


def test_planner_deflates_declarations_and_spills_to_larger_tiers():
    config = commons_arena.load_scenario("standard")  # search growth (1.5), robotics reliability (1.25), safety 1.1
    planner = make_policy("planner", config, ALLOCATOR, margin=0.0)
    # search declared 6 small (need 4 at 1.5); robotics 3 medium (need 2 at 1.25); safety 2 large (need 1 at 1.1)
    obs = observation(config, declared=[[6, 0, 0], [0, 3, 0], [0, 0, 2]])
    buy, grant = split(config, planner.act(obs))
    assert grant.tolist() == [[4, 0, 0], [0, 2, 0], [0, 0, 1]]
    assert buy.tolist() == [0, 0, 0]
    # small full (4 online): a second small need goes whole onto the free medium GPUs
    planner.reset()
    obs = observation(config, declared=[[6, 0, 0], [2, 0, 0], [0, 0, 0]])
    _, grant = split(config, planner.act(obs))
    assert grant.sum() == 4 + 1 and grant[:, 0].sum() == 4 and grant[:, 1].sum() == 1


def test_planner_buys_for_urgent_shortfalls_within_the_paced_budget():
    config = commons_arena.load_scenario("standard")
    planner = make_policy("planner", config, ALLOCATOR, margin=0.0)
    obs = observation(config, declared=[[0, 0, 2], [0, 0, 2], [0, 0, 0]], pressure=[2, 2, 0],
                      offer_qty=[2, 2, 1], offer_price=[1.0, 3.0, 4.0], tick=10, budget=60.0)
    buy, grant = split(config, planner.act(obs))
    assert buy.tolist() == [0, 0, 1]  # the second large need is bought
    assert grant[:, 2].sum() == 2
    expensive = observation(config, declared=[[0, 0, 2], [0, 0, 2], [0, 0, 0]], pressure=[0, 0, 0],
                            offer_qty=[2, 2, 1], offer_price=[1.0, 3.0, 15.0], tick=10, budget=60.0)
    planner.reset()
    buy, _ = split(config, planner.act(expensive))
    assert buy.tolist() == [0, 0, 0]  # not worth a non-urgent GPU-tick at that price


def test_planner_reads_audits_from_credibility():
    config = commons_arena.load_scenario("elevated")
    planner = make_policy("planner", config, ALLOCATOR, prior_sigma=0.3)
    audits = [0] * len(ShockKind)
    planner.act(observation(config, declared=[[6, 0, 0], [0, 0, 0], [0, 0, 0]], credibility=[1, 1, 1]))
    audits[int(ShockKind.COMPLIANCE_AUDIT)] = 1
    planner.act(observation(config, declared=[[6, 0, 0], [0, 0, 0], [0, 0, 0]], credibility=[0.8, 1, 1],
                            shocks_seen=audits))
    assert planner.batched.factors()[0, 0] > 1 + config.credibility.audit_tolerance


def test_planner_params_are_checked():
    config = commons_arena.load_scenario("standard")
    for bad in ({"margin": 1.5}, {"pacing": 0}, {"gpu_tick_value": -1}, {"prior_sigma": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            make_policy("planner", config, ALLOCATOR, **bad)
    assert set(BLUFF_GRID.tolist()) >= {a.bluff for a in ARCHETYPE_PROFILES.values()}


# ---------------------------------------------------------------- one test per planning rule
# The recorded decisions (test_planner_identical.py) say *that* a change differs; these say *which* rule broke.
SEARCH, ROBOTICS, SAFETY = 0, 1, 2  # standard's teams: growth (1.5), reliability (1.25), safety_first (1.1)


def escalating(*teams: int) -> np.ndarray:
    stance = np.zeros((3, 3), dtype=np.float32)
    stance[:, 0] = 1.0  # accept
    for i in teams:
        stance[i] = [0.0, 0.0, 1.0]  # escalate
    return stance


def revealed(needs: dict[int, list[int]]) -> dict[str, np.ndarray]:
    """Observation fields where each team in ``needs`` has its true need revealed (the planner plans on it)."""
    flags, need = np.zeros(3, np.float32), np.zeros((3, 3), np.float32)
    for i, row in needs.items():
        flags[i], need[i] = 1.0, row
    return {"revealed": flags, "revealed_need": need}


def planned(config, **fields) -> tuple[np.ndarray, np.ndarray]:
    return split(config, make_policy("planner", config, ALLOCATOR).act(observation(config, **fields)))


def test_a_team_is_estimated_at_its_revealed_need_else_its_declaration_less_the_kept_margin():
    config = commons_arena.load_scenario("standard")
    # search (growth, 1.5) declared 6 small: fully deflated 4, half the inflation kept 5 (1.25), none deflated 6
    for margin, small in ((0.0, 4), (0.5, 5), (1.0, 6)):
        planner = make_policy("planner", config, ALLOCATOR, margin=margin).batched
        estimate = planner.observe(observation(config, declared=[[6, 0, 0], [0, 0, 0], [0, 0, 1]],
                                               **revealed({SAFETY: [0, 0, 3]}))[None])[0]
        assert estimate[SEARCH].tolist() == [small, 0, 0]
        assert estimate[SAFETY].tolist() == [0, 0, 3]  # revealed: taken as it is, whatever it declared


def test_the_most_urgent_team_is_served_first_when_gpus_are_scarce():
    config = commons_arena.load_scenario("standard")
    both = revealed({SEARCH: [0, 0, 1], ROBOTICS: [0, 0, 1]})  # one large GPU online, nothing offered
    _, grant = planned(config, **both)
    assert grant[:, 2].tolist() == [0, 1, 0]  # calm: the larger board pressure (robotics 1.2 > search 1.0)
    _, grant = planned(config, stance=escalating(SEARCH), **both)
    assert grant[:, 2].tolist() == [1, 0, 0]  # an escalating stance goes before board pressure
    _, grant = planned(config, pressure=[0.5, 0, 0], stance=escalating(ROBOTICS), **both)
    assert grant[:, 2].tolist() == [1, 0, 0]  # and pressure before an escalating stance


def test_urgency_raises_what_a_gpu_tick_is_worth_to_buy_it():
    """worth = gpu_tick_value x (1 + pressure / 2 + escalating / 2); one large GPU at 6.5 (+1.0 operating) costs 7.5."""
    config = commons_arena.load_scenario("standard")
    shortfall = {"offer_qty": [0, 0, 1], "offer_price": [0, 0, 6.5], "tick": 10, **revealed({SAFETY: [0, 0, 2]})}
    assert planned(config, **shortfall)[0].tolist() == [0, 0, 0]  # worth 6 < 7.5
    assert planned(config, stance=escalating(SAFETY), **shortfall)[0].tolist() == [0, 0, 1]  # worth 9
    assert planned(config, pressure=[0, 0, 1.0], **shortfall)[0].tolist() == [0, 0, 1]  # worth 9
    assert planned(config, pressure=[0, 0, 0.3], **shortfall)[0].tolist() == [0, 0, 0]  # worth 6.9


def test_a_gpu_tick_worth_exactly_its_cost_is_bought():
    """Bought while price plus operating cost is not above the worth: at equality too."""
    config = commons_arena.load_scenario("standard")
    shortfall = {"offer_qty": [0, 0, 1], "offer_price": [0, 0, 6.5], "tick": 10, **revealed({SAFETY: [0, 0, 2]})}
    cost = config.rewards.allocator.spend * (6.5 * PRICE_SLACK + config.gpu_tiers[2].op_cost)
    for value, bought in ((cost, 1), (np.nextafter(cost, 0.0), 0)):
        planner = make_policy("planner", config, ALLOCATOR, gpu_tick_value=float(value))
        assert split(config, planner.act(observation(config, **shortfall)))[0].tolist() == [0, 0, bought]


def test_purchases_are_paced_over_the_ticks_left():
    """At most budget x min(1, pacing / ticks_left) is spent in a tick: 60 x 2/12 = 10 at tick 0, one GPU at 5.0."""
    config = commons_arena.load_scenario("standard")  # 12 ticks, budget 60; 2 small GPUs may be bought a tick
    shortfall = {"online": [4, 0, 0], "offer_qty": [2, 0, 0], "offer_price": [5.0, 0, 0],
                 **revealed({SEARCH: [10, 0, 0]})}  # 6 small GPUs short
    assert planned(config, tick=0, **shortfall)[0].tolist() == [1, 0, 0]
    assert planned(config, tick=6, **shortfall)[0].tolist() == [2, 0, 0]  # 60 x 2/6 = 20
    paced = make_policy("planner", config, ALLOCATOR, pacing=4.0)  # 60 x 4/12 = 20
    assert split(config, paced.act(observation(config, tick=0, **shortfall)))[0].tolist() == [2, 0, 0]


def test_the_cheapest_tier_that_fits_is_bought_first():
    config = commons_arena.load_scenario("standard")
    short = {"online": [0, 0, 0], "tick": 10, **revealed({SEARCH: [1, 0, 0]})}  # a small job, nothing online
    assert planned(config, offer_qty=[1, 1, 0], offer_price=[4.0, 2.0, 0], **short)[0].tolist() == [0, 1, 0]
    assert planned(config, offer_qty=[1, 1, 0], offer_price=[2.0, 4.0, 0], **short)[0].tolist() == [1, 0, 0]
    medium = {"online": [0, 0, 0], "tick": 10, **revealed({SEARCH: [0, 1, 0]})}  # small GPUs do not fit it
    assert planned(config, offer_qty=[1, 1, 0], offer_price=[1.0, 4.0, 0], **medium)[0].tolist() == [0, 1, 0]


def test_carbon_is_priced_once_the_pace_would_pass_a_soft_cap():
    """Large: 4.4 + 1.0 operating = 5.4 < 6; past the cap's pace each GPU-tick adds 0.7 kW x 1.0 x intensity 1.0."""
    config = commons_arena.load_scenario("standard")  # soft cap 20 kg, carbon weight 1.0
    shortfall = {"offer_qty": [0, 0, 1], "offer_price": [0, 0, 4.4], "tick": 6, "carbon_cap": 20.0,
                 "intensity_forecast": [1.0, 1.0, 1.0], **revealed({SAFETY: [0, 0, 2]})}
    assert planned(config, carbon_used=9.0, **shortfall)[0].tolist() == [0, 0, 1]  # 9 + 9 = 18 kg projected
    assert planned(config, carbon_used=11.0, **shortfall)[0].tolist() == [0, 0, 0]  # 22 kg: 6.1 > 6


HARD_CAP_EXAMPLES = ("docs/examples/own_cluster_hard_cap.toml", "docs/examples/solar_cap.toml")


@pytest.mark.parametrize("path", HARD_CAP_EXAMPLES)
def test_on_the_binding_hard_cap_examples_planner_ends_at_the_cap(path):
    """The clusters of docs/bring_your_own_cluster.md, "When a hard cap binds": the cap binds (planner
    ends within 10 % of it, never past it: the end it leaves is carbon too little to finish a team's
    work, policies.planner.cap_admission). (An incident or a grid spike firing in the tick it acts may
    still cost it a unit: tests/policies/test_limits.py counts those.)"""
    from pathlib import Path

    config = commons_arena.load_scenario(str(Path(__file__).parents[2] / path))
    assert config.carbon.mode == "hard"
    env = commons_arena.parallel_env(scenario=config)
    population = Population.default(config).with_agent(ALLOCATOR, "planner")
    for seed in (1000, 1001, 1002):
        episode = run_episode(env, population, seed)[ALLOCATOR]
        assert 0.9 * config.carbon.cap_kg <= episode["carbon_kg"] <= config.carbon.cap_kg


@pytest.mark.slow
def test_the_hard_cap_measurement_script_prints_planner_against_each_allocator(capsys, monkeypatch):
    """scripts/planner_hard_cap.py (the page's command) on 2 seeds: a paired row per heuristic and the oracle."""
    import runpy
    import sys
    from pathlib import Path

    root = Path(__file__).parents[2]
    monkeypatch.setattr(sys, "argv", ["planner_hard_cap.py", str(root / HARD_CAP_EXAMPLES[0]), "--seeds", "2"])
    runpy.run_path(str(root / "scripts" / "planner_hard_cap.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "own_cluster_hard_cap: hard cap 8 kg; 2 seeds from 1000" in out
    for name in ("equal_split", "proportional", "fifo", "edf", "best_fit", "max_min_fair", "drf", "oracle"):
        assert f"planner - {name}:" in out
