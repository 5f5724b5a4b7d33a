"""Game validity (issue 3, part 5; docs/rules.md §9): the claims the scenario files make, on held-out seeds.

Every number here comes from one evaluation table (:func:`experiments.evaluation.evaluate.evaluate`,
the code behind ``commons-arena evaluate``) over ``SEEDS`` = 2000–2019 (or the 20 seeds
from ``$VALIDITY_FIRST_SEED``; the claims were also checked on 3000–3019), with each
scenario's default background population. The table is built once per module: each
(scenario, allocator, seeds, team override) is played once, and the runs are shared by
the score table and the misreport-gain tables (a ``truthful`` override of a team that
already plays ``truthful`` reuses the plain run). The claims:

1. **The oracle is the ceiling**: its mean reward >= every baseline's, on every scenario.
   ``tests/policies/test_oracle.py`` checks this on seeds 0–19 with its own runs; here the same
   claim is read from this module's table, i.e. on a second, held-out seed range.
2. **Each scenario has its heuristic**: the winner among the baselines is the one its
   description names (``EXPECTED_WINNER``, written out by hand, not parsed; a test
   checks that the descriptions still say so), and no single baseline wins every scenario.
3. **Bluffing pays against ``proportional``** in the scenarios whose descriptions say so
   (``BLUFF_PAYS``: the five compute-market ports, where declarations drive every grant
   and capacity is contested, and the crisis tier): averaged over the teams, a team's
   mean return as ``greedy_bluffer`` minus its return as ``truthful`` (everything else
   fixed) is > 0, and it is smaller against ``max_min_fair`` (an equal share caps a
   bluff). Against the oracle, which never reads declarations, it is <= 0; that is played
   on ``BLUFF_VS_ORACLE`` only (the oracle's episodes are the expensive ones). Not
   claimed: the four scheduler ports (truthful teams; a bluff changes little), ``standard``
   (capacity is ample and a starved truthful team soon has its true need revealed: the
   gain is about -1 to +3) and ``elevated`` (a small positive gain on average, about +2 to
   +11 over 20 seeds, not reliably above 0 on every seed range).
4. **Tiers get harder**: every baseline's normalised score on ``standard`` >= ``elevated``
   >= ``crisis``.

Runtime: about a minute on two shared cores (the oracle's MILPs are most of it).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import pytest

import commons_arena
from experiments.evaluation.evaluate import EvaluationResult, evaluate, play_many
from policies import Population, available_policies
from policies.mechanisms import REFERENCE_MECHANISMS

pytestmark = pytest.mark.slow  # one evaluation table of every scenario on held-out seeds

# Held out: test_oracle / test_policies use seeds 0–19. Another range of 20, e.g. to check
# that the scenario files were not tuned to these seeds: VALIDITY_FIRST_SEED=3000 pytest ...
FIRST_SEED = int(os.environ.get("VALIDITY_FIRST_SEED", "2000"))
SEEDS = tuple(range(FIRST_SEED, FIRST_SEED + 20))
SCENARIOS = tuple(commons_arena.list_scenarios())
ORACLE = "oracle"
# The heuristics (SPEC §9-10: each named scenario is built for one of them). The planner is
# not one: it is the observation-only bar learned allocators are held to.
# Nor are the reference mechanisms of policies/mechanisms.py (issue 42): they are the literature's, not a heuristic
# a scenario was built for.
BASELINES = tuple(p for p in available_policies("allocator") if p not in (ORACLE, "planner", *REFERENCE_MECHANISMS))
TIERS = ("standard", "elevated", "crisis")

# The winner among the baselines each scenario's description names ("Expected winner: ...").
# The curriculum tiers name none.
EXPECTED_WINNER = {
    # ports of the GPU-scheduler source system's cases
    "deadline_crunch": "edf",
    "cost_pressure": "best_fit",
    "reserve_large_gpu": "best_fit",
    "wait_for_capacity": "best_fit",
    # ports of the compute-market source system's cases
    "market_baseline": "edf",
    "tight_capacity": "edf",
    "price_shock": "edf",
    "policy_shift": "edf",
    "job_mix": "edf",
}

# Scenarios whose descriptions claim that bluffing pays against proportional.
BLUFF_PAYS = ("market_baseline", "tight_capacity", "price_shock", "policy_shift", "job_mix", "crisis")
# ... of which these are also played with the oracle as allocator (it never reads a declaration).
BLUFF_VS_ORACLE = ("market_baseline", "policy_shift")


class Table:
    """The evaluation rows and misreport gains this module asserts on."""

    def __init__(self, scores: EvaluationResult, misreport: list[dict]):
        self.rows = {(r["scenario"], r["allocator"]): r for r in scores.rows}
        self.gains: dict[tuple[str, str], list[float]] = {}
        for row in misreport:
            self.gains.setdefault((row["scenario"], row["allocator"]), []).append(row["misreport_gain"])

    def reward(self, scenario: str, allocator: str) -> float:
        return self.rows[(scenario, allocator)]["reward_mean"]

    def score(self, scenario: str, allocator: str) -> float:
        return self.rows[(scenario, allocator)]["score"]

    def gain(self, scenario: str, allocator: str) -> float:
        """Misreport gain averaged over the scenario's teams."""
        return float(np.mean(self.gains[(scenario, allocator)]))

    def winner(self, scenario: str) -> str:
        return max(BASELINES, key=lambda b: self.reward(scenario, b))

    def baselines(self, scenario: str) -> str:
        return ", ".join(
            f"{b}={self.reward(scenario, b):.1f}" for b in sorted(BASELINES, key=lambda b: -self.reward(scenario, b))
        )


def _cached_runner():
    """``play_many`` that plays each (scenario, allocator, seeds, overrides) once."""
    cache: dict[tuple, list] = {}
    defaults = {s: Population.default(s).describe(s) for s in SCENARIOS}

    def run(scenario: str, allocator: str, seeds: Sequence[int], overrides: dict[str, str] | None = None):
        # an override that names the agent's default policy changes nothing
        changed = tuple(sorted((a, p) for a, p in (overrides or {}).items() if defaults[scenario].get(a) != p))
        key = (scenario, allocator, tuple(seeds), changed)
        if key not in cache:
            cache[key] = play_many(scenario, allocator, seeds, dict(changed))
        return cache[key]

    return run


@pytest.fixture(scope="module")
def table() -> Table:
    run = _cached_runner()
    scores = evaluate(SCENARIOS, BASELINES + (ORACLE,), SEEDS, misreport=False, progress=False, run=run)
    misreport = evaluate(BLUFF_PAYS, ["proportional", "max_min_fair"], SEEDS, progress=False, run=run).misreport
    misreport += evaluate(BLUFF_VS_ORACLE, [ORACLE], SEEDS, progress=False, run=run).misreport
    return Table(scores, misreport)


# --------------------------------------------------------------------------- 1. oracle ceiling


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_oracle_mean_reward_is_at_least_every_baselines_on_held_out_seeds(table, scenario):
    oracle = table.reward(scenario, ORACLE)
    ahead = {b: round(table.reward(scenario, b), 2) for b in BASELINES if table.reward(scenario, b) > oracle + 1e-6}
    assert not ahead, f"{scenario}: oracle mean {oracle:.2f} is below {ahead}"


# --------------------------------------------------------------------------- 2. each scenario has its heuristic


def test_expected_winners_are_the_ones_the_descriptions_name():
    """The hand-written table matches the scenario files (and misses none that names a winner)."""
    for scenario in SCENARIOS:
        description = commons_arena.load_scenario(scenario).description
        if scenario in EXPECTED_WINNER:
            assert f"Expected winner: {EXPECTED_WINNER[scenario]}" in description, scenario
        else:
            assert "Expected winner" not in description, f"{scenario} names a winner: add it to EXPECTED_WINNER"


@pytest.mark.parametrize("scenario", sorted(EXPECTED_WINNER))
def test_the_heuristic_a_scenario_was_built_for_wins(table, scenario):
    expected = EXPECTED_WINNER[scenario]
    best = max(table.reward(scenario, b) for b in BASELINES if b != expected)
    assert table.reward(scenario, expected) > best, (
        f"{scenario}: expected {expected} to win; {table.baselines(scenario)}"
    )


def test_no_single_baseline_wins_every_scenario(table):
    winners = {scenario: table.winner(scenario) for scenario in SCENARIOS}
    assert len(set(winners.values())) >= 2, winners


# --------------------------------------------------------------------------- 3. bluffing


def test_bluffing_claims_are_in_the_descriptions():
    for scenario in SCENARIOS:
        says = "bluffing pays against proportional" in commons_arena.load_scenario(scenario).description.lower()
        assert says == (scenario in BLUFF_PAYS), scenario


@pytest.mark.parametrize("scenario", BLUFF_PAYS)
def test_bluffing_pays_against_proportional_and_less_against_max_min_fair(table, scenario):
    proportional, fair = table.gain(scenario, "proportional"), table.gain(scenario, "max_min_fair")
    assert proportional > 0, f"{scenario}: bluffing does not pay against proportional (gain {proportional:.2f})"
    assert fair < proportional, f"{scenario}: gain vs max_min_fair {fair:.2f} >= vs proportional {proportional:.2f}"


@pytest.mark.parametrize("scenario", BLUFF_VS_ORACLE)
def test_bluffing_does_not_pay_against_the_oracle(table, scenario):
    oracle, proportional = table.gain(scenario, ORACLE), table.gain(scenario, "proportional")
    assert oracle <= 1e-9, f"{scenario}: bluffing gains {oracle:.2f} against the oracle"
    assert oracle < proportional


# --------------------------------------------------------------------------- 4. tiers


def test_curriculum_tiers_share_observation_and_action_spaces():
    """A policy trained on one tier runs on the others (the tuning here must keep it so).

    Same agents and identical observation and action spaces (bounds included), so RLlib's
    env checker and a module's recorded spaces accept every tier.
    """
    configs = [commons_arena.load_scenario(tier) for tier in TIERS]

    def shared(c):
        tiers = [(t.name, t.owned, t.spot_inventory, t.memory_gb) for t in c.gpu_tiers]
        return c.team_names, tiers, c.max_ticks, c.queue_slots, c.price_levels, c.carbon.forecast_horizon

    assert all(shared(c) == shared(configs[0]) for c in configs[1:])
    envs = [commons_arena.parallel_env(tier) for tier in TIERS]
    agents = envs[0].possible_agents
    for env in envs[1:]:
        assert env.possible_agents == agents
        for agent in agents:
            assert env.observation_space(agent) == envs[0].observation_space(agent), agent
            assert env.action_space(agent) == envs[0].action_space(agent), agent


@pytest.mark.parametrize("baseline", BASELINES)
def test_tiers_get_harder(table, baseline):
    scores = [table.score(tier, baseline) for tier in TIERS]
    assert scores[0] >= scores[1] >= scores[2], (
        f"{baseline}: normalised scores {dict(zip(TIERS, np.round(scores, 3), strict=True))}"
    )
