"""Scenario files: every shipped file loads, by name or path, into a frozen config whose
content hash ignores layout and reaches the infos. Malformed files: see test_bad_input."""

from __future__ import annotations

import re
from pathlib import Path

import pydantic
import pytest

import commons_arena
from commons_arena import ScenarioError, load_scenario
from commons_arena.scenario import scenario_from_dict, scenario_path
from tests.sweeps import swept

SCENARIOS = commons_arena.list_scenarios()
SCENARIO_DIR = Path(__file__).resolve().parents[2] / "scenarios"

# issue 2, deliverable 4: the named scenarios every checkout must ship
REQUIRED = (
    "standard", "elevated", "crisis",
    "market_baseline", "tight_capacity", "price_shock", "policy_shift", "job_mix",
    "deadline_crunch", "cost_pressure", "wait_for_capacity", "reserve_large_gpu",
)


def test_list_scenarios_is_the_scenarios_folder() -> None:
    assert SCENARIOS == sorted(p.stem for p in SCENARIO_DIR.glob("*.toml"))


@pytest.mark.parametrize("name", swept(SCENARIOS))
def test_shipped_scenario_loads(name: str) -> None:
    config = load_scenario(name)
    assert config.name == name, "a scenario's name should be its file name"
    assert config.description.strip()
    assert re.fullmatch(r"[0-9a-f]{12}", config.content_hash)
    assert config.agents == ("allocator", *config.team_names, "broker")
    assert 2 <= len(config.teams) <= 8
    by_path = load_scenario(scenario_path(name))
    assert by_path == config and by_path.content_hash == config.content_hash
    assert load_scenario(str(SCENARIO_DIR / f"{name}.toml")).content_hash == config.content_hash
    if name in ("standard", "elevated", "crisis"):
        assert config.difficulty == name


@pytest.mark.parametrize("name", swept(SCENARIOS))
def test_hash_reaches_infos(name: str) -> None:
    env = commons_arena.parallel_env(scenario=name)
    _, infos = env.reset(seed=0)
    assert {info["scenario_hash"] for info in infos.values()} == {load_scenario(name).content_hash}
    _, _, _, _, infos = env.step({})
    assert {info["scenario_hash"] for info in infos.values()} == {load_scenario(name).content_hash}


def test_hashes_are_distinct() -> None:
    hashes = [load_scenario(n).content_hash for n in SCENARIOS]
    assert len(set(hashes)) == len(hashes)


@pytest.mark.parametrize("name", swept(SCENARIOS))
def test_hash_ignores_comments_and_layout(name: str, tmp_path: Path) -> None:
    text = (SCENARIO_DIR / f"{name}.toml").read_text()
    padded = "# a comment on top\n\n" + text.replace("\n", "\n\n", 3) + "\n# trailing comment\n"
    copy = tmp_path / "copy.toml"
    copy.write_text(padded)
    assert load_scenario(copy).content_hash == load_scenario(name).content_hash


def test_hash_follows_content(tiny) -> None:
    base = scenario_from_dict(tiny).content_hash
    assert scenario_from_dict(dict(tiny)).content_hash == base
    tiny["budget"] = 21.0
    assert scenario_from_dict(tiny).content_hash != base


def test_defaults_filled_in(tiny) -> None:
    config = scenario_from_dict(tiny)
    assert (config.reveal_after, config.queue_slots, config.price_levels) == (2, 6, 11)
    assert config.carbon.forecast_horizon == 3
    assert config.rewards.allocator.missed == 0.6 and config.rewards.team.credibility == 10.0
    assert config.teams[0].archetype == "truthful" and config.shocks == ()
    assert config.credibility.audit_tolerance == 0.25
    assert config.tier_names == ("small", "large") and config.team_names == ("search", "robotics")


def test_config_is_frozen(tiny) -> None:
    config = scenario_from_dict(tiny)
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        config.budget = 1.0  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        config.gpu_tiers[0].owned = 9  # type: ignore[misc]
    assert isinstance(config.teams, tuple) and isinstance(config.teams[0].jobs, tuple)


def test_load_passes_a_config_through(tiny) -> None:
    config = scenario_from_dict(tiny)
    assert load_scenario(config) is config


def test_load_by_path_object_and_string(tiny, write_scenario) -> None:
    path = write_scenario(tiny, filename="mine.toml")
    assert load_scenario(path) == load_scenario(str(path)) == scenario_from_dict(tiny)
    env = commons_arena.parallel_env(scenario=str(path))
    assert env.config.name == "tiny"


def test_dict_errors_name_their_source(tiny) -> None:
    tiny["max_ticks"] = 0
    with pytest.raises(ScenarioError, match=r"invalid scenario <dict>:\n  max_ticks: .*greater than or equal to 1"):
        scenario_from_dict(tiny)


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (lambda d: d["teams"][0].update(generator={"rate": 0.5, "last_tick": 6, "gpus": [1, 1], "work": [1.0, 2.0],
                                                   "slack": [1, 2], "value": [1.0, 2.0]}),
         "teams[0].generator.last_tick 6 is not before max_ticks 6"),
        (lambda d: d["teams"][0].update(generator={"rate": 0.5, "last_tick": 3, "gpus": [2, 1], "work": [1.0, 2.0],
                                                   "slack": [1, 2], "value": [1.0, 2.0]}),
         "gpus range [2, 1] has lo > hi"),
        (lambda d: d.update(shocks=[{"kind": "grid_spike", "tick": 1, "rate": 0.5}]),
         "exactly one of 'tick' (scheduled) or 'rate' (random)"),
        (lambda d: d.update(shocks=[{"kind": "grid_spike"}]), "exactly one of 'tick'"),
        (lambda d: d.update(shocks=[{"kind": "production_incident", "tick": 1}]), "production_incident needs 'tier'"),
        (lambda d: d.update(shocks=[{"kind": "grid_spike", "tick": 6}]), "tick 6 is not before max_ticks 6"),
        (lambda d: d.update(shocks=[{"kind": "market_crisis", "tick": 1, "inventory_factor": 1.5}]),
         "shocks.0.inventory_factor"),
        (lambda d: d["carbon"].update(intensity=[]), "intensity needs at least one value"),
        (lambda d: d["carbon"].update(mode="medium"), "carbon.mode"),
        (lambda d: d["teams"][0].update(archetype="saint"), "teams.0.archetype"),
        (lambda d: d["teams"][0]["jobs"][0].update(value_noise=11.0), "value_noise 11.0 exceeds value 10.0"),
        (lambda d: d["teams"][0].update(name="Search Team"), "teams.0.name"),
        (lambda d: d.update(price_levels=1), "price_levels"),
    ],
)
def test_validation_rules(tiny, write_scenario, change, fragment) -> None:
    change(tiny)
    path = write_scenario(tiny)
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert str(path) in str(err.value) and fragment in str(err.value)


def test_required_scenarios_are_shipped() -> None:
    missing = [name for name in REQUIRED if name not in SCENARIOS]
    assert not missing, f"scenarios/ lacks {missing}"
