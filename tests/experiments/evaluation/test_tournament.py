"""Tournaments: rosters, every cell played by every player, the results store (rerun, kill,
changed content), Ray batches, aggregates and the meta-game, the command line."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import commons_arena
from commands.cli import main
from experiments.evaluation.evaluate import evaluate
from experiments.evaluation.metagame import match_ranks, nash_win_rates, zero_sum_nash
from experiments.evaluation.results import QUIET, fill_store, missing_groups
from experiments.evaluation.roster import RosterError, load_roster, roster_from_dict
from experiments.evaluation.store import ChangedError, EpisodeKey, ResultStore
from experiments.evaluation.tournament import flag_roster, run_tournament
from experiments.evaluation.workers import choose_workers, group_seconds, parcels
from tests.commands.test_cli_errors import assert_one_line_error, run_cli

ROOT = Path(__file__).resolve().parents[3]
SEEDS = [11, 12, 13]
COMPARED = "seat, scenario, scenario_hash, background, background_hash, player, player_hash, seed, policy, focal_return, episode"


def stored(path: Path) -> list[tuple]:
    """Every row's identity and outcome (not its wall time), in key order."""
    with sqlite3.connect(path) as conn:
        return conn.execute(f"SELECT {COMPARED} FROM episodes ORDER BY seat, scenario, background, player, seed").fetchall()


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


ALLOCATOR_ROSTER = """
name = "two allocators, two backgrounds"
scenarios = ["standard"]
seeds = [11, 12, 13]
[entrants]
edf = "edf"
patient = { policy = "best_fit", pacing = 0.5 }
[backgrounds.default]
[backgrounds.bluffers]
roles = { team = "greedy_bluffer" }
"""


@pytest.fixture(scope="module")
def allocator_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("allocator")
    roster = load_roster(write(out / "roster.toml", ALLOCATOR_ROSTER))
    return roster, run_tournament(roster, out, options=QUIET), out


# --------------------------------------------------------------------------- rosters


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('scenarios = ["standard"]\nseeds = [1]\nentrants = ["edf"]\ncolour = "red"', "colour: Extra inputs"),
        ('scenarios = ["standard"]\nseeds = [1]\n[entrants]\nx = "nope"', "entrants.x: unknown policy 'nope'"),
        ('scenarios = ["standard"]\nseeds = [1]\n[entrants]\nx = "truthful"', "entrants.x: policy 'truthful' plays the team role"),
        ('scenarios = ["standard"]\nseeds = [1]\n[entrants]\nx = { policy = "edf", speed = 2 }', "entrants.x: policy 'edf' has no parameter"),
        ('seat = "team:nobody"\nscenarios = ["standard"]\nseeds = [1]\nentrants = ["truthful"]', "seat: scenario 'standard' has no team 'nobody'"),
        ('scenarios = ["standard"]\nseeds = [1, 1]\nentrants = ["edf"]', "seeds: seeds repeat"),
        ('scenarios = ["standard"]\nseeds = { first = 0, count = 0 }\nentrants = ["edf"]', "seeds: count must be 1 .. 1000000"),
        ('scenarios = ["no_such"]\nseeds = [1]\nentrants = ["edf"]', "scenarios[0]: no scenario named 'no_such'"),
        ('scenarios = ["standard"]\nseeds = [1]\nentrants = ["edf"]\n[backgrounds.b]\nroles = { team = "edf" }',
         "backgrounds.b: roles.team: policy 'edf' plays the allocator role"),
        ('scenarios = ["standard"]\nseeds = [1]\nentrants = ["edf"]\n[backgrounds.b]\nroles = { team = "learned:/no/ckpt" }',
         "backgrounds.b: roles.team: /no/ckpt is not a commons_arena policy checkpoint"),
        ('scenarios = ["standard"]\nseeds = [1]\n[entrants]\nrandom = "edf"', "anchors.low: name 'random' is taken"),
        ('scenarios = ["standard"]\nseeds = [1]', "entrants: Field required"),
        ('scenarios = [\n', "not valid TOML"),
    ],
)
def test_roster_errors_name_file_and_key(tmp_path, text, expected):
    path = write(tmp_path / "bad.toml", text)
    with pytest.raises(RosterError) as err:
        load_roster(path)
    assert str(path) in str(err.value) and expected in str(err.value)


def test_roster_reads_every_part(tmp_path, tiny, write_scenario):
    write_scenario(tiny, filename="tiny.toml")
    roster = load_roster(write(tmp_path / "r.toml", """
        seat = "search"
        scenarios = ["tiny.toml"]
        seeds = { first = 7, count = 2 }
        [entrants]
        honest = "truthful"
        liar = { policy = "greedy_bluffer", bluff = 2.0 }
        [backgrounds.harsh]
        agents = { allocator = "edf", broker = "fixed_price" }
        [anchors]
        high = "truthful"
    """))
    assert roster.seat == "team:search" and roster.seeds == (7, 8)
    assert roster.scenarios[0].name == "tiny"  # a relative path resolves against the roster's folder
    assert [(p.name, p.anchor, p.entrant) for p in roster.players] == [
        ("honest", "high", True), ("liar", "", True), ("random", "low", False)]
    assert roster.players[1].entry.params == {"bluff": 2.0}
    assert roster.episodes == 3 * 1 * 1 * 2


# --------------------------------------------------------------------------- playing


@pytest.mark.slow
def test_every_player_plays_every_cell_on_the_same_seeds(allocator_run):
    roster, result, _ = allocator_run
    rows = stored(result.store)
    assert len(rows) == roster.episodes == 4 * 1 * 2 * 3
    cells = {}
    for row in rows:
        cells.setdefault(row[5], set()).add((row[1], row[3], row[7]))
    assert set(cells) == {"edf", "patient", "random", "oracle"}
    assert all(c == {("standard", b, s) for b in ("default", "bluffers") for s in SEEDS} for c in cells.values())


@pytest.mark.slow
def test_scores_match_the_evaluate_table_on_the_same_seeds(allocator_run):
    _, result, _ = allocator_run
    table = evaluate(["standard"], ["edf"], SEEDS, misreport=False, progress=False)
    expected = {row["allocator"]: row for row in table.rows}
    got = {row["player"]: row for row in result.aggregates.scores if row["background"] == "default"}
    for name in ("random", "oracle", "edf"):
        assert got[name]["return_mean"] == pytest.approx(expected[name]["reward_mean"])
        assert got[name]["score"] == pytest.approx(expected[name]["score"])
    assert got["oracle"]["ratio"] == pytest.approx(1.0) and got["random"]["score"] == pytest.approx(0.0)
    assert got["edf"]["ratio"] == pytest.approx(expected["edf"]["reward_mean"] / expected["oracle"]["reward_mean"])


@pytest.mark.slow
def test_aggregates_and_figures(allocator_run):
    roster, result, out = allocator_run
    agg = result.aggregates
    names = {p.name for p in result.written}
    assert {"scores.csv", "scores.md", "scores.png", "standings.md", "standings.png", "win_matrix.png",
            "crossplay.csv", "crossplay.png", "metagame.md"} <= names
    standings = {row["player"]: row for row in agg.standings}
    assert agg.standings[0]["player"] == "oracle" and standings["oracle"]["wins"] == 2 * len(SEEDS)
    assert np.isnan(standings["oracle"]["nash_win_rate"])  # anchors are not in the entrants' meta-game
    wins = {row["player"]: row for row in agg.win_matrix}
    assert wins["edf"]["patient"] + wins["patient"]["edf"] == pytest.approx(1.0)
    assert wins["oracle"]["random"] == 1.0
    assert [row["entrant"] for row in agg.crossplay] == ["edf", "patient"]
    weights = [row["weight"] for row in agg.metagame if row["side"] == "background"]
    assert len(weights) == 2 and sum(weights) == pytest.approx(1.0)
    assert len(agg.scores) == roster.episodes // len(SEEDS)


@pytest.mark.slow
def test_other_seats(tmp_path):
    """A team seat (uniform-random anchor, best entrant = 1), all teams, and the broker."""
    for seat, entrants in (("search", ["truthful", "greedy_bluffer"]), ("teams", ["truthful", "safety_first"]),
                           ("broker", ["demand_priced", "fixed_price"])):
        roster = roster_from_dict({"seat": seat, "scenarios": ["standard"], "seeds": [3, 4], "entrants": entrants})
        result = run_tournament(roster, tmp_path / seat, options=QUIET)
        scores = {row["player"]: row for row in result.aggregates.scores}
        assert set(scores) == {*entrants, "random"}
        assert scores["random"]["score"] == pytest.approx(0.0)
        assert max(scores[e]["score"] for e in entrants) == pytest.approx(1.0)  # the best entrant anchors 1


@pytest.mark.slow
def test_the_focal_seat_is_the_players(tmp_path):
    """A background's entry for the focal seat never plays: the focal agents are the player's."""
    roster = roster_from_dict({"seat": "search", "scenarios": ["standard"], "seeds": [5], "entrants": ["truthful"],
                               "backgrounds": {"b": {"agents": {"search": "greedy_bluffer"}}}})
    result = run_tournament(roster, tmp_path, options=QUIET)
    with ResultStore(result.store) as store:
        row = next(r for r in store.rows() if r["player"] == "truthful")
    env = commons_arena.parallel_env(scenario="standard")
    from policies.focal import run_episode
    from policies.population import Population

    direct = run_episode(env, Population(agents={"search": "truthful"}), 5)
    assert row["episode"]["search"]["return"] == pytest.approx(direct["search"]["return"])


def test_small_tournaments_stay_in_process():
    roster = flag_roster(["standard"], ["edf"], list(range(5)))  # 3 players x 5 seeds = 15 episodes
    groups = missing_groups(roster, set())
    assert choose_workers(groups, None, None, 15.0)[0] == 1  # default workers: all CPUs, but not worth Ray
    assert choose_workers(groups, 2, None, 0.0)[0] == 2


def test_heavy_episodes_are_tasks_of_their_own_and_start_first(monkeypatch):
    """An episode estimated at HEAVY_EPISODE_SECONDS or more (here: the oracle's, with the threshold lowered) is one
    parcel, so one slow scenario's seeds spread over every worker; those parcels come first, the slowest first, and
    the cheap episodes follow in parcels of consecutive seeds; every episode is in exactly one parcel."""
    import experiments.evaluation.workers as workers

    roster = flag_roster(["standard", "cost_pressure"], ["edf"], list(range(4)))  # random, oracle, edf x 2 x 4
    groups = missing_groups(roster, set())
    oracle = [g for g in groups if not g.player.uniform_random and g.player.entry.policy == "oracle"]
    per_episode = {g.evaluation.config.name: group_seconds(g) / len(g.seeds) for g in oracle}
    monkeypatch.setattr(workers, "HEAVY_EPISODE_SECONDS", min(per_episode.values()) * 0.99)
    parts = parcels(groups, 2)
    played = [(i, seed) for part in parts for i, g in part for seed in g.seeds]
    assert sorted(played) == sorted((i, seed) for i, g in enumerate(groups) for seed in g.seeds)
    heavy = parts[:len(oracle) * 4]
    assert all(len(part) == 1 and len(part[0][1].seeds) == 1 and part[0][1].player.entry.policy == "oracle"
               for part in heavy)
    costs = [group_seconds(part[0][1]) for part in heavy]
    assert costs == sorted(costs, reverse=True)
    assert [part[0][1].evaluation.config.name for part in heavy[:4]] == [max(per_episode, key=per_episode.get)] * 4
    assert not any(not g.player.uniform_random and g.player.entry.policy == "oracle"
                   for part in parts[len(heavy):] for _, g in part)


def test_the_oracles_estimate_grows_with_a_clusters_jobs_and_shrinks_with_its_gpus():
    import experiments.evaluation.workers as engine

    config = commons_arena.load_scenario("standard")
    floor = engine.ORACLE_SECONDS_PER_TICK * config.max_ticks
    assert engine.oracle_episode_seconds(config) >= floor
    jobs = engine.expected_jobs(config)
    assert jobs == sum(len(t.jobs) for t in config.teams) + sum(
        (g.last_tick - g.first_tick + 1) * g.rate for t in config.teams if (g := t.generator)) + sum(
        1.0 if s.tick is not None else s.rate * config.max_ticks for s in config.shocks if s.job is not None)
    more_gpus = config.model_copy(update={"gpu_tiers": tuple(t.model_copy(update={"owned": t.owned * 10})
                                                            for t in config.gpu_tiers)})
    busy = config.model_copy(update={"teams": tuple(t.model_copy(update={"jobs": t.jobs * 4}) for t in config.teams)})
    assert engine.oracle_episode_seconds(busy) > engine.oracle_episode_seconds(config) >= \
        engine.oracle_episode_seconds(more_gpus)


@pytest.mark.slow
def test_parcels_cover_every_episode_once_in_balanced_parts(allocator_run):
    roster, _, _ = allocator_run
    groups = missing_groups(roster, set())
    parts = parcels(groups, 2)
    played = [(i, seed) for part in parts for i, g in part for seed in g.seeds]
    assert sorted(played) == sorted((i, seed) for i, g in enumerate(groups) for seed in g.seeds)
    assert 5 <= len(parts) <= 7  # about three per worker
    costs = [sum(group_seconds(g) for _, g in part) for part in parts]
    assert max(costs[:-1]) < 2 * min(costs[:-1])  # the oracle's expensive episodes are spread, not lumped
    assert all(len({i for i, _ in part}) == len(part) for part in parts)  # one run of each group in a parcel


@pytest.mark.slow
@pytest.mark.ray
def test_ray_parcels_store_the_same_rows(ray_session, allocator_run, tmp_path):
    roster, result, _ = allocator_run
    with ResultStore(tmp_path / "ray.sqlite") as store:
        report = fill_store([roster], store, replace(QUIET, workers=2, ray_min_seconds=0.0))
    assert report.mode == "ray x2" and report.played == roster.episodes
    assert stored(tmp_path / "ray.sqlite") == stored(result.store)


# --------------------------------------------------------------------------- the store


def test_store_never_doubles_an_episode(tmp_path):
    key = EpisodeKey("allocator", "standard", "h", "default", "b", "edf", "p", 1)
    with ResultStore(tmp_path / "s.sqlite") as store:
        assert store.append(key, "edf", 1.0, {"allocator": {"return": 1.0}}, 0.1)
        assert not store.append(key, "edf", 2.0, {"allocator": {"return": 2.0}}, 0.1)
        assert store.count() == 1 and store.rows()[0]["focal_return"] == 1.0
        assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.mark.parametrize(("column", "value", "match"), [
    ("focal_return", "'abc'", "focal_return"), ("seed", "-5", "seed: Input should be greater than or equal to 0"),
    ("seed", "'seven'", "seed"), ("episode", "'[' || printf('%.3000c', '[')", "nests deeper than 32"),
    ("episode", "'not json'", "not valid JSON"), ("episode", "'[1]'", "episode: Input should be a valid dictionary"),
    ("wall_seconds", "-1.0", "wall_seconds"), ("player", "''", "player"),
])
def test_a_tampered_store_row_is_refused_by_the_one_reader(tmp_path, column, value, match):
    """Issue 44: SQLite's column types are advisory; rows are read back into a checked model, never trusted."""
    key = EpisodeKey("allocator", "standard", "h", "default", "b", "edf", "p", 1)
    with ResultStore(tmp_path / "s.sqlite") as store:
        store.append(key, "edf", 1.0, {"allocator": {"return": 1.0}}, 0.1)
        store.conn.execute(f"UPDATE episodes SET {column} = {value}")
        with pytest.raises(ValueError, match=match) as err:
            store.rows()
    assert "results store" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.slow
def test_rerun_plays_only_missing_rows(allocator_run, tmp_path):
    roster, result, _ = allocator_run
    db = tmp_path / "copy.sqlite"
    with sqlite3.connect(result.store) as src, sqlite3.connect(db) as dst:
        src.backup(dst)
        dst.execute("DELETE FROM episodes WHERE player = 'edf' AND seed = 12")
    again = run_tournament(roster, tmp_path, db=db, options=QUIET)
    assert again.play.played == 2 and again.play.already_stored == roster.episodes - 2
    assert stored(db) == stored(result.store)
    assert run_tournament(roster, tmp_path, db=db, options=QUIET).play.played == 0


@pytest.mark.slow
def test_a_changed_scenario_is_refused_unless_allowed(tmp_path, tiny, write_scenario):
    path = write_scenario(tiny, filename="tiny.toml")
    data = {"scenarios": [str(path)], "seeds": [1, 2], "entrants": ["edf"], "anchors": {"high": "best_fit"}}
    run_tournament(roster_from_dict(data), tmp_path / "out", options=QUIET)
    tiny["budget"] = 25.0
    write_scenario(tiny, filename="tiny.toml")
    changed = roster_from_dict(data)
    with pytest.raises(ChangedError, match="scenario 'tiny' is now .*--allow-changed"):
        run_tournament(changed, tmp_path / "out", options=QUIET)
    result = run_tournament(changed, tmp_path / "out", options=replace(QUIET, allow_changed=True))
    assert result.play.played == 3 * 2
    assert len(stored(result.store)) == 2 * 3 * 2  # the old rows stay; the tables use the new ones
    assert {row["episodes"] for row in result.aggregates.scores} == {2}
    again = run_tournament(changed, tmp_path / "out", options=QUIET)  # accepted once: no flag
    assert again.play.played == 0
    tiny["budget"] = 20.0  # back to the first version: its rows are still there
    write_scenario(tiny, filename="tiny.toml")
    assert run_tournament(roster_from_dict(data), tmp_path / "out", options=QUIET).play.played == 0


KILL_ROSTER = """
scenarios = ["standard", "elevated"]
seeds = { first = 100, count = 12 }
entrants = ["edf", "proportional", "fifo"]
[anchors]
high = "best_fit"
"""


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The kill test's roster and the rows of its uninterrupted, in-process run."""
    out = tmp_path_factory.mktemp("whole")
    roster_path = write(out / "kill.toml", KILL_ROSTER)
    whole = run_tournament(load_roster(roster_path), out, options=replace(QUIET, workers=1))
    return roster_path, stored(whole.store)


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", pytest.param("2", marks=pytest.mark.ray)], ids=["in-process", "ray"])
def test_a_killed_run_resumes_to_exactly_the_uninterrupted_rows(uninterrupted, tmp_path, workers):
    """SIGKILL a real `commons-arena tournament` process midway (in-process, or driving Ray
    workers), rerun it, and compare every row with an uninterrupted run."""
    roster_path, expected = uninterrupted
    total = len(expected)  # 5 players x 2 scenarios x 12 seeds = 120
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "commands", "tournament", str(roster_path), "--out", str(out), "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    kill_seed = 20_231 + int(workers)  # seeded: a failure at one kill point reruns at the same point
    target = random.Random(kill_seed).randint(20, total // 2)  # after this many stored episodes
    proc = subprocess.Popen([*cmd, "--workers", workers, "--ray-min-seconds", "0"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    db = out / "results.sqlite"
    deadline = time.monotonic() + 240
    count = 0
    while count < target and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
        if db.exists():
            try:
                with sqlite3.connect(db) as conn:
                    count = conn.execute("SELECT COUNT(*) FROM episodes").fetchone()[0]
            except sqlite3.OperationalError:  # the table is being created
                continue
    assert proc.poll() is None, f"the run ended before the kill: {proc.stderr.read().decode()[-2000:]}"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    at_kill = len(stored(db))
    assert target <= at_kill < total
    rerun = subprocess.run([*cmd, "--workers", "1"], env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert f"{at_kill} of {total} episodes already in" in rerun.stdout
    assert stored(db) == expected


# --------------------------------------------------------------------------- meta-game


def test_zero_sum_nash():
    rps = np.array([[0, -1, 1], [1, 0, -1], [-1, 1, 0]])
    row, col, value = zero_sum_nash(rps)
    assert row == pytest.approx([1 / 3] * 3, abs=1e-6) and col == pytest.approx([1 / 3] * 3, abs=1e-6)
    assert value == pytest.approx(0.0, abs=1e-9)
    row, col, value = zero_sum_nash(np.array([[3.0, 1.0], [2.0, 0.0]]))  # row 0 dominates, column 1 dominates
    assert row == pytest.approx([1, 0]) and col == pytest.approx([0, 1]) and value == pytest.approx(1.0)


def test_beating_only_weak_entrants_is_not_ranked_first():
    # A crushes the two weak entrants but loses to B; B beats everyone narrowly.
    wins = np.array([[0.5, 0.3, 1.0, 1.0],
                     [0.7, 0.5, 0.6, 0.6],
                     [0.0, 0.4, 0.5, 0.5],
                     [0.0, 0.4, 0.5, 0.5]])
    mean_rate = (wins.sum(axis=1) - 0.5) / 3
    assert mean_rate.argmax() == 0  # by average win rate A looks best
    mixture, rates = nash_win_rates(wins)
    assert mixture == pytest.approx([0, 1, 0, 0]) and rates.argmax() == 1


def test_ratings_agree_with_the_win_matrix_whatever_the_order_of_the_cells():
    """Issue 18: openskill, fed the cells in table order, rated first a team that lost most of its
    pairwise comparisons but won the last block of cells (it is an online filter: the last
    matches weigh most). The rating is now the mean over seeded orders of the cells."""
    from experiments.evaluation.metagame import _openskill

    players = ["a", "b", "c", "d", "late"]
    rng = np.random.default_rng(3)
    cells = 120
    steady = np.array([4.0, 3.0, 2.0, 1.0]) + rng.normal(0, 0.1, (cells, 4))
    wins_late = np.arange(cells) >= 0.7 * cells  # first in the last 30 % of the cells, last before
    table = np.column_stack([steady, np.where(wins_late, 10.0, -10.0)])
    assert np.mean(table[:, 4:5] > table[:, :4], axis=0) == pytest.approx([0.3] * 4, abs=0.01)  # loses 70 % to each
    ratings, firsts = _openskill(players, table)
    order = sorted(players, key=lambda p: ratings[p].ordinal(), reverse=True)
    assert order == ["a", "b", "c", "d", "late"] and firsts["late"] == 36
    early, _ = _openskill(players, table[::-1])  # the same cells, the winning block first
    assert [early[p].mu for p in players] == pytest.approx([ratings[p].mu for p in players], abs=3.0)
    again, _ = _openskill(players, table)
    assert [again[p].mu for p in players] == [ratings[p].mu for p in players]  # seeded: the same table, the same ratings


def test_match_ranks_share_ties():
    assert match_ranks([3.0, 5.0, 3.0, 1.0]) == [2, 1, 2, 4]


# --------------------------------------------------------------------------- command line


@pytest.mark.slow
def test_cli_roster_and_flag_forms(tmp_path, capsys):
    roster = write(tmp_path / "r.toml", 'scenarios = ["standard"]\nseeds = [1, 2]\nentrants = ["edf"]\n')
    main(["tournament", str(roster), "--out", str(tmp_path / "a"), "--no-progress"])
    assert (tmp_path / "a" / "standings.md").is_file() and len(stored(tmp_path / "a" / "results.sqlite")) == 6
    main(["tournament", "--scenarios", "standard", "--allocators", "edf", "--seeds", "2", "--first-seed", "1",
          "--out", str(tmp_path / "b"), "--no-progress"])
    assert stored(tmp_path / "a" / "results.sqlite") == stored(tmp_path / "b" / "results.sqlite")
    assert run_cli(capsys, "tournament", str(roster), "--out", str(tmp_path / "a"), "--no-progress")[0] == 0  # resumed


def test_cli_bad_tournament_input_is_one_line(tmp_path, capsys):
    roster = write(tmp_path / "r.toml", 'scenarios = ["standard"]\nseeds = [1]\nentrants = ["edf"]\n')
    bad = write(tmp_path / "bad.toml", 'scenarios = ["standard"]\nseeds = [1]\n[entrants]\nx = "truthful"\n')
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    for argv, match in [
        (["tournament", str(roster), "--seeds", "3"], "give a roster file or --seeds, not both"),
        (["tournament", "--seeds", "0"], "--seeds must be a finite number in [1, 100000]"),
        (["tournament", str(roster), "--workers", "0"], "--workers must be a finite number in [1, 1024]"),
        (["tournament", str(bad)], f"roster {bad}: entrants.x: policy 'truthful' plays the team role"),
        (["tournament", str(tmp_path / "missing.toml")], "roster file not found"),
        (["tournament", str(roster), "--out", str(other)], "already holds files; pass --force"),
    ]:
        assert_one_line_error(capsys, *argv, match=match)
    assert (other / "notes.txt").read_text() == "mine" and not (other / "results.sqlite").exists()


def test_stored_rows_become_one_series_per_cell():
    """store.by_seed: the one reading of stored rows as per-seed series (tables, exploit, arms race)."""
    from experiments.evaluation.store import by_seed

    rows = [{"scenario": "s", "background": "b", "player": p, "seed": seed, "focal_return": r, "episode": {"x": r}}
            for p, seed, r in (("a", 2, 1.0), ("a", 1, 2.0), ("c", 1, 3.0))]
    assert by_seed(rows, lambda row: row["focal_return"]) == {("s", "b", "a"): {2: 1.0, 1: 2.0}, ("s", "b", "c"): {1: 3.0}}
    assert by_seed(rows, lambda row: row["episode"]["x"] * 2)[("s", "b", "c")] == {1: 6.0}


def test_the_engine_plays_what_run_episode_plays_and_shows_every_tick():
    """engine.play: the same episodes as policies.focal.run_episode for a population, built policies or a
    factory; an observer sees every tick in order and changes nothing."""
    import commons_arena
    from experiments.evaluation.engine import Observer, play
    from policies.focal import run_episode
    from policies.population import Population

    config = commons_arena.load_scenario("crisis")
    population = Population.default(config).with_agent("allocator", "planner")
    expected = [run_episode(commons_arena.parallel_env(config), population, seed) for seed in (3, 4)]

    class Ticks(Observer):
        def __init__(self) -> None:
            self.seen: list[tuple[str, int, int, int]] = []

        def begin(self, seed: int) -> None:
            self.seen.append(("begin", seed, -1, 0))

        def tick(self, tick) -> None:
            assert set(tick.observations) == set(tick.actions) == set(config.agents)
            self.seen.append(("tick", tick.seed, tick.index, len(tick.env.seat_infos)))

        def end(self, episode) -> None:
            self.seen.append(("end", episode.seed, -1, 0))

    watched = Ticks()
    env = commons_arena.parallel_env(config)
    built = population.build(config, env=env, strict=False)
    for lineup, observer in ((population, None), (built, watched), (lambda e: population.build(config, env=e), None)):
        assert [e.summaries for e in play(config, lineup, [3, 4], observer)] == expected
    ticks = [s for s in watched.seen if s[0] == "tick"]
    assert len(ticks) == 2 * config.max_ticks and [s[2] for s in ticks[:config.max_ticks]] == list(range(config.max_ticks))
    assert [s[:2] for s in watched.seen if s[0] != "tick"] == [("begin", 3), ("end", 3), ("begin", 4), ("end", 4)]


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan"), 1e300])
def test_a_stored_row_with_an_unbounded_return_is_refused_not_dropped(tmp_path, value):
    """Issue 52: `StoredRow` accepted inf (the row then dropped from a table that still counted it)."""
    from experiments.evaluation.store import EpisodeKey, ResultStore

    key = EpisodeKey("allocator", "standard", "h", "default", "h", "edf", "h", 1)
    with ResultStore(tmp_path / "r.sqlite") as store:
        store.append(key, "edf", 1.0, {"allocator": {"return": value}}, 0.1)
        with pytest.raises(ValueError, match="not a row this program stores") as err:
            store.rows()
        assert "\n" not in str(err.value)
    # an unbounded focal return is refused when written (a NaN one SQLite stored as NULL and dropped)
    with ResultStore(tmp_path / "f.sqlite") as store:
        with pytest.raises(ValueError, match="is not a finite number") as err:
            store.append(key, "edf", value, {"allocator": {"return": 1.0}}, 0.1)
        assert "\n" not in str(err.value) and store.rows() == []
