"""The arms race (issue 17, item 4): its pure pieces, the warm start's refusals, the per-episode
background mix, and the whole two rounds at a tiny budget (marked rllib + ray in conftest)."""

from __future__ import annotations

import csv
import json
from dataclasses import replace

import numpy as np
import pytest

import commons_arena
from commons_arena.enums import ALLOCATOR
from experiments.studies.arms_race import (
    A1,
    A2,
    BLUFFER,
    PLANNER,
    mix_roster,
    report_rows,
    round2_args,
    seat_roster,
    verdict,
    warm_start_settings,
)
from experiments.training.args import TrainArgs
from experiments.training.networks import check_warm_start
from experiments.training.runs import saved_args
from experiments.training.warm_start import expected_linears
from policies.checkpoint_format import NetworkSpec, PolicyNetwork
from policies.learned import ModuleInterface, read_sidecar, save_policy
from policies.population import Population
from tests.figures import assert_drawn

pytestmark = pytest.mark.timeout(600)


# ------------------------------------------------------------------ pure pieces


def series(gain1: list[float], gain2: list[float], a2_minus_planner: float) -> tuple[dict, dict]:
    n = len(gain1)
    truthful = list(np.linspace(10, 20, n))
    bluffer = {("crisis", A1, "truthful"): truthful, ("crisis", A1, BLUFFER): list(np.add(truthful, gain1)),
               ("crisis", A2, "truthful"): truthful, ("crisis", A2, BLUFFER): list(np.add(truthful, gain2))}
    planner = list(np.linspace(-50, -40, n))
    allocators = {("crisis", "default", PLANNER): planner, ("crisis", "default", A1): planner,
                  ("crisis", "default", A2): list(np.add(planner, a2_minus_planner + np.linspace(-1, 1, n)))}
    return bluffer, allocators


def test_the_report_pairs_gains_seed_by_seed_and_reads_the_targets():
    bluffer, allocators = series([20, 22, 18, 21, 19], [4, 6, 5, 3, 7], 2.0)
    rows = report_rows(bluffer, allocators, "crisis", ["crisis"])
    by = {(r["measure"], r["scenario"]): r for r in rows}
    assert by[("B1 gain over truthful vs A1", "crisis")]["mean"] == pytest.approx(20.0)
    assert by[("B1 gain over truthful vs A2", "crisis")]["mean"] == pytest.approx(5.0)
    assert by[("gain cut (vs A1 - vs A2)", "crisis")]["mean"] == pytest.approx(15.0)
    assert by[("cut share (cut / gain vs A1)", "crisis")]["mean"] == pytest.approx(0.75)
    margin = by[("half-cut margin (gain vs A1 / 2 - gain vs A2)", "crisis")]
    assert margin["mean"] == pytest.approx(5.0) and margin["low"] > 0
    assert by[("A2 - planner (own population)", "crisis")]["mean"] == pytest.approx(2.0)
    assert all(r["seeds"] == 5 for r in rows)
    lines = verdict(rows, ["crisis"])
    assert "at least half: **yes**" in lines[0] and "on crisis: **yes**" in lines[1]
    # a gain cut by less than half, an allocator behind planner: both read "no"
    bluffer, allocators = series([20, 22, 18, 21, 19], [15, 14, 16, 13, 15], -3.0)
    lines = verdict(report_rows(bluffer, allocators, "crisis", ["crisis"]), ["crisis"])
    assert "at least half: **no**" in lines[0] and "on crisis: **no**" in lines[1]


def test_the_mix_roster_names_the_bluffer_in_its_seat_and_nothing_else(tmp_path):
    import tomllib

    bluffer = tmp_path / "round1" / "search" / "best"
    data = tomllib.loads(mix_roster("search", bluffer))
    # every other seat is left out: Population.resolve gives it its scenario's own population
    assert data["agents"] == {"search": f"learned:{bluffer}"} and set(data) == {"name", "agents"}


def test_round2_plays_seat_otherwise_in_the_episodes_without_the_bluffer(tmp_path):
    import tomllib

    roster = tmp_path / "background.toml"
    roster.write_text(seat_roster("truthful in search", "search", "truthful"))
    assert tomllib.loads(roster.read_text())["agents"] == {"search": "truthful"}
    assert Population.from_toml(roster).describe("crisis")["search"] == "truthful"
    assert Population.from_toml(roster).describe("crisis")["robotics"] == "greedy_bluffer"  # the scenario's own
    args = round2_args(TrainArgs(), "planner", "crisis", tmp_path / "mix.toml", 0.5, 3, 5.0, tmp_path / "r2", roster)
    assert (args.background, args.mix_background) == (roster, tmp_path / "mix.toml")
    # without one, round 2 keeps whatever background its base had (None: each scenario's own population)
    assert round2_args(TrainArgs(), "planner", "crisis", tmp_path / "mix.toml", 0.5, 3, 5.0, tmp_path).background is None


def fake_allocator(folder, hidden=(16, 16), codec="need", history=1, scenario="crisis"):
    """A data-only allocator checkpoint with random weights of the given layout."""
    config = commons_arena.load_scenario(scenario)
    scale = np.full(commons_arena.parallel_env(config).observation_space(ALLOCATOR).shape, 2.0, np.float32)
    interface = ModuleInterface(config, ALLOCATOR, scale, codec, history)
    sizes = expected_linears(interface.input_size, hidden, int(sum(interface.action_space().nvec)))
    layers, tensors, rng = [], {}, np.random.default_rng(0)
    import torch

    for i, (n_in, n_out) in enumerate(sizes):
        index = len(layers)
        layers.append({"type": "linear", "in": n_in, "out": n_out})
        tensors[f"layers.{index}.weight"] = torch.as_tensor(rng.normal(size=(n_out, n_in)), dtype=torch.float32)
        tensors[f"layers.{index}.bias"] = torch.zeros(n_out)
        if i < len(sizes) - 1:
            layers.append({"type": "tanh"})
    spec = NetworkSpec.model_validate({"layers": layers, "weights_sha256": "0" * 64, "action_distribution":
                                       {"type": "multi_categorical", "nvec": interface.action_space().nvec.tolist()}})
    save_policy(folder, PolicyNetwork(spec, tensors), config, ALLOCATOR, scale, codec=codec, history=history)
    return folder


def test_round2_takes_a_learned_allocators_codec_history_and_layers(tmp_path):
    checkpoint = fake_allocator(tmp_path / "a1", hidden=(32, 8), codec="residual", history=2)
    assert warm_start_settings(read_sidecar(checkpoint)) == {"action_codec": "residual", "history": 2, "hidden": (32, 8)}
    args = round2_args(TrainArgs(experiment="allocator_mixed"), f"learned:{checkpoint}", "crisis", tmp_path / "mix.toml",
                       0.3, 7, 5.0, tmp_path / "round2")
    assert (args.init_from, args.action_codec, args.history, args.hidden) == (f"learned:{checkpoint}", "residual", 2, (32, 8))
    assert (args.mix_share, args.iterations, args.run_name, args.experiment) == (0.3, 7, ALLOCATOR, "allocator_mixed")
    configs = [commons_arena.load_scenario(t) for t in ("standard", "elevated", "crisis")]
    check_warm_start(args.init_from, configs, args.codec, args.history, args.hidden)  # fits: no error
    scripted = round2_args(TrainArgs(), "planner", "crisis", tmp_path / "mix.toml", 0.5, 3, 5.0, tmp_path / "r2")
    assert scripted.init_from is None and scripted.action_codec == "need"  # planner: the codec's zero code


@pytest.mark.parametrize(("change", "fix"), [
    ({"hidden": (64, 64)}, "--hidden 16 16"),
    ({"codec": "residual"}, "--action-codec need"),
    ({"history": 3}, "--history 1"),
])
def test_a_checkpoint_that_does_not_fit_the_run_is_refused_naming_the_flag(tmp_path, change, fix):
    checkpoint = fake_allocator(tmp_path / "a1")
    settings = {"codec": "need", "history": 1, "hidden": (16, 16), **change}
    with pytest.raises(ValueError, match=fix):
        check_warm_start(f"learned:{checkpoint}", [commons_arena.load_scenario("crisis")], **settings)


def test_init_from_is_refused_without_a_checkpoint_or_outside_an_allocator_run(tmp_path):
    from experiments.training.setup import resolve

    with pytest.raises(ValueError, match="^--init-from learned:.*arena_policy.json is missing"):
        resolve(TrainArgs(init_from=f"learned:{tmp_path / 'nothing'}"))
    checkpoint = fake_allocator(tmp_path / "a1")
    with pytest.raises(ValueError, match="allocator learning alone"):
        resolve(TrainArgs(experiment="best_response", learners=("search",), scenario="crisis",
                          init_from=f"learned:{checkpoint}"))


# ------------------------------------------------------------------ the per-episode background mix (RLlib's env)


@pytest.mark.slow
@pytest.mark.rllib
def test_the_mix_background_plays_in_its_share_of_episodes_and_is_tagged(tmp_path):
    from experiments.training.env import MIX_INFO, ArenaRLlibEnv
    from experiments.training.env_config import ArenaEnvConfig, BackgroundMix

    mix = Population(agents={"search": {"policy": "truthful", "bluff": 3.7}})  # a bluff no default plays
    crisis = ArenaEnvConfig(scenario="crisis", scripted_in_env=True, learned_agents=(ALLOCATOR,))
    env = ArenaRLlibEnv(replace(crisis, background_mix=BackgroundMix(mix.to_dict(), 0.3)))
    played = []
    for seed in range(200):
        _, infos = env.reset(seed=seed)
        played.append(env.mix_background_played)
        assert infos[ALLOCATOR][MIX_INFO] == float(env.mix_background_played)
        assert (env.seats.background["search"].params["bluff"] == 3.7) == env.mix_background_played
        assert env.seats.background["robotics"].params["bluff"] != 3.7  # the other seats: the scenario's own
    assert 0.2 < np.mean(played) < 0.4
    # with a per-episode mix of tiers (allocator_mixed) both draws happen: every tier meets the mix background
    tiers = ArenaRLlibEnv(replace(crisis, scenarios=("standard", "crisis"), background_mix=BackgroundMix(mix.to_dict(), 0.5)))
    met = set()
    for seed in range(60):
        tiers.reset(seed=seed)
        met.add((tiers.par_env.config.name, tiers.mix_background_played))
        assert (tiers.seats.background["search"].params["bluff"] == 3.7) == tiers.mix_background_played
    assert met == {("standard", True), ("standard", False), ("crisis", True), ("crisis", False)}
    # without a mix nothing is drawn: the episode seeds are those of an env that never heard of it
    plain, again = ArenaRLlibEnv(crisis), ArenaRLlibEnv(crisis)
    for seed in range(3):
        _, infos = plain.reset(seed=seed)
        again.reset(seed=seed)
        assert plain.episode_seed == again.episode_seed and MIX_INFO not in infos[ALLOCATOR]


# ------------------------------------------------------------------ the whole arms race, tiny


@pytest.mark.slow
@pytest.mark.rllib
@pytest.mark.ray  # both rounds, trained
def test_the_arms_race_runs_both_rounds_and_reports(ray_session, tmp_path, capsys):
    from commands.cli import main

    out = tmp_path / "race"
    main(["arms-race", "--allocator", "planner", "--scenario", "crisis", "--seat", "search",
          "--round1-iterations", "1", "--round2-iterations", "1", "--round2-experiment", "allocator_ppo",
          "--share", "0.5", "--seeds", "3", "--out", str(out), "--train.eval-seeds", "2", "--train.eval-every", "1",
          "--train.train-batch-size", "200", "--train.minibatch-size", "50", "--train.num-epochs", "1",
          "--train.num-envs-per-env-runner", "2", "--train.hidden", "16", "16", "--train.quiet",
          "--train.selection-seeds", "1", "--train.selection-refine", "1"])
    # round 1: the bluffer learned against planner; round 2's mix puts it in the seat
    assert "planner" in (out / "round1" / "background.toml").read_text()
    bluffer = out / "round1" / "search" / "best"
    assert Population.from_toml(out / "round2" / "mix_background.toml").describe("crisis")["search"] == f"learned:{bluffer}"
    # and truthful (--seat-otherwise's default) in the other episodes
    assert Population.from_toml(out / "round2" / "background.toml").describe("crisis")["search"] == "truthful"
    # B1 really sat in the seat in round 2's training episodes: some, not all, played the mix
    run = out / "round2" / ALLOCATOR
    history = json.loads((run / "history.json").read_text())
    assert 0 < history[-1]["train_mix_share"] < 1
    args = saved_args(run)  # the run's experiment.toml, read back
    assert args["mix_background"] == out / "round2" / "mix_background.toml" and args["init_from"] is None
    assert args["background"] == out / "round2" / "background.toml"
    with (out / "arms_race.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    measures = [r["measure"] for r in rows]
    assert measures[:5] == ["B1 gain over truthful vs A1", "B1 gain over truthful vs A2", "gain cut (vs A1 - vs A2)",
                            "half-cut margin (gain vs A1 / 2 - gain vs A2)", "cut share (cut / gain vs A1)"]
    assert measures[5:] == ["A2 - planner (own population)", "A2 - A1 (own population)"]
    assert all(r["seeds"] == "3" for r in rows)
    for row in rows:
        if row["ci95"] != "":
            assert np.isfinite(float(row["mean"])) and float(row["ci95"]) >= 0
    # A1 is planner: A2 - A1 is A2 - planner, the same episodes
    assert rows[5]["mean"] == rows[6]["mean"]
    per_seed = json.loads((out / "arms_race.json").read_text())["per_seed"]
    gains = np.subtract(per_seed["bluffer"]["crisis / A1 / B1"], per_seed["bluffer"]["crisis / A1 / truthful"])
    assert float(rows[0]["mean"]) == pytest.approx(gains.mean())
    assert_drawn(out / "arms_race.png")
    text = (out / "arms_race.md").read_text()
    assert "The arms race, two rounds" in text and "cuts B1's gain by at least half" in text
    assert "`truthful` in the rest" in text
    assert "half-cut margin" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.rllib
@pytest.mark.ray
def test_round2_continues_a_learned_allocator_from_its_weights(ray_session, tmp_path):
    from experiments.training.train import train

    tiny = dict(iterations=1, eval_every=1, eval_seeds=2, train_batch_size=200, minibatch_size=50, num_epochs=1,
                num_envs_per_env_runner=2, hidden=(16, 16), quiet=True, scenario="crisis")
    first = train(TrainArgs(out=tmp_path, run_name="a1", **tiny))
    mix = tmp_path / "mix.toml"
    mix.write_text('agents = { search = "greedy_bluffer" }\n')
    args = round2_args(TrainArgs(**{**tiny, "hidden": (64, 64)}), f"learned:{first}", "crisis", mix, 0.5, 1, 5.0,
                       tmp_path)
    second = train(args).parent
    # its policy before the first update is A1's, exactly: weights and observation scale
    start, a1 = read_sidecar(second / "iteration_0"), read_sidecar(first)
    assert start["observation_scale"] == a1["observation_scale"] and start["network"]["layers"] == a1["network"]["layers"]
    from policies.checkpoint_format import load_network

    _, started = load_network(second / "iteration_0")
    _, original = load_network(first)
    probe = np.random.default_rng(1).normal(size=(4, original.input_size)).astype(np.float32)
    assert np.allclose(started.logits(probe), original.logits(probe), atol=1e-6)


def test_round2_history_reaches_round2_only():
    from commands.train import ArmsRace

    round1, round2 = ArmsRace(round2_history=3).rounds()
    assert (round2.history, round2.experiment) == (3, "allocator_mixed")
    assert round1.history == TrainArgs().history  # the bluffer's run: the allocator there is scripted
    assert ArmsRace().rounds()[1].history == 4
