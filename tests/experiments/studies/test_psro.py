"""Rounds of training (issue 30, item 3): the weighted mixture of backgrounds a training run draws from, the
psro experiment file's refusals, the meta-game's mixture, and one tiny round end to end that resumes without
redoing a finished step (the env and the round are marked rllib / ray in conftest)."""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from commons_arena.enums import ALLOCATOR
from experiments.studies.psro import OWN, write_mixture
from experiments.studies.psro_file import PsroError, psro_from_dict
from experiments.training.args import TrainArgs
from experiments.training.mixture import MixtureError, draw, load_mixture, mixture_from_dict, mixture_text
from experiments.training.runs import saved_args
from policies.population import Population

pytestmark = pytest.mark.timeout(900)

# ------------------------------------------------------------------ the mixture's draw


def test_the_draw_picks_each_entry_with_its_weights_share_reproducibly():
    mixture = mixture_from_dict({"backgrounds": {"own": {"weight": 2.0}, "a": {"weight": 1.0, "roster": "a.toml"},
                                                 "never": {"weight": 0.0, "roster": "n.toml"},
                                                 "b": {"weight": 1.0, "roster": "b.toml"}}})
    assert mixture.probabilities.tolist() == [0.5, 0.25, 0.0, 0.25]
    rng = np.random.default_rng(7)
    drawn = np.array([draw(rng, mixture.thresholds) for _ in range(20_000)])
    shares = np.bincount(drawn, minlength=4) / len(drawn)
    assert shares[2] == 0  # a zero weight is never drawn
    assert np.allclose(shares, [0.5, 0.25, 0.0, 0.25], atol=0.015)  # ~4.5 standard errors
    again = np.random.default_rng(7)
    assert [draw(again, mixture.thresholds) for _ in range(20_000)] == drawn.tolist()  # the seed decides every draw


def test_one_threshold_is_the_mix_share_rule():
    """--mix-background's draw (mix when u < share) is draw's with one threshold: its trajectories are unchanged."""
    for share in (0.3, 0.5, 0.9):
        a, b = np.random.default_rng(11), np.random.default_rng(11)
        assert all((draw(a, [share]) == 0) == (b.random() < share) for _ in range(2000))


@pytest.mark.parametrize("backgrounds, message", [
    ({"own": {"weight": -0.5}}, "backgrounds.own.weight must be a finite number >= 0, got -0.5"),
    ({"own": {"weight": math.nan}}, "backgrounds.own.weight must be a finite number >= 0, got nan"),
    ({"own": {"weight": math.inf}}, "backgrounds.own.weight must be a finite number >= 0, got inf"),
    ({"own": {"weight": 0.0}, "a": {"weight": 0, "roster": "a.toml"}}, "the weights must sum to more than 0, got 0"),
    ({}, "name at least one entry"),
    ({"own": {"weight": 1.0, "share": 0.5}}, "backgrounds.own.share"),
    ({"own": {"weight": "heavy"}}, "backgrounds.own.weight"),
])
def test_a_bad_mixture_is_refused_in_one_line(backgrounds, message):
    with pytest.raises(MixtureError) as err:
        mixture_from_dict({"backgrounds": backgrounds})
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_roster_that_does_not_fit_a_scenario_is_refused_naming_the_entry(tmp_path):
    (tmp_path / "bad.toml").write_text('agents = { nobody = "truthful" }\n')
    path = tmp_path / "mixture.toml"
    path.write_text(mixture_text([(OWN, None, 1.0), ("bad one", "bad.toml", 1.0)]))
    import commons_arena

    with pytest.raises(MixtureError) as err:
        load_mixture(path, [commons_arena.load_scenario("crisis")])
    assert "mixture entry 'bad one'" in str(err.value) and "nobody" in str(err.value) and "\n" not in str(err.value)
    (tmp_path / "missing.toml").unlink(missing_ok=True)
    path.write_text(mixture_text([("gone", "missing.toml", 1.0)]))
    with pytest.raises(MixtureError, match="population file not found"):
        load_mixture(path, [commons_arena.load_scenario("crisis")])
    with pytest.raises(ValueError, match="--mixture and --mix-background"):
        TrainArgs(mixture=path, mix_background=tmp_path / "bad.toml").validate()


def test_a_mixture_file_in_an_experiment_file_is_hashed_with_its_rosters(tmp_path):
    from experiments.training.config_file import ExperimentFileError, args_from_dict, experiment_text

    roster = tmp_path / "a.toml"
    roster.write_text('agents = { search = "greedy_bluffer" }\n')
    path = tmp_path / "mixture.toml"
    path.write_text(mixture_text([(OWN, None, 1.0), ("a", "a.toml", 1.0)]))
    args = TrainArgs(scenario="crisis", mixture=path, iterations=1)
    data = tomllib.loads(experiment_text(args))
    assert args_from_dict(data).mixture == path
    roster.write_text('agents = { search = "truthful" }\n')  # a roster it names changed: the rerun is refused
    with pytest.raises(ExperimentFileError, match="mixture.sha256"):
        args_from_dict(data)


# ------------------------------------------------------------------ the mixture in RLlib's env


@pytest.mark.slow
@pytest.mark.rllib
def test_the_env_plays_each_mixture_entry_in_its_share_and_the_single_mix_as_before():
    from experiments.training.env import MIX_INFO, MIXTURE_INFO, TRAINING_SEEDS, ArenaRLlibEnv
    from experiments.training.env_config import ArenaEnvConfig, BackgroundMix, BackgroundMixture

    a = Population(agents={"search": {"policy": "truthful", "bluff": 3.7}}).to_dict()
    b = Population(agents={"robotics": {"policy": "truthful", "bluff": 2.9}}).to_dict()
    crisis = ArenaEnvConfig(scenario="crisis", scripted_in_env=True, learned_agents=(ALLOCATOR,))
    config = replace(crisis, background_mixture=BackgroundMixture((OWN, "a", "b"), (None, a, b), (2, 1, 1)))
    env, twin = ArenaRLlibEnv(config), ArenaRLlibEnv(config)
    entries = []
    for i in range(400):
        _, infos = env.reset(seed=5 if i == 0 else None)  # seeded once, as RLlib does
        twin.reset(seed=5 if i == 0 else None)
        entries.append(env.mixture_entry)
        assert (twin.mixture_entry, twin.episode_seed) == (env.mixture_entry, env.episode_seed)  # reproducible
        assert infos[ALLOCATOR][MIXTURE_INFO] == env.mixture_entry and MIX_INFO not in infos[ALLOCATOR]
        assert (env.seats.background["search"].params["bluff"] == 3.7) == (env.mixture_entry == 1)
        assert (env.seats.background["robotics"].params["bluff"] == 2.9) == (env.mixture_entry == 2)
    shares = np.bincount(entries, minlength=3) / len(entries)
    assert np.allclose(shares, [0.5, 0.25, 0.25], atol=0.08)  # ~3.5 standard errors at 400 episodes
    # --mix-background: the draws and episode seeds of the rule it always had (u < share, then the seed)
    mix = ArenaRLlibEnv(replace(crisis, background_mix=BackgroundMix(a, 0.3)))
    rule = np.random.default_rng(9)
    for i in range(50):
        mix.reset(seed=9 if i == 0 else None)
        assert mix.mix_background_played == bool(rule.random() < 0.3)
        assert mix.episode_seed == int(rule.integers(*TRAINING_SEEDS)) and mix.mixture_entry is None


# ------------------------------------------------------------------ the psro file


TINY_TRAIN = {"eval_seeds": 2, "eval_every": 1, "train_batch_size": 200, "minibatch_size": 50, "num_epochs": 1,
              "num_envs_per_env_runner": 2, "hidden": [16, 16], "quiet": False, "selection_seeds": 1,
              "selection_refine": 1}


def tiny_file(**psro) -> dict:
    train = {k: v for k, v in TINY_TRAIN.items() if k != "quiet"}
    return {"psro": {"scenario": "crisis", "allocator": "planner", "rounds": 1, "seats": ["search"],
                     "tiers": ["crisis"], "seeds": 3, "payoff_seeds": 2, "best_response_iterations": 1,
                     "allocator_iterations": 1, "minutes": 5.0, **psro},
            "best_response": dict(train), "allocator": {**train, "experiment": "allocator_ppo"}}


@pytest.mark.parametrize("edit, message", [
    ({"rounds": 0}, "psro.rounds: Input should be greater than or equal to 1"),
    ({"rounds": 51}, "psro.rounds: Input should be less than or equal to 50"),
    ({"own_share": 1.0}, "psro.own_share: Input should be less than 1"),
    ({"seeds": 1}, "psro.seeds: Input should be greater than or equal to 2"),
    ({"minutes": 1e300}, "psro.minutes: Input should be less than or equal to 1000000"),
    ({"minutes": float("inf")}, "psro.minutes"),
    ({"best_response_iterations": 10**12}, "psro.best_response_iterations: Input should be less than or equal to"),
    ({"allocator_iterations": 10**12}, "psro.allocator_iterations: Input should be less than or equal to"),
    ({"first_seed": 2**63 - 2}, "psro.first_seed must be at most"),
    ({"tiers": ["crisis"] * 100_000}, "psro.tiers: List should have at most 64 items"),
    ({"tiers": ["crisis", "crisis"]}, "psro.tiers: names ['crisis'] more than once"),
    ({"seats": ["search", "search"]}, "psro.seats: names ['search'] more than once"),
    ({"seats": ["nobody"]}, "seat(s) ['nobody']"),
    ({"seats": ["broker"]}, "set psro.broker = true instead"),
    ({"allocator": "no_such_allocator"}, "no_such_allocator"),
    ({"rounds": "2"}, "psro.rounds"),
    ({"colour": "red"}, "psro.colour"),
])
def test_a_bad_psro_file_is_refused_in_one_line(edit, message):
    with pytest.raises(PsroError) as err:
        psro_from_dict(tiny_file(**edit))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_loop_sets_the_budget_and_refuses_a_file_that_sets_it():
    cfg = psro_from_dict(tiny_file())
    assert (cfg.best_response.iterations, cfg.best_response.report_seeds, cfg.allocator_args.experiment) == \
        (1, 3, "allocator_ppo")
    data = tiny_file()
    data["allocator"]["init_from"] = "learned:x"
    with pytest.raises(PsroError, match="allocator.init_from is set by the loop"):
        psro_from_dict(data)
    data = tiny_file()
    data["allocator"]["experiment"] = "best_response"
    with pytest.raises(PsroError, match="allocator.experiment must be"):
        psro_from_dict(data)


def test_the_training_mixture_weights_members_by_their_nash_share(tmp_path):
    cfg = psro_from_dict(tiny_file(own_share=0.4))
    game = {"members": [{"name": "r1-search", "seat": "search", "policy": "greedy_bluffer"},
                        {"name": "r2-search", "seat": "search", "policy": "truthful"}],
            "member_mixture": {"r1-search": 0.75, "r2-search": 0.25}}
    path = write_mixture(1, game, cfg, tmp_path)
    mixture = load_mixture(path)
    assert mixture.names == (OWN, "r1-search", "r2-search")
    assert mixture.probabilities == pytest.approx([0.4, 0.45, 0.15])
    assert mixture.rosters[0] is None
    assert Population.from_toml(mixture.rosters[1], "crisis").describe("crisis")["search"] == "greedy_bluffer"


# ------------------------------------------------------------------ one tiny round, end to end, resumed


@pytest.mark.slow
@pytest.mark.rllib
@pytest.mark.ray
def test_a_tiny_round_runs_reports_and_resumes_without_redoing_a_step(ray_session, tmp_path, capsys, monkeypatch):
    from commands.cli import main

    config = tmp_path / "psro.toml"
    data = tiny_file()
    lines = []
    for section, table in data.items():
        lines.append(f"[{section}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in table.items()]
    config.write_text("\n".join(lines) + "\n")
    out = tmp_path / "psro"
    main(["psro", "--config", str(config), "--out", str(out)])
    # round 1: a best response against A0 = planner, the meta-game, A1 trained against the mixture; A1 measured
    game = json.loads((out / "round-1" / "metagame.json").read_text())["game"]
    assert [m["name"] for m in game["members"]] == ["r1-search"] and game["member_mixture"] == {"r1-search": 1.0}
    assert np.isfinite(game["gain"][0][0])
    args = saved_args(out / "round-1" / ALLOCATOR)  # the run's record (experiment.toml)
    assert Path(args["mixture"]) == out / "round-1" / "mixture.toml" and args["init_from"] is None
    history = json.loads((out / "round-1" / ALLOCATOR / "history.json").read_text())
    shares = history[-1]["train_mixture_shares"]  # the training episodes really drew from the mixture
    assert set(shares) == {OWN, "r1-search"} and shares[OWN] + shares["r1-search"] == pytest.approx(1.0)
    report = json.loads((out / "psro.json").read_text())
    rows = report["rows"]
    assert [r["allocator"] for r in rows] == ["A0", "A1"]
    assert rows[1]["policy"].startswith("learned:") and rows[0]["policy"] == "planner"
    for row in rows:
        assert np.isfinite(row["exploitability"]) and row["exploiting_seat"] == "search"
        assert np.isfinite(row["welfare_crisis"]) and row["welfare_crisis_ci95"] >= 0
    text = (out / "psro.md").read_text()
    assert "Round 1: payoff matrix" in text and "r1-search" in text
    learned = report["learned"]  # item 4: what A1 learned in the seat, paired against A0 on the held-out seeds
    assert [(v["allocator"], v["seat"], v["vs"]) for v in learned["verdicts"]] == [("A1", "search", "A0")]
    assert learned["verdicts"][0]["verdict"] in ("discounts a bluffer", "more generous to everyone", "neither shows")
    assert [(r["allocator"], r["seat"]) for r in learned["rows"]] == [("A0", "search"), ("A1", "search")]
    assert all(np.isfinite(r["discount"]) and r["seeds"] == 3 for r in learned["rows"])
    assert "What round 1's and the last round's allocator learned" in text
    from tests.figures import assert_drawn

    assert_drawn(out / "psro.png")
    capsys.readouterr()

    # the rerun trains nothing: every step is read back
    import experiments.training.train as training

    def no_training(*_, **__):
        raise AssertionError("a stored step was trained again")

    monkeypatch.setattr(training, "train", no_training)
    main(["psro", "--config", str(config), "--out", str(out)])
    printed = capsys.readouterr().out
    assert printed.count("stored, skipped") == 5  # two exploit cells, the meta-game, the allocator, the discounting
    assert json.loads((out / "psro.json").read_text())["rows"] == rows
    assert json.loads((out / "psro.json").read_text())["learned"] == learned
    # other settings in the same folder are refused in one line
    data["psro"]["own_share"] = 0.25
    config.write_text("\n".join(f"[{s}]\n" + "\n".join(f"{k} = {json.dumps(v)}" for k, v in t.items())
                                for s, t in data.items()) + "\n")
    with pytest.raises(SystemExit):
        main(["psro", "--config", str(config), "--out", str(out)])
    assert "other settings (psro)" in capsys.readouterr().err


@pytest.mark.slow  # two tournaments
def test_the_meta_game_is_played_on_the_engine_solved_for_the_members_and_stored(tmp_path, capsys):
    from experiments.studies.psro import Member, metagame

    cfg = psro_from_dict(tiny_file(seats=["search", "robotics"], payoff_seeds=3))
    members = [Member("bluffs", "search", "greedy_bluffer"), Member("honest", "search", "truthful"),
               Member("other", "robotics", "greedy_bluffer")]
    game = metagame(1, ["planner", "proportional"], members, cfg, tmp_path)
    gain = np.asarray(game["gain"])
    assert gain.shape == (2, 3) and np.all(gain[:, 1] == 0)  # truthful's gain over truthful: 0 on every seed
    q = np.asarray(list(game["member_mixture"].values()))
    p = np.asarray(list(game["allocator_mixture"].values()))
    assert q.sum() == pytest.approx(1) and p.sum() == pytest.approx(1) and (q >= 0).all() and (p >= 0).all()
    # the members maximise the gain, the allocators minimise it: q guarantees the value whatever the allocator
    value = game["equilibrium_gain"]
    assert (gain @ q).min() == pytest.approx(value, abs=1e-6) and (p @ gain).max() == pytest.approx(value, abs=1e-6)
    assert value >= max(0.0, gain.min(axis=0).max()) - 1e-9  # at least what the safest member takes
    capsys.readouterr()
    assert metagame(1, ["planner", "proportional"], members, cfg, tmp_path) == game  # stored: read back
    assert "meta-game stored, skipped" in capsys.readouterr().out


def test_a_bad_psro_file_on_the_command_line_is_one_line(tmp_path, capsys):
    from commands.cli import main

    path = tmp_path / "psro.toml"
    path.write_text("[psro]\nrounds = 0\n")
    with pytest.raises(SystemExit) as exit_:
        main(["psro", "--config", str(path), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and "psro.rounds: Input should be greater than or equal to 1" in err
    assert not (tmp_path / "out").exists()


GOOD_GAME = {"allocators": {"A0": "planner"}, "members": [{"name": "r1-search", "seat": "search", "policy": "x"}],
             "gain": [[1.5]], "gain_ci95": [[0.5]], "member_mixture": {"r1-search": 1.0},
             "allocator_mixture": {"A0": 1.0}, "equilibrium_gain": 1.5}


@pytest.mark.parametrize(("record", "match"), [
    ([1, 2], "must hold a JSON object"),
    ({"key": {"k": 1}}, "not a record psro writes"),
    ({"key": {"k": 1}, "game": {**GOOD_GAME, "gain": "x"}}, "game: gain: Input should be a valid list"),
    ({"key": {"k": 1}, "game": {**GOOD_GAME, "gain": [[1.0, 2.0]]}}, "game.gain must be 1 rows of 1"),
    ({"key": {"k": 1}, "game": {**GOOD_GAME, "member_mixture": {}}}, "mixtures must weigh"),
    ({"key": {"k": 1}, "game": {**GOOD_GAME, "members": [{"name": "r1-search"}]}}, "members.0.seat: Field required"),
    # issue 52: gains finite and bounded, weights in [0, 1]
    ({"key": {"k": 1}, "game": {**GOOD_GAME, "gain": [[float("nan")]]}}, "game: gain.0.0"),
    ({"key": {"k": 1}, "game": {**GOOD_GAME, "equilibrium_gain": float("inf")}}, "equilibrium_gain"),
    ({"key": {"k": 1}, "game": {**GOOD_GAME, "gain_ci95": [[1e300]]}}, "gain_ci95.0.0"),
    ({"key": {"k": 1}, "game": {**GOOD_GAME, "member_mixture": {"r1-search": 2.0}}}, "member_mixture.r1-search"),
    ({"key": {"k": 1}, "game": {**GOOD_GAME, "allocator_mixture": {"A0": -1.0}}}, "allocator_mixture.A0"),
])
def test_a_tampered_step_record_is_refused_naming_the_file(tmp_path, record, match):
    """Issue 44: psro's stored steps are read back into checked models (five tracebacks came from them)."""
    from experiments.studies.psro import GAME, check_game, stored_step

    path = tmp_path / "metagame.json"
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match=match) as err:
        check_game(stored_step(path, {"k": 1}, "game", GAME), path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_good_step_record_reads_back_and_another_key_is_none(tmp_path):
    from experiments.studies.psro import GAME, check_game, stored_step

    path = tmp_path / "metagame.json"
    path.write_text(json.dumps({"key": {"k": 1}, "game": GOOD_GAME}))
    game = stored_step(path, {"k": 1}, "game", GAME)
    check_game(game, path)
    assert game == GOOD_GAME and stored_step(path, {"k": 2}, "game", GAME) is None


def test_tampered_psro_settings_are_refused(tmp_path):
    from experiments.studies.psro import PSRO_FILE, check_folder

    cfg = psro_from_dict(tiny_file())
    (tmp_path / PSRO_FILE).write_text("[1]")
    with pytest.raises(ValueError, match="must hold a JSON object"):
        check_folder(tmp_path, cfg)
