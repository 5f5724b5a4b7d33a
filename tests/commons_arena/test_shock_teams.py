"""Where a shock's job lands, and shock keys that mean nothing for the kind (issue 53, item 4).

``shock_teams = "drawn"`` spreads the jobs of shocks with no ``team`` over the teams (each team once per round,
in an order drawn from the game's hash); the default ``"usual"`` keeps every shipped scenario's content hash,
game hash and goldens (``plain_dump`` leaves the key out at its default).
"""

from __future__ import annotations

import tomllib
from collections import Counter
from pathlib import Path

import pytest

import commons_arena
from commons_arena.scenario import ScenarioError, load_scenario, scenario_from_dict
from tests.commons_arena.test_batched import assert_same_game

OWN = Path(__file__).parents[2] / "docs/examples/own_cluster.toml"
JOB = {"gpus": 1, "work": 1.0, "slack": 2, "value": 5.0}


def own_data(**extra):
    data = tomllib.loads(OWN.read_text())
    return {**data, **extra}


def test_usual_leaves_every_hash_as_it_was():
    for name in commons_arena.list_scenarios():
        config = load_scenario(name)
        explicit = scenario_from_dict({**config.model_dump(mode="json"), "shock_teams": "usual"})
        assert explicit.content_hash == config.content_hash and explicit.game_hash == config.game_hash
        assert "shock_teams" not in config.plain_dump()


def test_drawn_spreads_team_less_job_shocks_over_the_teams():
    """The issue's cluster: every injected job went to the first team. Drawn, 8 scheduled escalations with no
    team land twice on each of the 4 teams; a shock that names its team keeps it; the draw is the game's."""
    shocks = [{"kind": "customer_escalation", "tick": t, "job": JOB} for t in range(8)]
    shocks.append({"kind": "customer_escalation", "tick": 9, "team": "safety", "job": JOB})
    usual = scenario_from_dict(own_data(shocks=shocks))
    drawn = scenario_from_dict(own_data(shocks=shocks, shock_teams="drawn"))
    assert set(usual.shock_targets[:8]) == {"search"}  # the kind's usual team, which this cluster has
    assert Counter(drawn.shock_targets[:8]) == dict.fromkeys(drawn.team_names, 2)
    assert drawn.shock_targets[8] == "safety"
    assert scenario_from_dict(own_data(shocks=shocks, shock_teams="drawn")).shock_targets == drawn.shock_targets
    # the env puts each job where the table says, and the batched game agrees with it
    env = commons_arena.parallel_env(drawn)
    env.reset(seed=0)
    landed = []
    for _ in range(9):
        env.step({})
        landed += [(e["tick"], e["team"]) for e in env.unwrapped.last_tick.events if "team" in e]
    assert [team for _, team in landed] == list(drawn.shock_targets[:8])
    assert_same_game(drawn, num_envs=2, seed=3, steps=12)


@pytest.mark.parametrize(("shock", "message"), [
    ({"kind": "market_crisis", "tick": 1, "team": "search"}, "team means nothing for a market_crisis"),
    ({"kind": "grid_spike", "tick": 1, "gpus_offline": 2}, "gpus_offline means nothing for a grid_spike"),
    ({"kind": "grid_spike", "tick": 1, "team": "nobody"}, "team means nothing for a grid_spike"),
    ({"kind": "customer_escalation", "tick": 1, "job": JOB, "price_multiplier": 2.0},
     "price_multiplier means nothing for a customer_escalation"),
    ({"kind": "customer_escalation", "tick": 1, "job": JOB, "team": "nobody"}, "'nobody' is not one of"),
])
def test_a_key_the_shocks_kind_never_reads_is_refused(shock, message):
    with pytest.raises(ScenarioError, match=message):
        scenario_from_dict(own_data(shocks=[shock]))
