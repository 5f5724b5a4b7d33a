"""Seat -> policy assignments have one schema: a population (policies/population.py) is what a population file
(`--background`, `--population`), a roster's and a suite's `[backgrounds.<name>]` tables hold, parsed and checked by
the same code with the same messages; a roster (experiments/evaluation/roster.py) is a tournament."""

from __future__ import annotations

from pathlib import Path

import pytest

import commons_arena
from experiments.evaluation.roster import RosterError, load_roster, parse_seat, roster_from_dict
from experiments.evaluation.suite import SUITES_DIR, SuiteError, load_suite, suite_from_dict
from policies.population import Population, PopulationError

ROOT = Path(__file__).resolve().parents[3]
ROSTERS = [ROOT / "docs" / "roster_example.toml"]
POPULATIONS = sorted((ROOT / "experiments" / "configs" / "backgrounds").glob("*.toml"))
SUITES = [*sorted(SUITES_DIR.glob("*.toml")), ROOT / "docs" / "examples" / "own_suite.toml"]


def test_every_shipped_roster_population_and_suite_loads():
    assert ROSTERS and POPULATIONS and len(SUITES) > 1
    for path in ROSTERS:
        assert load_roster(path).episodes > 0
    for path in POPULATIONS:
        for scenario in ("standard", "crisis"):
            assert Population.from_toml(path, scenario).describe(scenario)
    for path in SUITES:
        assert load_suite(path).evaluations, path


BAD_BACKGROUND = {"bad": {"roles": {"team": "planner"}}}
ROSTER = {"scenarios": ["standard"], "seeds": [1], "entrants": ["edf"]}
SUITE = {"name": "s", "evaluation": [{"scenario": "standard", "background": "bad"}]}


def test_a_background_means_the_same_in_a_roster_a_suite_and_a_population_file(tmp_path):
    with pytest.raises(PopulationError) as population:
        Population.from_dict(BAD_BACKGROUND["bad"], source="backgrounds.bad")
    with pytest.raises(RosterError) as roster:
        roster_from_dict({**ROSTER, "backgrounds": BAD_BACKGROUND}, source="r.toml")
    with pytest.raises(SuiteError) as suite:
        suite_from_dict({**SUITE, "backgrounds": BAD_BACKGROUND}, source="s.toml")
    detail = str(population.value).removeprefix("population ")
    assert detail.startswith("backgrounds.bad: roles.team: policy 'planner' plays the allocator role, not team")
    assert str(roster.value) == f"roster r.toml: {detail}" and str(suite.value) == f"suite s.toml: {detail}"
    with pytest.raises(RosterError, match="give at least one background"):  # at least one, in both formats
        roster_from_dict({**ROSTER, "backgrounds": {}})
    with pytest.raises(SuiteError, match="give at least one background"):
        suite_from_dict({**SUITE, "backgrounds": {}})


def test_an_entrant_is_checked_as_a_population_entry_is():
    with pytest.raises(PopulationError) as population:
        Population(agents={"allocator": "truthful"}).resolve("standard")
    with pytest.raises(RosterError) as roster:
        roster_from_dict({**ROSTER, "entrants": ["truthful"]}, source="r.toml")
    assert "policy 'truthful' plays the team role, not allocator; allocator policies: " in str(population.value)
    assert str(roster.value).startswith("roster r.toml: entrants.truthful: policy 'truthful' plays the team role, "
                                        "not allocator; allocator policies: ")


def test_a_seat_is_spelt_one_way_and_a_suite_plays_one_seat():
    assert [parse_seat(s) for s in ("allocator", "broker", "teams", "search", "team:search")] == \
        ["allocator", "broker", "teams", "team:search", "team:search"]
    seats = {e.seat for e in suite_from_dict({"name": "s", "seat": "search",
                                              "evaluation": [{"scenario": "standard"}]}).evaluations}
    assert seats == {"team:search"}
    with pytest.raises(SuiteError, match="seat: a suite's focal seat is one seat"):
        suite_from_dict({"name": "s", "seat": "teams", "evaluation": [{"scenario": "standard"}]})
    with pytest.raises(SuiteError, match=r"evaluation\[0\]: seat: a suite's focal seat is one seat"):
        suite_from_dict({"name": "s", "seat": "team:search", "evaluation": [{"scenario": "standard", "seat": "teams"}]})


def test_a_suite_file_is_read_as_every_user_file_is(tmp_path):
    deep = tmp_path / "deep.toml"
    deep.write_text("a = " + "[" * 40 + "]" * 40 + "\n")
    with pytest.raises(SuiteError, match=f"suite {deep}: nests deeper than 32 levels"):
        load_suite(deep)
    latin = tmp_path / "latin.toml"
    latin.write_bytes(b'name = "caf\xe9"\n')
    with pytest.raises(SuiteError, match=f"suite {latin}: not UTF-8 text"):
        load_suite(latin)


def test_a_roster_plays_the_scenarios_it_is_given_parsed(tiny, write_scenario):
    config = commons_arena.load_scenario(write_scenario(tiny, "tiny.toml"))  # named "tiny": no shipped scenario
    data = {"seat": "team:search", "scenarios": [config.name], "seeds": [1], "entrants": ["truthful"]}
    with pytest.raises(RosterError, match=r"scenarios\[0\]"):
        roster_from_dict(data)
    assert roster_from_dict(data, parsed=[config]).scenarios == (config,)
    with pytest.raises(RosterError, match="are not the parsed ones"):
        roster_from_dict({**data, "scenarios": ["standard"]}, parsed=[config])
