"""The engine's batched path: groups whose every seat has a batched form play all their seeds on the
batched core, and store exactly the rows the per-arena path stores (tournaments, evaluate, benchmark)."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import commons_arena
from experiments.evaluation import engine
from experiments.evaluation.benchmark import benchmark_seeds, run_benchmark
from experiments.evaluation.engine import PER_ARENA_ENV, on_batched_core
from experiments.evaluation.evaluate import evaluate
from experiments.evaluation.results import QUIET, fill_store, missing_groups
from experiments.evaluation.roster import Roster, roster_from_dict
from experiments.evaluation.store import ResultStore
from experiments.evaluation.suite import suite_from_dict
from policies.population import Population
from policies.registry import BATCHED, available_policies
from tests.experiments.evaluation.test_benchmark import tiny_file  # noqa: F401 (a fixture)

COMPARED = ("seat, scenario, scenario_hash, background, background_hash, player, player_hash, seed, policy, "
            "focal_return, episode")
# every allocator with a batched form (planner included; the oracle and any allocator without one play per arena)
SCRIPTED_ALLOCATORS = [name for name in available_policies("allocator") if name in BATCHED]


@pytest.fixture(autouse=True)
def batch_any_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small groups play batched here (the engine plays a group under ``MIN_ARENAS`` seeds per arena)."""
    monkeypatch.setattr(engine, "MIN_ARENAS", 1)


def stored(path: Path) -> list[tuple]:
    """Every row's identity and outcome (not its wall time), in key order."""
    with sqlite3.connect(path) as conn:
        return conn.execute(f"SELECT {COMPARED} FROM episodes ORDER BY seat, scenario, background, player, seed").fetchall()


BACKGROUNDS = {"default": {}, "bluffers": {"roles": {"team": "greedy_bluffer"}}}


def allocator_roster(scenarios: list[str], seeds: list[int], **extra: Any) -> Roster:
    return roster_from_dict({"scenarios": scenarios, "seeds": seeds, "entrants": SCRIPTED_ALLOCATORS,
                             "anchors": {"low": "random", "high": "best_fit"}, **extra}, source="(test)")


def forbid(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Make ``engine.<name>`` fail, so a run that reaches it (the other path) fails loudly."""
    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError(f"engine.{name} was called")
    monkeypatch.setattr(engine, name, refuse)


def both_ways(tmp_path: Path, rosters: list[Roster], monkeypatch: pytest.MonkeyPatch,
              only_batched: bool = True) -> tuple[list[tuple], list[tuple]]:
    """The stored rows of ``rosters`` played on the batched path, then forced per arena."""
    batched, per_arena = tmp_path / "batched.sqlite", tmp_path / "per_arena.sqlite"
    with monkeypatch.context() as patch:
        if only_batched:
            forbid(patch, "per_arena_episodes")  # every group must take the batched path
        with ResultStore(batched) as store:
            fill_store(rosters, store, replace(QUIET, workers=1))
    with monkeypatch.context() as patch:
        forbid(patch, "batched_episodes")
        with ResultStore(per_arena) as store:
            fill_store(rosters, store, replace(QUIET, workers=1, batched=False))
    return stored(batched), stored(per_arena)


def test_a_scripted_tournament_stores_the_same_rows_batched_and_per_arena(tmp_path, monkeypatch):
    roster = allocator_roster(["standard", "crisis"], [3, 11])
    assert all(on_batched_core(g) for g in missing_groups(roster, set()))
    batched, per_arena = both_ways(tmp_path, [roster], monkeypatch)
    assert len(batched) == roster.episodes == 2 * len(roster.players) * 2
    assert batched == per_arena


def test_learned_allocators_store_the_same_rows_batched_and_per_arena(tmp_path, monkeypatch):
    from policies.learned import ModuleInterface, save_policy
    from tests.policies.test_batch_learned import random_network

    config = commons_arena.load_scenario("crisis")
    interface = ModuleInterface(config, "allocator", np.ones(interface_width(config), np.float32), "need", 2)
    nvec = [int(n) for n in interface.action_space().nvec]
    save_policy(tmp_path / "mlp", random_network(interface.input_size, nvec, seed=3), config, "allocator",
                np.ones(interface_width(config), np.float32), "need", 2)
    roster = roster_from_dict({"scenarios": ["crisis"], "seeds": [3, 4, 9],
                               "entrants": [f"learned:{tmp_path / 'mlp'}", "learned:universal"],
                               "anchors": {"low": "random", "high": "planner"}}, source="(test)")
    assert all(on_batched_core(g) for g in missing_groups(roster, set()) if g.player.name.startswith("learned:"))
    batched, per_arena = both_ways(tmp_path, [roster], monkeypatch, only_batched=False)
    assert len(batched) == roster.episodes and batched == per_arena


def interface_width(config: Any) -> int:
    return commons_arena.parallel_env(config).observation_space("allocator").shape[0]


def test_a_group_longer_than_one_batch_plays_in_several_in_seed_order(tmp_path, monkeypatch):
    monkeypatch.setattr(engine, "MAX_ARENAS", 2)  # 5 seeds: batches of 2, 2 and 1
    sizes: list[list[int]] = []
    real = engine.batch_summaries

    def counted(config: Any, policies: Any, seeds: list[int]) -> Any:
        sizes.append(list(seeds))
        return real(config, policies, seeds)

    monkeypatch.setattr(engine, "batch_summaries", counted)
    roster = roster_from_dict({"scenarios": ["price_shock"], "seeds": {"first": 40, "count": 5},
                               "entrants": ["planner", "drf"], "anchors": {"low": "random", "high": "edf"}},
                              source="(test)")
    batched, per_arena = both_ways(tmp_path, [roster], monkeypatch)
    assert len(batched) == 4 * 5 and batched == per_arena
    assert sizes == [[40, 41], [42, 43], [44]] * 4


def test_the_team_seat_plays_batched_with_scripted_teams(tmp_path, monkeypatch):
    roster = roster_from_dict({"seat": "team:search", "scenarios": ["standard"], "seeds": [5, 6],
                               "entrants": ["greedy_bluffer", "truthful"],
                               "anchors": {"low": "truthful", "high": "greedy_bluffer"}}, source="(test)")
    groups = missing_groups(roster, set())
    assert groups and all(on_batched_core(g) for g in groups)
    batched, per_arena = both_ways(tmp_path, [roster], monkeypatch)
    assert len(batched) == roster.episodes and batched == per_arena


def test_who_plays_per_arena(tmp_path, monkeypatch):
    """The oracle, a uniformly random seat, a recording and the switches keep the per-arena path."""
    roster = roster_from_dict({"scenarios": ["standard"], "seeds": [1], "entrants": ["edf"],
                               "anchors": {"low": "random", "high": "oracle"}}, source="(test)")
    by_player = {g.player.name: g for g in missing_groups(roster, set())}
    assert on_batched_core(by_player["edf"]) and on_batched_core(by_player["random"])
    assert not on_batched_core(by_player["oracle"])
    assert not on_batched_core(by_player["edf"], batched=False)
    assert not on_batched_core(replace(by_player["edf"], record=tmp_path / "r.jsonl"))
    monkeypatch.setattr(engine, "MIN_ARENAS", 2)
    assert not on_batched_core(by_player["edf"])  # one seed: per arena is faster
    monkeypatch.setattr(engine, "MIN_ARENAS", 1)
    monkeypatch.setenv(PER_ARENA_ENV, "1")
    assert not on_batched_core(by_player["edf"])
    monkeypatch.setenv(PER_ARENA_ENV, "0")
    assert on_batched_core(by_player["edf"])
    team = roster_from_dict({"seat": "team:search", "scenarios": ["standard"], "seeds": [1], "entrants": ["truthful"],
                             "anchors": {"low": "random", "high": "truthful"}}, source="(test)")
    players = {g.player.name: g for g in missing_groups(team, set())}
    assert players["random"].player.uniform_random and not on_batched_core(players["random"])
    # a mixed roster stores the same rows whichever path each group takes
    batched, per_arena = both_ways(tmp_path, [roster, team], monkeypatch, only_batched=False)
    assert len(batched) == 3 + 2 and batched == per_arena


def test_play_matches_the_reference_episode_of_each_seed_on_the_batched_core(monkeypatch):
    """Each arena's episode totals are the reference env's for its seed, whatever the batch holds."""
    config = commons_arena.load_scenario("standard")
    lineup = Population.default(config).with_agent("allocator", "planner")
    seeds = [7, 3, 7]
    batched = [e.summaries for e in engine.play(config, lineup, seeds)]
    forbid(monkeypatch, "batched_episodes")
    reference = [e.summaries for e in engine.play(config, lineup, seeds, batched=False)]
    assert batched == reference and batched[0] == batched[2] != batched[1]


def test_evaluate_gives_the_same_tables_batched_and_per_arena(monkeypatch):
    batched = evaluate(["standard"], ["planner"], [11, 12], misreport=True, progress=False)
    monkeypatch.setenv(PER_ARENA_ENV, "1")
    forbid(monkeypatch, "batched_episodes")
    per_arena = evaluate(["standard"], ["planner"], [11, 12], misreport=True, progress=False)
    assert batched.episodes == per_arena.episodes
    for table in ("rows", "episode_scores", "misreport"):  # repr: a nan cell equals itself
        assert repr(getattr(batched, table)) == repr(getattr(per_arena, table))


def test_a_benchmark_stores_the_same_rows_batched_and_per_arena(tmp_path, tiny_file):  # noqa: F811
    suite = suite_from_dict({"name": "tiny-suite", "evaluation": [{"scenario": str(tiny_file)},
                                                                  {"scenario": "standard", "background": "bluffers"}],
                             "backgrounds": BACKGROUNDS},
                            source="tiny-suite")
    seeds = benchmark_seeds(2)
    run_benchmark(suite, "edf", seeds, tmp_path / "batched", options=QUIET)
    run_benchmark(suite, "edf", seeds, tmp_path / "per_arena", options=replace(QUIET, batched=False))
    rows = stored(tmp_path / "batched" / "results.sqlite")
    assert len(rows) == 2 * 4 * 2 and rows == stored(tmp_path / "per_arena" / "results.sqlite")


@pytest.mark.slow
def test_every_shipped_scenario_stores_the_same_rows_batched_and_per_arena(tmp_path, monkeypatch):
    rosters = [allocator_roster(commons_arena.list_scenarios(), list(range(100, 108)), backgrounds=BACKGROUNDS)]
    rosters.append(roster_from_dict({"seat": "team:search", "scenarios": commons_arena.list_scenarios(),
                                     "seeds": list(range(100, 104)),
                                     "entrants": ["greedy_bluffer", "truthful", "growth"],
                                     "anchors": {"low": "truthful", "high": "greedy_bluffer"}}, source="(test)"))
    batched, per_arena = both_ways(tmp_path, rosters, monkeypatch)
    assert len(batched) == sum(r.episodes for r in rosters) and batched == per_arena



@pytest.mark.slow
def test_generated_scenarios_and_the_broker_seat_store_the_same_rows_batched_and_per_arena(tmp_path, monkeypatch):
    from commons_arena.family import generate_one, load_family

    configs = [generate_one(load_family("broad"), 0, index) for index in range(12)]  # caps, many teams, shocks
    generated = roster_from_dict({"scenarios": [c.name for c in configs], "seeds": [0, 1, 2],
                                  "entrants": ["planner", "edf", "drf", "max_min_fair"],
                                  "anchors": {"low": "random", "high": "best_fit"}, "backgrounds": BACKGROUNDS},
                                 source="(test)", parsed=configs)
    broker = roster_from_dict({"seat": "broker", "scenarios": ["market_baseline"], "seeds": [0, 1, 2, 3],
                               "entrants": ["demand_priced", "fixed_price"],
                               "anchors": {"low": "fixed_price", "high": "demand_priced"}}, source="(test)")
    rosters = [generated, broker]
    batched, per_arena = both_ways(tmp_path, rosters, monkeypatch)
    assert len(batched) == sum(r.episodes for r in rosters) and batched == per_arena
