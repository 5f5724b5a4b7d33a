"""Scenario numbers are finite and bounded; unreadable files fail as one ScenarioError naming them."""

from __future__ import annotations

import copy
import time

import pytest

import policies  # noqa: F401  (registers the [population] check)
from commons_arena import ScenarioError, load_scenario
from commons_arena.scenario import MAX_FORECAST, MAX_GPUS, MAX_QUEUE_SLOTS, scenario_from_dict
from tests.conftest import TINY


def with_change(path: tuple, value) -> dict:
    data = copy.deepcopy(TINY)
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return data


@pytest.mark.parametrize(
    ("path", "value", "where"),
    [
        (("rewards",), {"allocator": {"spend": float("nan")}}, "rewards.allocator.spend"),
        (("rewards",), {"team": {"credibility": float("inf")}}, "rewards.team.credibility"),
        (("rewards",), {"broker": {"profit": -1e300}}, "rewards.broker.profit"),
        (("shocks",), [{"kind": "grid_spike", "tick": 1, "intensity_multiplier": float("inf")}], "intensity_multiplier"),
        (("shocks",), [{"kind": "market_crisis", "tick": 1, "price_multiplier": 1e308}], "price_multiplier"),
        (("budget",), 1e308, "budget"),
        (("budget",), float("nan"), "budget"),
        (("teams", 0, "jobs", 0, "value"), 1e308, "teams.0.jobs.0.value"),
        (("teams", 0, "jobs", 0, "work"), float("inf"), "teams.0.jobs.0.work"),
        (("carbon", "intensity"), [1e308], "carbon.intensity"),
        (("carbon", "cap_kg"), float("inf"), "carbon.cap_kg"),
        (("gpu_tiers", 0, "owned"), 2**63 - 1, "gpu_tiers.0.owned"),
        (("gpu_tiers", 0, "spot_inventory"), MAX_GPUS + 1, "gpu_tiers.0.spot_inventory"),
        (("queue_slots",), 100_000_000, "queue_slots"),
        (("queue_slots",), MAX_QUEUE_SLOTS + 1, "queue_slots"),
        (("carbon", "forecast_horizon"), 10_000_000, "carbon.forecast_horizon"),
        (("carbon", "forecast_horizon"), MAX_FORECAST + 1, "carbon.forecast_horizon"),
        (("teams", 0, "jobs", 0, "priority"), 2**62, "teams.0.jobs.0.priority"),
        (("teams", 0, "board_pressure"), 1e300, "teams.0.board_pressure"),
        (("description",), "x" * 20_000, "description"),
    ],
)
def test_non_finite_or_huge_numbers_are_refused_naming_the_key(path, value, where):
    started = time.perf_counter()
    with pytest.raises(ScenarioError, match=where.replace(".", r"\.")):
        scenario_from_dict(with_change(path, value))
    assert time.perf_counter() - started < 5  # refused up front, not after allocating


def test_bounds_leave_room_for_every_shipped_scenario_and_the_maxima_themselves(make_env):
    data = with_change(("queue_slots",), MAX_QUEUE_SLOTS)
    data["carbon"]["forecast_horizon"] = MAX_FORECAST
    data["gpu_tiers"][0]["owned"] = MAX_GPUS
    env = make_env(data)
    obs, _ = env.reset(seed=0)
    assert all(env.observation_space(a).contains(o) for a, o in obs.items())


def test_population_names_and_roles_are_checked_at_load(write_scenario):
    for population, message in [
        ({"broker": "no_such_policy"}, r"population\.broker: unknown policy 'no_such_policy'"),
        ({"broker": "edf"}, r"population\.broker: policy 'edf' plays the allocator role but 'broker' is a broker"),
        ({"search": "demand_priced"}, r"population\.search: policy 'demand_priced' plays the broker role"),
        ({"allocator": "learned:/nonexistent/dir"}, r"population\.allocator: .*not a commons_arena policy checkpoint"),
    ]:
        path = write_scenario(with_change(("population",), population))
        with pytest.raises(ScenarioError, match=rf"(?s)invalid scenario {path}.*{message}"):
            load_scenario(path)


def test_invalid_utf8_is_one_line_naming_the_file(tmp_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes('description = "caf\xe9"\n'.encode("latin-1"))
    with pytest.raises(ScenarioError, match=rf"^invalid scenario {path}: not UTF-8 text") as err:
        load_scenario(path)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("text", ["x = " + "[" * 100_000 + "]" * 100_000, "x = " + "{a = " * 5000 + "1" + "}" * 5000])
def test_deep_nesting_is_one_line_naming_the_file(tmp_path, text):
    path = tmp_path / "deep.toml"
    path.write_text(text)
    with pytest.raises(ScenarioError, match=rf"^invalid scenario {path}: ") as err:
        load_scenario(path)
    assert "\n" not in str(err.value)


def test_a_folder_or_unreadable_path_is_a_scenario_error(tmp_path):
    folder = tmp_path / "dir.toml"
    folder.mkdir()
    with pytest.raises(ScenarioError, match="dir.toml"):
        load_scenario(folder)
