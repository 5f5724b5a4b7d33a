"""Shared fixtures: scenario builders (as dicts and as TOML files in tmp_path).

Test modules parametrise over ``commons_arena.list_scenarios()`` themselves, so a new
file in ``scenarios/`` is covered without touching this file.
"""

from __future__ import annotations

import ast
import copy
import gc
import itertools
import json
import os
import re
import sys
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

import pytest

import commons_arena
from commons_arena.scenario import scenario_from_dict
from tests.sweeps import swept

# --------------------------------------------------------------------------- markers

# `pytest -m "not slow"` is the fast loop; the README's test command runs everything. Each test
# carries its own marks: `pytestmark = [...]` at the top of a module, `@pytest.mark.slow` on a test,
# or `pytest.param(..., marks=...)` on a case (sweeps: tests/sweeps.py). Markers are registered in
# pyproject.toml. Here the marks are only checked: a need (Ray, RLlib, a browser) implies `slow`,
# a test on the `ray_session` fixture is marked `ray`, and a test that is not marked for a need
# must not meet it (import RLlib or selenium, start Ray): see :func:`check_needs`.
SLOW_NEEDS = ("rllib", "ray", "browser")  # each of these is also `slow`; `server` may be quick
NEEDS_MODULES = {"rllib": ("ray.rllib",), "browser": ("selenium",)}


def module_marks(path: Path) -> set[str]:
    """The mark names of a test module's top-level ``pytestmark``, read from its source (not imported)."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
            values = node.value.elts if isinstance(node.value, ast.List | ast.Tuple) else [node.value]
            values = [value.func if isinstance(value, ast.Call) else value for value in values]  # timeout(600)
            return {value.attr for value in values
                    if isinstance(value, ast.Attribute) and getattr(value.value, "attr", None) == "mark"}
    return set()


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
    if not expression or collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    marks = module_marks(collection_path)
    return True if marks and deselects_every_test(expression, marks) else None


def marking_errors(item: pytest.Item) -> list[str]:
    """What is wrong with one test's marks: a need without `slow`, Ray's fixture without `ray`."""
    marks = {mark.name for mark in item.iter_markers()}
    errors = [f"{item.nodeid} is marked {need} but not slow" for need in SLOW_NEEDS if need in marks and "slow" not in marks]
    if "ray_session" in getattr(item, "fixturenames", ()) and "ray" not in marks:
        errors.append(f"{item.nodeid} uses ray_session but is not marked ray")
    return errors


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects anything
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    errors = [error for item in items for error in marking_errors(item)]
    if errors:
        raise pytest.UsageError("tests/conftest.py, marks: " + "; ".join(errors))


def missing_modules() -> dict[str, set[str]]:
    """Per need, its modules not imported yet."""
    return {need: {m for m in modules if m not in sys.modules} for need, modules in NEEDS_MODULES.items()}


def unmarked_needs(marks: Collection[str], missing_before: dict[str, set[str]], ray_was_up: bool) -> list[str]:
    """The needs a test met without carrying their marks: modules of a need it imported (missing
    before it ran, there after) or Ray started."""
    met = [f"imports {m}, so it needs the `{need}` mark" for need, modules in missing_before.items()
           if need not in marks for m in sorted(modules) if m in sys.modules]
    if "ray" not in marks and not ray_was_up and _ray_is_up():
        met.append("starts Ray, so it needs the `ray` mark")
    return met


def _ray_is_up() -> bool:
    ray = sys.modules.get("ray")
    return bool(ray is not None and ray.is_initialized())


@pytest.fixture(autouse=True)
def check_needs(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test not marked for a need must not meet it (see :func:`unmarked_needs`)."""
    missing, ray_was_up = missing_modules(), _ray_is_up()
    yield
    met = unmarked_needs({mark.name for mark in request.node.iter_markers()}, missing, ray_was_up)
    if met:
        pytest.fail(f"{request.node.nodeid} " + "; ".join(met), pytrace=False)


_IMPORTED_BY: dict[str, str] = {}  # a need's module -> the collector during whose collection it was first imported


def pytest_collectreport(report: pytest.CollectReport) -> None:
    for module in (m for modules in NEEDS_MODULES.values() for m in modules):
        if module in sys.modules:
            _IMPORTED_BY.setdefault(module, report.nodeid)


def pytest_collection_finish(session: pytest.Session) -> None:
    """A module that `-m` keeps must not import a need's modules at import time unless `-m` keeps that need."""
    expression = session.config.option.markexpr
    wrong = [f"{where or 'the conftest'} imports {module}" for need, modules in NEEDS_MODULES.items()
             if expression and deselects_every_test(expression, {need, "slow"})
             for module in modules if (where := _IMPORTED_BY.get(module)) is not None or module in sys.modules]
    if wrong:
        raise pytest.UsageError("tests/conftest.py, marks: " + "; ".join(wrong) + f", though -m {expression!r} "
                                "runs none of its tests: mark the module whole (pytestmark) or import it in the tests")
    gc.collect()  # what collection imported (torch, the MCP SDK, the modules under test) lives to the end: see below
    gc.freeze()


# --------------------------------------------------------------------------- garbage collection

# A run's heap is large and long-lived: the modules imported by collection (frozen above, so no later collection
# walks them again) and what tests keep for the whole run (the syntax trees tests/test_layout.py parses once for
# every source check). At CPython's default thresholds each full collection walked all of it again: 8 s of the
# fast loop's 68 s of CPU (2026-12-07); rarer young collections leave them rare (about 3 s, memory unchanged).
gc.set_threshold(50_000, 20, 10)


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


@pytest.fixture(params=swept(sorted(UNUSUAL)))
def unusual_scenario(request: pytest.FixtureRequest, write_scenario: Callable[..., Path]) -> Path:
    """Path of a scenario file of unusual shape, written to tmp_path (not in the repo)."""
    return write_scenario(UNUSUAL[request.param](), filename=f"{request.param}.toml")
