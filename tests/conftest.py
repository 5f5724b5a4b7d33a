"""Shared fixtures: scenario builders (as dicts and as TOML files in tmp_path).

Test modules parametrise over ``commons_arena.list_scenarios()`` themselves, so a new
file in ``scenarios/`` is covered without touching this file.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import re
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import pytest

import commons_arena
from commons_arena.scenario import scenario_from_dict

# --------------------------------------------------------------------------- markers

# `pytest -m "not slow"` is the fast loop; the README's test command runs everything. The
# marks live here, by module, test and fixture, not in the test files, so branches that
# edit tests merge without touching them. Keys: "module", or "module::test" (the function's
# name, or with its parameters: "module::test[id]"). Markers are registered in pyproject.toml.
NEEDS_MARKS = ("rllib", "ray", "browser", "server")  # each of these is also `slow`

MARKS: dict[str, tuple[str, ...]] = {
    "test_training": ("rllib", "ray"),
    "test_selfplay": ("rllib", "ray"),
    "test_league": ("rllib", "ray"),
    "test_checkpoint_format": ("rllib",),  # exports RLlib modules it builds
    "test_training_setup": ("rllib",),  # builds RLlib configs and envs
    "test_cluster_shipping::test_code_and_checkpoints_reach_nodes_that_share_no_disk": ("rllib", "ray"),  # a two-node cluster
    "test_cluster_shipping::test_a_packed_checkpoint_plays_where_its_folder_is_gone": ("rllib",),
    "test_cluster_shipping::test_damaged_bytes_are_refused": ("rllib",),
    "test_experiment_files::test_same_file_and_seed_give_identical_weights_in_fresh_processes": ("rllib",),
    "test_train_seeds::test_train_seeds_runs_each_seed_in_its_folder_and_reports": ("rllib",),
    "test_negotiation_training": ("rllib", "ray"),  # best responses and exploit, trained
    "test_arms_race::test_the_arms_race_runs_both_rounds_and_reports": ("rllib", "ray"),  # both rounds, trained
    "test_arms_race::test_round2_continues_a_learned_allocator_from_its_weights": ("rllib", "ray"),
    "test_arms_race::test_the_mix_background_plays_in_its_share_of_episodes_and_is_tagged": ("rllib",),
    "test_psro::test_the_env_plays_each_mixture_entry_in_its_share_and_the_single_mix_as_before": ("rllib",),
    "test_psro::test_a_tiny_round_runs_reports_and_resumes_without_redoing_a_step": ("rllib", "ray"),  # a round, trained
    "test_psro::test_the_meta_game_is_played_on_the_engine_solved_for_the_members_and_stored": ("slow",),  # 2 tournaments
    "test_remote_runners": ("rllib", "ray"),  # remote env runners on the session's Ray
    "test_universal_training": ("rllib", "ray"),  # the shape-free allocator trained, fine-tuned, on long episodes
    "test_universal::test_an_iteration_without_a_finished_episode_reports_no_nan": ("slow",),  # imports tensorboardX
    "test_serving": ("server",),
    "test_serving_hostile": ("server",),  # a server in its own process, fuzzed
    "test_cli_hostile::test_sidecar_numbers_are_bounded": ("rllib",),  # saves RLlib modules
    "test_cli_hostile::test_checkpoint_identity_reads_only_the_sidecar": ("rllib",),
    "test_cli_hostile::test_analyze_reads_a_mixed_run_on_its_hardest_tier": ("rllib",),  # saves an RLlib module
    "test_session_store::test_everything_that_touches_a_session_runs_on_the_event_loop": ("slow",),  # builds the app
    "test_openenv": ("server",),  # openenv validate and its client against the serve command
    "test_mcp": ("server",),  # the MCP SDK's client over streamable HTTP
    "test_seat_teaching::test_http_preview_and_summary": ("server",),  # the app, a whole episode and its references
    "test_serve_check": ("server",),  # semantic checks over HTTP against a real server
    "test_seat_teaching::test_references_are_the_engines_on_the_same_seed_and_cached": ("slow",),  # 4 oracle episodes
    "test_play_browser": ("browser", "server"),
    "test_replay_browser": ("browser",),
    "test_tournament::test_a_killed_run_resumes_to_exactly_the_uninterrupted_rows[ray]": ("ray",),
    # unit modules' slow tests: whole evaluations, the oracle's MILP over many episodes, subprocesses
    "test_validity": ("slow",),  # one evaluation table of every scenario on held-out seeds
    "test_packaging": ("slow",),  # builds and installs the wheel
    "test_oracle::test_oracle_mean_reward_is_at_least_every_baselines": ("slow",),
    "test_oracle::test_oracle_beats_every_baseline_on_standard": ("slow",),
    "test_oracle::test_oracle_beats_proportional_and_random_on_standard": ("slow",),
    "test_limits::test_no_avoidable_invalid_unit_on_more_perturbed_scenarios": ("slow",),  # 40 scenarios x 2 seeds x 9 allocators
    "test_tournament::test_a_changed_scenario_is_refused_unless_allowed": ("slow",),
    "test_tournament::test_other_seats": ("slow",),
    "test_tournament::test_the_focal_seat_is_the_players": ("slow",),
    "test_tournament::test_cli_roster_and_flag_forms": ("slow",),
    "test_cli_errors::test_the_installed_command_exits_2_with_one_line_and_no_traceback": ("slow",),
    "test_determinism::test_same_trajectory_in_another_process": ("slow",),
    "test_golden::test_golden_playthroughs_replay_on_every_blas_kernel": ("slow",),  # subprocesses
    "test_small_inputs::test_native_output_is_silenced_and_python_output_kept": ("slow",),
    "test_render::test_every_scenario_renders": ("slow",),
    "test_render::test_frames_from_recording": ("slow",),
    "test_render::test_rgb_array_frames": ("slow",),  # the fast loop keeps one dashboard test
    "test_render::test_pettingzoo_render_test": ("slow",),
    "test_family::test_many_generated_scenarios_play": ("slow",),  # 300 generated scenarios x 2 episodes
    "test_family::test_any_valid_family_generates_valid_scenarios": ("slow",),  # hypothesis: 60 families at their bounds
}

# A test run once per shipped scenario (or per unusual shape) is a sweep: the fast loop keeps
# `standard`, `crisis` and the smaller unusual shape of it; the full run plays every one.
SWEPT_ONLY_IN_FULL = frozenset(commons_arena.list_scenarios()) - {"standard", "crisis"} | {"octet_five_tiers"}

FIXTURE_MARKS: dict[str, tuple[str, ...]] = {
    "ray_session": ("ray",),
    "fitting_checkpoint": ("rllib",),  # test_cli_errors: a checkpoint of an RLlib module
    "allocator_run": ("slow",),  # test_tournament: a whole tournament
    "uninterrupted": ("slow",),  # test_tournament: the kill test's reference run
}


def marks_for(module: str, test: str, name: str, fixtures: Collection[str], params: Collection[Any] = ()) -> set[str]:
    """The marks of one test: its module's, its own (by name, or by name with parameters), its fixtures',
    and `slow` for a sweep's cases in SWEPT_ONLY_IN_FULL."""
    marks = {*MARKS.get(module, ()), *MARKS.get(f"{module}::{test}", ()), *MARKS.get(f"{module}::{name}", ())}
    if any(isinstance(value, str) and value in SWEPT_ONLY_IN_FULL for value in params):
        marks.add("slow")
    for fixture in fixtures:
        marks.update(FIXTURE_MARKS.get(fixture, ()))
    if marks & set(NEEDS_MARKS):
        marks.add("slow")
    return marks


def deselects_every_test(expression: str, marks: Collection[str]) -> bool:
    """Whether ``-m expression`` is false for every test carrying ``marks``, whatever other marks it has.

    Parsed by pytest's own parser, so `-m` means the same here; if that private module moves, or
    the expression asks for marker arguments (``name(key=value)``), the answer is "no" (collect)."""
    try:
        from _pytest.mark.expression import Expression
    except ImportError:
        return False
    if re.search(r"\w\(", expression):
        return False
    compiled = Expression.compile(expression)
    free = sorted(set(re.findall(r"[A-Za-z_][\w.]*", expression)) - {"and", "or", "not", *marks})
    for chosen in itertools.product((False, True), repeat=len(free)):
        present = {*marks, *(name for name, on in zip(free, chosen, strict=True) if on)}
        if compiled.evaluate(lambda name, present=present, **_: name in present):
            return False
    return True


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Do not even import a test module that `-m` deselects whole (the fast loop skips RLlib's import)."""
    expression = config.option.markexpr
    if not expression or collection_path.suffix != ".py":
        return None
    marks = marks_for(collection_path.stem, "", "", ())
    return True if marks and deselects_every_test(expression, marks) else None


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects anything
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module = getattr(item, "module", None)
        if module is None:
            continue
        test = getattr(item, "originalname", item.name)
        callspec = getattr(item, "callspec", None)
        params = callspec.params.values() if callspec is not None else ()
        for mark in sorted(marks_for(module.__name__.rpartition(".")[2], test, item.name, item.fixturenames, params)):
            item.add_marker(mark)


# --------------------------------------------------------------------------- Ray


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray for the whole test run (2 CPUs, no dashboard), shut down at the end."""
    import ray

    os.environ.setdefault("RAY_TMPDIR", "/tmp/ray_tests")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield
    ray.shutdown()


# --------------------------------------------------------------------------- TOML


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {value!r} as TOML")


def toml_dumps(data: dict[str, Any]) -> str:
    """Enough TOML for scenario files: one ``key = value`` line per top-level key."""
    return "".join(f"{key} = {_toml_value(value)}\n" for key, value in data.items())


# --------------------------------------------------------------------------- tiny scenario

TINY: dict[str, Any] = {
    # Small enough to compute every number by hand (see test_rewards / test_mechanics).
    "name": "tiny",
    "description": "two teams, two tiers, one job each; for hand-computed tests",
    "max_ticks": 6,
    "budget": 20.0,
    "reveal_after": 2,
    "gpu_tiers": [
        {"name": "small", "owned": 2, "memory_gb": 16.0, "speed": 1.0, "op_cost": 0.5, "power_kw": 1.0,
         "spot_inventory": 2, "spot_unit_cost": 1.0, "max_price": 10.0},
        {"name": "large", "owned": 1, "memory_gb": 80.0, "speed": 2.0, "op_cost": 2.0, "power_kw": 2.0,
         "spot_inventory": 1, "spot_unit_cost": 3.0, "max_price": 20.0},
    ],
    "carbon": {"cap_kg": 100.0, "mode": "soft", "intensity": [1.0]},
    "teams": [
        {"name": "search", "board_pressure": 1.0,
         "jobs": [{"id": "a", "gpus": 1, "work": 2.0, "arrival": 0, "deadline": 3, "value": 10.0}]},
        {"name": "robotics", "board_pressure": 1.5,
         "jobs": [{"id": "b", "gpus": 1, "min_memory_gb": 40.0, "work": 2.0, "arrival": 0, "deadline": 4,
                   "value": 20.0}]},
    ],
}


@pytest.fixture
def tiny() -> dict[str, Any]:
    """A fresh, mutable copy of the tiny scenario as a dict."""
    return copy.deepcopy(TINY)


@pytest.fixture
def make_env() -> Callable[..., commons_arena.ArenaEnv]:
    """``make_env(data, render_mode=None)``: a ParallelEnv from a scenario dict."""

    def make(data: dict[str, Any], render_mode: str | None = None) -> commons_arena.ArenaEnv:
        return commons_arena.parallel_env(scenario=scenario_from_dict(data), render_mode=render_mode)

    return make


@pytest.fixture
def write_scenario(tmp_path: Path) -> Callable[..., Path]:
    """``write_scenario(data_or_text, filename="scenario.toml") -> Path`` in tmp_path."""

    def write(data: dict[str, Any] | str, filename: str = "scenario.toml") -> Path:
        path = tmp_path / filename
        path.write_text(data if isinstance(data, str) else toml_dumps(data), encoding="utf-8")
        return path

    return write


# --------------------------------------------------------------------------- unusual shapes


def _duo_one_tier_hard() -> dict[str, Any]:
    """2 custom-named teams, 1 tier, hard carbon cap, every shock kind scheduled."""
    return {
        "name": "duo_one_tier_hard",
        "description": "two custom teams on one tier under a hard carbon cap; every shock scheduled",
        "max_ticks": 10,
        "budget": 25.0,
        "reveal_after": 1,
        "queue_slots": 1,
        "price_levels": 2,
        "gpu_tiers": [{"name": "only", "owned": 3, "memory_gb": 24.0, "speed": 1.0, "op_cost": 0.3,
                       "power_kw": 0.8, "spot_inventory": 2, "spot_unit_cost": 1.5, "max_price": 7.0}],
        "carbon": {"cap_kg": 6.0, "mode": "hard", "intensity": [0.5, 0.9], "forecast_horizon": 1},
        "teams": [
            {"name": "alpha", "archetype": "greedy_bluffer", "board_pressure": 2.0,
             "jobs": [{"id": "base", "gpus": 2, "work": 3.0, "arrival": 0, "deadline": 4, "value": 9.0,
                       "value_noise": 1.0},
                      {"id": "follow", "gpus": 1, "work": 1.0, "arrival": 1, "deadline": 8, "value": 4.0,
                       "depends_on": ["base"]}]},
            {"name": "beta_team", "archetype": "safety_first",
             "jobs": [{"id": "x", "gpus": 3, "work": 3.0, "arrival": 2, "deadline": 6, "value": 12.0,
                       "priority": 4}]},
        ],
        "shocks": [
            {"kind": "compliance_audit", "tick": 1, "team": "alpha",
             "job": {"gpus": 1, "work": 1.0, "slack": 2, "value": 5.0}},
            {"kind": "customer_escalation", "tick": 2, "team": "beta_team",
             "job": {"gpus": 1, "work": 2.0, "slack": 1, "value": 6.0}},
            {"kind": "production_incident", "tick": 3, "tier": "only", "gpus_offline": 2, "duration": 2,
             "team": "alpha", "job": {"gpus": 1, "work": 1.0, "slack": 3, "value": 3.0}},
            {"kind": "market_crisis", "tick": 4, "duration": 3, "price_multiplier": 2.5, "inventory_factor": 0.5},
            {"kind": "grid_spike", "tick": 5, "duration": 2, "intensity_multiplier": 3.0},
        ],
        "population": {"alpha": "greedy_bluffer", "broker": "fixed_price"},
    }


def _octet_five_tiers() -> dict[str, Any]:
    """8 teams, 5 tiers (one without a spot market), generators, random shocks of every kind."""
    tiers = [
        {"name": f"tier{k}", "owned": 2 + k, "memory_gb": 8.0 * (k + 1), "speed": 1.0 + 0.5 * k,
         "op_cost": 0.1 * (k + 1), "power_kw": 0.2 * (k + 1), "spot_inventory": 0 if k == 4 else k + 1,
         "spot_unit_cost": 0.5 * k, "max_price": 4.0 + 2 * k}
        for k in range(5)
    ]
    names = ["ads", "maps", "mail", "video", "docs", "photos", "cloud", "play"]
    teams = []
    for i, name in enumerate(names):
        team: dict[str, Any] = {
            "name": name,
            "archetype": ["safety_first", "growth", "reliability", "truthful", "greedy_bluffer"][i % 5],
            "board_pressure": 0.5 + 0.25 * i,
            "jobs": [{"id": f"{name}_j0", "gpus": 1 + i % 3, "min_memory_gb": 8.0 * (i % 5), "work": 2.0 + i,
                      "arrival": i % 4, "deadline": i % 4 + 4, "value": 10.0 + i}],
        }
        if i % 2 == 0:
            team["generator"] = {"rate": 0.3, "first_tick": 1, "last_tick": 12, "gpus": [1, 3],
                                 "min_memory_gb": [0.0, 20.0, 33.0], "work": [1.0, 6.0], "slack": [1, 5],
                                 "value": [2.0, 30.0], "priority": [1, 3]}
        teams.append(team)
    return {
        "name": "octet_five_tiers",
        "description": "eight teams, five tiers, generators and random shocks of every kind",
        "difficulty": "crisis",
        "max_ticks": 15,
        "budget": 80.0,
        "queue_slots": 3,
        "price_levels": 5,
        "gpu_tiers": tiers,
        "carbon": {"cap_kg": 25.0, "mode": "soft", "intensity": [0.3, 0.6, 0.4], "forecast_horizon": 6},
        "teams": teams,
        "credibility": {"audit_tolerance": 0.0, "bluff_loss": 0.5, "unjustified_escalation_loss": 0.3},
        "shocks": [
            {"kind": "compliance_audit", "rate": 0.2, "team": "ads",
             "job": {"gpus": 1, "work": 1.0, "slack": 2, "value": 7.0}},
            {"kind": "customer_escalation", "rate": 0.2, "team": "play",
             "job": {"gpus": 2, "min_memory_gb": 30.0, "work": 2.0, "slack": 0, "value": 8.0}},
            {"kind": "production_incident", "rate": 0.15, "tier": "tier3", "gpus_offline": 9, "duration": 3,
             "team": "maps", "job": {"gpus": 1, "work": 1.0, "slack": 2, "value": 3.0}},
            {"kind": "market_crisis", "rate": 0.15, "duration": 2, "price_multiplier": 3.0,
             "inventory_factor": 0.3},
            {"kind": "grid_spike", "rate": 0.2, "duration": 2, "intensity_multiplier": 1.7},
            {"kind": "grid_spike", "tick": 7, "duration": 1, "intensity_multiplier": 2.0},
        ],
        "rewards": {"allocator": {"fairness": 3.0, "idle": 0.0}, "team": {"credibility": 4.0},
                    "broker": {"invalid": 1.0}},
    }


UNUSUAL = {"duo_one_tier_hard": _duo_one_tier_hard, "octet_five_tiers": _octet_five_tiers}


@pytest.fixture(params=sorted(UNUSUAL))
def unusual_scenario(request: pytest.FixtureRequest, write_scenario: Callable[..., Path]) -> Path:
    """Path of a scenario file of unusual shape, written to tmp_path (not in the repo)."""
    return write_scenario(UNUSUAL[request.param](), filename=f"{request.param}.toml")
